#!/usr/bin/env python3
"""Runs the examples of README.md, read from it at test time, and checks the answers
the README shows (CTest: readme.examples, readme.examples_bite; label readme).

Every fenced block of the README names in its info string what the test does with it:
  ```sh test:skip       not run: it shows no answer (installs, builds, starts a server)
  ```sh test:run        run with bash against a fresh `idem serve`
  ```python test:run    run with the Python client (clients/python) against that server
  ```cpp test:run       compiled into readme_cpp_example at build time and run
A fenced block without one of the two fails the test. `idem serve` gets every
`--tenant NAME:TOKEN` that the prose before a run block names, a RocksDB store in a
temporary directory and a free port, which replaces the README's 127.0.0.1:7070 and
localhost:7070.

What the reader sees as an answer is what is checked:
  sh      A comment `# → STATUS ...` after a command is its HTTP answer: the status,
          then either the body or, comma-separated, response headers (`Name: value`)
          and a content type (`type/subtype`, a prefix of Content-Type); the body
          follows on comment lines indented by two or more spaces (`#   {...}`), which
          are joined without separators (wrap at a comma between JSON members). The
          body is compared byte for byte with what the command printed (the headers
          that `curl -i` prints are left out). Every command must exit 0.
  python  A comment `# → VALUE` on the last line of a statement is the repr of the
          expression's value, or of the value assigned (one name).
  cpp     A comment line `// → EXPR` is a C++ condition that must hold at that point.
Volatile parts: `…` stands for any text, and a time like 2026-11-29T23:33:53.931Z
matches any time of that form. Two or more spaces then `(a note)` at the end of an
answer line are a note for the reader, not compared.

  readme_test.py check --readme README.md --idem BIN --python-client DIR
                       --cpp-source GENERATED.cc --cpp-bin BIN --work DIR
  readme_test.py extract-cpp --readme README.md --out GENERATED.cc
  readme_test.py bite (the arguments of check): changes answers in copies of the
                       README and expects check to fail naming the changed line
A failure names the README's file and line. Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

README_ADDRESSES = ("127.0.0.1:7070", "localhost:7070")
ARROW = "→"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
NOTE = re.compile(r"\s{2,}\(.*\)\s*$")
TENANT = re.compile(r"--tenant ([A-Za-z0-9_.-]+:[^\s`'\"]+)")


class ReadmeError(Exception):
    """A README that the test cannot read (a format error, not a wrong answer)."""


@dataclass
class Block:
    lang: str
    action: str  # "run" or "skip"
    line: int  # the line of the opening fence (1-based)
    lines: list[str]  # the content, without fences
    prose: str  # the text between the previous block and this one

    def where(self, name: str) -> str:
        return f"{name}:{self.line}: the {self.lang} block"

    def at(self, name: str, line: int) -> str:
        """A line inside the block, with the block named."""
        return f"{name}:{line}: (the {self.lang} block of line {self.line})"


def read_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    prose: list[str] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(`{3,}|~{3,})\s*(.*)$", lines[i])
        if not m:
            prose.append(lines[i])
            i += 1
            continue
        fence, info = m.group(1), m.group(2).split()
        start = i + 1
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ReadmeError(f"{path.name}:{start}: the fenced block is not closed")
        i += 1
        lang = info[0] if info else ""
        actions = [w[len("test:"):] for w in info[1:] if w.startswith("test:")]
        if len(actions) != 1 or actions[0] not in ("run", "skip"):
            raise ReadmeError(
                f"{path.name}:{start}: the fenced block ```{' '.join(info)} needs test:run or "
                "test:skip after its language (tests/readme/readme_test.py says what they do)")
        if actions[0] == "run" and lang not in ("sh", "python", "cpp"):
            raise ReadmeError(f"{path.name}:{start}: test:run of a ```{lang} block: only sh, "
                              "python and cpp blocks can run")
        blocks.append(Block(lang, actions[0], start, body, "\n".join(prose)))
        prose = []
    return blocks


# ---- answers -------------------------------------------------------------------------

def answer_text(line: str) -> str:
    """An answer line without its note."""
    return NOTE.sub("", line).rstrip()


def pattern(expected: str) -> re.Pattern:
    """The regular expression of an answer: `…` is any text, a time any time."""
    out = []
    for part in re.split(r"(…|" + TIME.pattern + ")", expected):
        if part == "…":
            out.append(".*?")
        elif part and TIME.fullmatch(part):
            out.append(TIME.pattern)
        else:
            out.append(re.escape(part))
    return re.compile("".join(out), re.DOTALL)


@dataclass
class Failures:
    messages: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.messages.append(message)
        print("FAIL " + message, file=sys.stderr)


# ---- sh blocks -----------------------------------------------------------------------

@dataclass
class Expect:
    line: int
    status: int
    headers: list[tuple[str, str]]
    content_type: str | None
    body: str | None


@dataclass
class Step:
    line: int
    command: str
    expect: Expect | None = None


def parse_sh(block: Block, name: str) -> list[Step]:
    steps: list[Step] = []
    lines = block.lines
    i = 0
    while i < len(lines):
        n = block.line + 1 + i
        text = lines[i]
        stripped = text.strip()
        if stripped.startswith("# " + ARROW):
            if not steps or steps[-1].expect is not None:
                raise ReadmeError(f"{name}:{n}: an answer (# {ARROW}) without a command before it")
            m = re.match(r"#\s*" + ARROW + r"\s*(\d{3})\b,?\s*(.*)$", answer_text(stripped))
            if not m:
                raise ReadmeError(f"{name}:{n}: an answer must start with the HTTP status: "
                                  f"# {ARROW} 201 ...")
            status, rest = int(m.group(1)), m.group(2).strip()
            headers: list[tuple[str, str]] = []
            content_type = None
            body_parts: list[str] = []
            if rest.startswith(("{", "[")):
                body_parts.append(rest)
            elif rest:
                for item in (x.strip() for x in rest.split(",")):
                    if ":" in item:
                        k, v = item.split(":", 1)
                        headers.append((k.strip(), v.strip()))
                    elif "/" in item:
                        content_type = item
                    else:
                        raise ReadmeError(f"{name}:{n}: {item!r} in the answer is neither "
                                          "`Header: value` nor a content type")
            i += 1
            while i < len(lines) and re.match(r"^\s*#\s{2,}\S", lines[i]):
                body_parts.append(answer_text(lines[i].strip()[1:].strip()))
                i += 1
            body = "".join(body_parts) if body_parts else None
            steps[-1].expect = Expect(n, status, headers, content_type, body)
            continue
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        command = [text]
        while command[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        steps.append(Step(n, "\n".join(command)))
        i += 1
    return steps


def substitute(text: str, address: str) -> str:
    for readme_address in README_ADDRESSES:
        text = text.replace(readme_address, address)
    return text


def last_response(header_dump: str) -> tuple[int, dict[str, str]]:
    """The status and headers of the last response in a `curl -D` dump."""
    blocks = [b for b in re.split(r"\r?\n\r?\n", header_dump) if b.startswith("HTTP/")]
    if not blocks:
        return 0, {}
    lines = blocks[-1].splitlines()
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


def run_sh(block: Block, name: str, address: str, work: Path, failures: Failures) -> str:
    steps = parse_sh(block, name)
    if not any(s.expect for s in steps):
        raise ReadmeError(f"{block.where(name)} is test:run but shows no answer (# {ARROW} ...)")
    if not any(a in "\n".join(block.lines) for a in README_ADDRESSES):
        raise ReadmeError(f"{block.where(name)} names none of {', '.join(README_ADDRESSES)}")
    d = Path(tempfile.mkdtemp(prefix="sh-", dir=work))
    script = ["set -u",
              # Runs each curl as written; its response headers go to a file as well.
              f'curl() {{ command curl --max-time 20 -D "{d}/hdr.$STEP" "$@"; }}']
    for k, s in enumerate(steps):
        script += [f"STEP={k}", "{ " + substitute(s.command, address),
                   f'}} >"{d}/out.{k}" 2>"{d}/err.{k}"; echo $? >"{d}/rc.{k}"']
    (d / "block.sh").write_text("\n".join(script) + "\n")
    p = subprocess.run(["bash", str(d / "block.sh")], check=False, timeout=120, cwd=d,
                       capture_output=True, text=True)
    checked = 0
    for k, s in enumerate(steps):
        where = f"{block.at(name, s.line)} the command `{s.command.splitlines()[0].strip()}`"
        rc_file = d / f"rc.{k}"
        rc = int(rc_file.read_text()) if rc_file.exists() else None
        if rc != 0:
            err = d / f"err.{k}"
            failures.add(f"{where} exited {rc}: "
                         f"{err.read_text(errors='replace') if err.exists() else p.stderr}")
            continue
        e = s.expect
        if e is None:
            continue
        checked += 1
        hdr = d / f"hdr.{k}"
        status, headers = last_response(hdr.read_text(errors="replace") if hdr.exists() else "")
        at = f"{block.at(name, e.line)} the answer of the command at line {s.line}"
        if status != e.status:
            failures.add(f"{at}: the README shows status {e.status}, the server answered {status}")
        for key, value in e.headers:
            got = headers.get(key.lower())
            if got is None or not pattern(value).fullmatch(got):
                failures.add(f"{at}: the README shows {key}: {value}, the server answered "
                             f"{key}: {got if got is not None else '(none)'}")
        if e.content_type is not None:
            got = headers.get("content-type", "")
            if not got.startswith(e.content_type):
                failures.add(f"{at}: the README shows Content-Type {e.content_type}, the server "
                             f"answered {got or '(none)'}")
        if e.body is not None:
            out = (d / f"out.{k}").read_text(encoding="utf-8", errors="replace")
            if out.startswith("HTTP/"):  # curl -i: the headers, a blank line, the body
                out = re.split(r"\r?\n\r?\n", out, maxsplit=1)[-1]
            out = out.rstrip("\n")
            if not pattern(e.body).fullmatch(out):
                failures.add(f"{at}: the README shows the body\n    {e.body}\n  the server "
                             f"answered\n    {out}")
    shutil.rmtree(d, ignore_errors=True)
    return f"{len(steps)} commands, {checked} answers checked"


# ---- python blocks -------------------------------------------------------------------

def run_python_block(source: str, first_line: int, name: str,
                     block_line: int) -> tuple[list[str], int]:
    """Runs a python block statement by statement (in the child process); returns the
    failures and the number of answers that matched."""
    tree = ast.parse(source, filename=name)
    ast.increment_lineno(tree, first_line - 1)
    answers: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("# " + ARROW):
            text = tok.string[len("# " + ARROW):]
            answers[tok.start[0] + first_line - 1] = answer_text(text).strip()
    failures: list[str] = []
    ns: dict = {"__name__": "__readme__"}

    def at(line: int) -> str:
        return f"{name}:{line}: (the python block of line {block_line})"

    seen = set()
    checked = 0
    for stmt in tree.body:
        expected = answers.get(stmt.end_lineno)
        try:
            if expected is not None and isinstance(stmt, ast.Expr):
                value = eval(compile(ast.Expression(stmt.value), name, "eval"), ns)
            else:
                exec(compile(ast.Module([stmt], []), name, "exec"), ns)
                if expected is not None:
                    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                            and isinstance(stmt.targets[0], ast.Name)):
                        failures.append(f"{at(stmt.end_lineno)} an answer (# {ARROW}) on a "
                                        "statement that is neither an expression nor `name = ...`")
                        continue
                    value = ns[stmt.targets[0].id]
        except Exception as e:  # noqa: BLE001 - the README's code raised: that is the finding
            failures.append(f"{at(stmt.lineno)} the statement raised {type(e).__name__}: {e}")
            return failures, checked  # what follows depends on it
        if expected is None:
            continue
        seen.add(stmt.end_lineno)
        if pattern(expected).fullmatch(repr(value)):
            checked += 1
        else:
            failures.append(f"{at(stmt.end_lineno)} the README shows {expected}, "
                            f"the code gave {value!r}")
    for line in sorted(set(answers) - seen):
        failures.append(f"{at(line)} an answer (# {ARROW}) not on the last line of a "
                        "top-level statement")
    return failures, checked


def run_python(block: Block, name: str, address: str, python_client: Path, work: Path,
               failures: Failures) -> str:
    source = substitute("\n".join(block.lines), address)
    if source == "\n".join(block.lines):
        raise ReadmeError(f"{block.where(name)} names none of {', '.join(README_ADDRESSES)}")
    env = dict(os.environ, PYTHONPATH=str(python_client), PYTHONDONTWRITEBYTECODE="1")
    spec = json.dumps({"source": source, "line": block.line + 1, "name": name,
                       "block_line": block.line})
    p = subprocess.run([sys.executable, __file__, "run-python"], input=spec, text=True,
                       capture_output=True, env=env, cwd=work, timeout=60, check=False)
    out = [line for line in p.stdout.splitlines() if line]
    result = json.loads(out[-1]) if out and out[-1].startswith("{") else None
    if result is None:
        failures.add(f"{block.where(name)}: the runner failed ({p.returncode}): {p.stderr}")
        return "not run"
    for f in result["failures"]:
        failures.add(f)
    return f"{result['checked']} answers checked"


# ---- cpp blocks ----------------------------------------------------------------------

def cpp_source(blocks: list[Block], name: str) -> str:
    """The program of the README's cpp block: its #include lines first, the rest as the
    body of main() with the README's line numbers, each `// → EXPR` a check."""
    cpp = [b for b in blocks if b.lang == "cpp" and b.action == "run"]
    if len(cpp) != 1:
        raise ReadmeError(f"{name}: {len(cpp)} cpp blocks with test:run, the test builds one")
    b = cpp[0]
    includes = [line for line in b.lines if line.startswith("#include")]
    out = [f"// Generated from {name} by tests/readme/readme_test.py: edit the README.",
           "#include <cstdio>", *includes, "", "int main() {", f'#line {b.line + 1} "{name}"']
    checks = 0
    for k, line in enumerate(b.lines):
        m = re.match(r"^\s*//\s*" + ARROW + r"\s*(.+)$", line)
        if line.startswith("#include"):
            out.append("")
        elif m:
            expr = answer_text(m.group(1))
            checks += 1
            out.append(f'if (!({expr})) {{ std::fprintf(stderr, "%s:%d: (the cpp block of line '
                       f'{b.line}) the README shows a condition that is false: %s\\n", '
                       f'__FILE__, __LINE__, R"readme({expr})readme"); return 1; }} else '
                       f'std::printf("%s:%d: ok %s\\n", __FILE__, __LINE__, '
                       f'R"readme({expr})readme");')
        else:
            out.append(line)
    if checks == 0:
        raise ReadmeError(f"{b.where(name)} is test:run but shows no answer (// {ARROW} ...)")
    out += ["return 0;", "}", ""]
    return "\n".join(out)


