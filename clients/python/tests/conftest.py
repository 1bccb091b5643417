"""Fixtures: a real `idem serve` on a free port, clients of it, and a fake sleep.

The server binary comes from $IDEM_BIN (CTest sets it to the built target), else
/work/main/build/src/cli/idem. It runs once per session with an SQLite store in a
temporary directory and two tenants; every test uses its own keys.
"""

from __future__ import annotations

import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from idem_client import Client, RetryPolicy  # noqa: E402

DEFAULT_BIN = "/work/main/build/src/cli/idem"


@dataclass
class FakeSleep:
    """Records the delays the retry policy asks for instead of sleeping."""

    delays: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@dataclass
class Server:
    url: str
    token1: str
    token2: str
    log: Path

    def client(self, token: str | None = None, **kw) -> Client:
        return Client(self.url, self.token1 if token is None else token, **kw)

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode("utf-8")
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"metric {name} not in /metrics")

    def wait_for_waiters(self, above: float, timeout: float = 20.0) -> None:
        """Blocks until idem_claim_waits_total exceeds `above`: a claim is waiting."""
        deadline = time.monotonic() + timeout
        while self.metric("idem_claim_waits_total") <= above:
            if time.monotonic() > deadline:
                raise AssertionError("no claim started waiting")
            time.sleep(0.01)


def _start(binary: str, workdir: Path, global_args: tuple[str, ...] = (),
           serve_args: tuple[str, ...] = ()
           ) -> tuple[subprocess.Popen, threading.Thread, Server]:
    token1, token2 = secrets.token_hex(16), secrets.token_hex(16)
    log = workdir / "serve.log"
    log_file = open(log, "wb")
    proc = subprocess.Popen(
        [binary, *global_args, "serve", "--listen", "127.0.0.1:0",
         "--store", f"sqlite://{workdir}/idem.db",
         "--tenant", f"t1:{token1}", "--tenant", f"t2:{token2}", *serve_args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file)
    log_file.close()
    lines: queue.Queue[bytes] = queue.Queue()

    def drain() -> None:  # keeps reading so the server never blocks on a full pipe
        with proc.stdout:
            for line in proc.stdout:
                lines.put(line)
        lines.put(b"")

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    try:
        first = lines.get(timeout=30).decode("utf-8").strip()
    except queue.Empty:
        first = ""
    prefix = "listening on "
    if not first.startswith(prefix):
        proc.kill()
        proc.wait()
        drainer.join(timeout=10)
        raise RuntimeError(f"idem serve did not start (first line {first!r}); log:\n"
                           + log.read_text(errors="replace"))
    return proc, drainer, Server(f"http://{first[len(prefix):]}", token1, token2, log)


def _idem_binary() -> str:
    binary = os.environ.get("IDEM_BIN")
    if binary is None:
        binary = DEFAULT_BIN
        if not os.path.exists(binary):
            pytest.skip(f"no idem binary at {binary}; set IDEM_BIN")
    elif not os.access(binary, os.X_OK):
        pytest.fail(f"IDEM_BIN={binary} is not an executable")
    return binary


def _serve(workdir: Path, global_args: tuple[str, ...] = (), serve_args: tuple[str, ...] = ()):
    """Runs an idem serve for the fixture's life, then checks it stops cleanly."""
    proc, drainer, srv = _start(_idem_binary(), workdir, global_args, serve_args)
    yield srv
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = "killed after SIGTERM was ignored for 15 s"
    drainer.join(timeout=10)
    assert code == 0, f"idem serve exit status on SIGTERM: {code}"  # a graceful stop exits 0


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    yield from _serve(tmp_path_factory.mktemp("idem"))


#: The config of the case table's server (clients/CASES.md): biz_type `expiring` is
#: kept 1 s; its tombstones stay an hour, so a purged key answers `expired` for the run.
CASES_CONFIG = """[retention.expiring]
redelivery = "1s"
recon_cycle = "0s"
confirm_window = "0s"
margin = "0s"
tombstone = "1h"
"""


@pytest.fixture(scope="session")
def cases_server(tmp_path_factory) -> Server:
    """An idem serve for clients/cases.json: the config above, purging every second."""
    workdir = tmp_path_factory.mktemp("idem-cases")
    config = workdir / "idem.toml"
    config.write_text(CASES_CONFIG)
    yield from _serve(workdir, ("--config", str(config)), ("--purge-every", "1s"))


@pytest.fixture
def fake_sleep() -> FakeSleep:
    return FakeSleep()


@pytest.fixture
def client(server, fake_sleep) -> Client:
    """A t1 client whose retries would be recorded in `fake_sleep` (none expected)."""
    c = server.client(retry=RetryPolicy(sleep=fake_sleep, random=lambda: 1.0))
    yield c
    c.close()


@pytest.fixture
def client2(server) -> Client:
    c = server.client(server.token2)
    yield c
    c.close()


@pytest.fixture
def key(request) -> str:
    """A key of this test's own."""
    return f"{request.node.name}-{uuid.uuid4().hex[:12]}"