def run_cpp(blocks: list[Block], name: str, args, work: Path, failures: Failures) -> str:
    b = next(b for b in blocks if b.lang == "cpp" and b.action == "run")
    built_path = Path(args.cpp_source)
    built = built_path.read_text(encoding="utf-8") if built_path.exists() else ""
    wanted = cpp_source(blocks, name)
    if built != wanted:
        # The README line of the first difference (main's body keeps the README's lines).
        old, new = built.split("\n"), wanted.split("\n")
        k = next((k for k, (x, y) in enumerate(zip(old, new)) if x != y), min(len(old), len(new)))
        body = next((i + 1 for i, x in enumerate(new) if x.startswith("#line ")), len(new))
        line = b.line + 1 + k - body if k >= body else b.line
        failures.add(f"{b.at(name, line)} the block is not the one built into {args.cpp_bin} "
                     "(build again: ninja readme_cpp_example)")
        return "not run"
    d = Path(tempfile.mkdtemp(prefix="cpp-", dir=work))  # its sqlite://./idem.db goes here
    p = subprocess.run([args.cpp_bin], cwd=d, capture_output=True, text=True, timeout=60,
                       check=False)
    shutil.rmtree(d, ignore_errors=True)
    if p.returncode != 0:
        failures.add(f"{b.where(name)}: the program exited {p.returncode}: "
                     f"{p.stderr.strip()} {p.stdout.strip()}")
        return "failed"
    return f"{p.stdout.count(': ok ')} conditions checked"


# ---- the server ----------------------------------------------------------------------

class Serve:
    def __init__(self, binary: str, tenants: list[str], work: Path):
        self.dir = Path(tempfile.mkdtemp(prefix="serve-", dir=work))
        argv = [binary, "serve", "--listen", "127.0.0.1:0",
                "--store", f"rocksdb://{self.dir}/idem-db"]
        for t in tenants:
            argv += ["--tenant", t]
        self.log = self.dir / "serve.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=log)
        lines: queue.Queue[bytes] = queue.Queue()

        def drain() -> None:  # so the server never blocks on a full pipe
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(b"")

        threading.Thread(target=drain, daemon=True).start()
        try:
            first = lines.get(timeout=30).decode().strip()
        except queue.Empty:
            first = ""
        if not first.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"idem serve did not start ({' '.join(argv)}): "
                               f"{self.log.read_text(errors='replace')}")
        self.address = first[len("listening on "):]

    def stop(self) -> str | None:
        """Stops the server; what went wrong, if it did not exit 0 on SIGTERM."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = "killed after SIGTERM was ignored for 15 s"
        problem = None
        if code != 0:
            problem = f"idem serve exit status on SIGTERM: {code}; its log:\n" + \
                self.log.read_text(errors="replace")
        shutil.rmtree(self.dir, ignore_errors=True)
        return problem


# ---- the commands --------------------------------------------------------------------

def check(args) -> int:
    readme = Path(args.readme)
    name = readme.name
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        blocks = read_blocks(readme)
        cpp_source(blocks, name)  # its format errors before anything runs
        tenants: list[str] = []
        for b in blocks:
            if b.action == "run" and b.lang in ("sh", "python"):
                found = TENANT.findall(b.prose)
                if not found:
                    raise ReadmeError(f"{b.where(name)}: the text before it names no "
                                      "`--tenant NAME:TOKEN` for the server it runs against")
                tenants += [t for t in found[-1:] if t not in tenants]
    except ReadmeError as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    failures = Failures()
    report = []
    serve = Serve(args.idem, tenants, work)
    try:
        for b in blocks:
            if b.action == "skip":
                report.append(f"skipped {name}:{b.line} {b.lang} (test:skip)")
                continue
            try:
                if b.lang == "sh":
                    what = run_sh(b, name, serve.address, work, failures)
                elif b.lang == "python":
                    what = run_python(b, name, serve.address, Path(args.python_client), work,
                                      failures)
                else:
                    what = run_cpp(blocks, name, args, work, failures)
            except ReadmeError as e:
                failures.add(str(e))
                what = "not run"
            report.append(f"ran     {name}:{b.line} {b.lang}: {what}")
    finally:
        problem = serve.stop()
    if problem:
        failures.add(problem)
    print("\n".join(report))
    if failures.messages:
        print(f"readme_test: {len(failures.messages)} failures (above)", file=sys.stderr)
        return 1
    print("readme_test: every answer the README shows is what idem answers")
    return 0


# Each: (what, the README text to change, what it becomes, the text the failure names).
# The failure must name the changed line of the copy. The text must be in the README:
# an edit of the README that removes one fails readme.examples_bite; change the entry.
BITES = [
    ("an HTTP body", '# → 200 {"outcome":"completed"}', '# → 200 {"outcome":"complete"}',
     "the README shows the body"),
    ("an HTTP status", "# → 201 ", "# → 200 ", "the README shows status 200"),
    ("a response header", "Idempotent-Replayed: true", "Idempotent-Replayed: false",
     "the README shows Idempotent-Replayed: false"),
    ("a Python value", "# → ['R-20240618-000900']", "# → []", "the README shows []"),
    ("the C++ block", "kExecuted &&", "kReplayed &&", "the block is not the one built"),
    ("a block without a marker", "```python test:run", "```python", "needs test:run or test:skip"),
]


def bite(args) -> int:
    text = Path(args.readme).read_text(encoding="utf-8")
    bad = 0
    for what, old, new, message in BITES:
        if text.count(old) < 1:
            print(f"FAIL the README has no {old!r} to change ({what})", file=sys.stderr)
            bad += 1
            continue
        line = text[: text.index(old)].count("\n") + 1
        with tempfile.TemporaryDirectory(dir=args.work) as d:
            copy = Path(d) / "README.md"
            copy.write_text(text.replace(old, new, 1), encoding="utf-8")
            argv = [sys.executable, __file__, "check", "--readme", str(copy), "--idem", args.idem,
                    "--python-client", args.python_client, "--cpp-source", args.cpp_source,
                    "--cpp-bin", args.cpp_bin, "--work", d]
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        named = [m for m in p.stderr.splitlines() if message in m]
        if p.returncode == 0:
            print(f"FAIL changing {what} at README.md:{line} ({old!r} → {new!r}) did not fail "
                  f"the check:\n{p.stdout}", file=sys.stderr)
            bad += 1
        elif not any(f"README.md:{line}:" in m for m in named):
            print(f"FAIL changing {what} at README.md:{line} failed, but no message says "
                  f"README.md:{line}: ... {message}:\n{p.stderr}", file=sys.stderr)
            bad += 1
        else:
            print(f"ok: changing {what} at README.md:{line} fails: {named[0].strip()}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for cmd in ("check", "bite"):
        p = sub.add_parser(cmd)
        p.add_argument("--readme", required=True)
        p.add_argument("--idem", required=True)
        p.add_argument("--python-client", required=True)
        p.add_argument("--cpp-source", required=True)
        p.add_argument("--cpp-bin", required=True)
        p.add_argument("--work", required=True)
    p = sub.add_parser("extract-cpp")
    p.add_argument("--readme", required=True)
    p.add_argument("--out", required=True)
    sub.add_parser("run-python")
    args = ap.parse_args()
    for arg in ("readme", "idem", "python_client", "cpp_source", "cpp_bin", "work", "out"):
        if getattr(args, arg, None):  # the commands run in other directories
            setattr(args, arg, str(Path(getattr(args, arg)).resolve()))
    if args.command == "check":
        return check(args)
    if args.command == "bite":
        return bite(args)
    if args.command == "extract-cpp":
        readme = Path(args.readme)
        try:
            source = cpp_source(read_blocks(readme), readme.name)
        except ReadmeError as e:
            print(e, file=sys.stderr)
            return 1
        out = Path(args.out)
        if not out.exists() or out.read_text(encoding="utf-8") != source:
            out.write_text(source, encoding="utf-8")
        return 0
    spec = json.loads(sys.stdin.read())
    failures, checked = run_python_block(spec["source"], spec["line"], spec["name"],
                                         spec["block_line"])
    print(json.dumps({"failures": failures, "checked": checked}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
