"""The shared case table, clients/cases.json (clients/CASES.md says how to read it):
every `decorator` case through ``@idempotent`` and every `http` case through
``Client``, against an idem serve that keeps biz_type `expiring` 1 s and purges every
second (conftest's ``cases_server``). One test per case, named after it; a case this
runner cannot read fails instead of being skipped.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from idem_client import (DEFAULT_RETRYABLE, CachedFailure, CachedFailureError, Claim, Conflict,
                         Expired, FingerprintMismatch, IdemError, InProgress, InvalidRequest,
                         KeyReused, LeaseLost, NotFound, Replayed, RetryPolicy, idempotent)

CASES_FILE = Path(__file__).resolve().parents[2] / "cases.json"
TABLE = json.loads(CASES_FILE.read_text(encoding="utf-8"))

# The typed errors and their names in the table.
ERROR_NAMES: dict[type[IdemError], str] = {
    InProgress: "in_progress",
    FingerprintMismatch: "fingerprint_mismatch",
    KeyReused: "key_reused",
    LeaseLost: "lease_lost",
    Expired: "expired",
    Conflict: "conflict",
    NotFound: "not_found",
    InvalidRequest: "invalid_request",
}

PURGE_DEADLINE_S = 10.0


def _for_python(case: dict[str, Any]) -> bool:
    return "only" not in case or "python" in case["only"]


def _check_fields(what: str, given: dict[str, Any], known: set[str]) -> None:
    unknown = set(given) - known
    assert not unknown, f"{what}: this runner does not know {sorted(unknown)}"


class CasePermanent(Exception):
    """A handler's permanent failure: not one of the decorator's retryable classes."""


class CaseRetryable(Exception):
    """A handler's retryable failure: the decorator releases the key."""


class Run:
    """One case's run: its keys, its client, its handler runs and its ledger."""

    def __init__(self, server, name: str) -> None:
        self.name = name
        self.suffix = uuid.uuid4().hex[:12]
        self.sends = 0  # requests the client made (counted where their ids are made)
        self.client = server.client(retry=RetryPolicy.none(), request_id=self._request_id)
        self.lock = threading.Lock()
        self.handler_runs = 0
        self.ledger: Counter[str] = Counter()
        self.tokens: dict[str, int] = {}

    def _request_id(self) -> str:
        with self.lock:
            self.sends += 1
        return uuid.uuid4().hex

    def key(self, spec: dict[str, Any]) -> str:
        if "key_literal" in spec:
            return spec["key_literal"]
        return f"cases-{self.name}-{spec['key']}-{self.suffix}"

    def purge(self, spec: dict[str, Any]) -> None:
        """Polls the record until the server's purge has made it a tombstone (410)."""
        _check_fields("purge", spec, {"key", "key_literal", "biz_type"})
        key = self.key(spec)
        deadline = time.monotonic() + PURGE_DEADLINE_S
        while True:
            try:
                self.client.get(spec["biz_type"], key)
            except Expired:
                return
            assert time.monotonic() < deadline, \
                f"{key} was not purged within {PURGE_DEADLINE_S} s"
            time.sleep(0.1)


@dataclass
class Answer:
    outcome: str
    result: Any = None
    error_text: str = ""  # the stored failure's JSON, or the error's message


def _decorator_call(run: Run, call: dict[str, Any]) -> Answer:
    """One call of the case's handler through @idempotent."""
    handler = call["handler"]
    _check_fields("handler", handler, {"returns", "fails", "message", "sleep_ms"})
    key = run.key(call)
    ran = False
    raised: list[BaseException] = []

    def work() -> Any:
        nonlocal ran
        ran = True
        with run.lock:
            run.handler_runs += 1
        if "sleep_ms" in handler:
            time.sleep(handler["sleep_ms"] / 1000)
        if "fails" in handler:
            kind = {"permanent": CasePermanent, "retryable": CaseRetryable}[handler["fails"]]
            raised.append(kind(handler["message"]))
            raise raised[-1]
        with run.lock:
            run.ledger[key] += 1
        return handler["returns"]

    fn = idempotent(run.client, biz_type=call["biz_type"], key=lambda: key,
                    fingerprint=lambda: call.get("fingerprint"), wait_ms=call.get("wait_ms"),
                    retryable=DEFAULT_RETRYABLE + (CaseRetryable,))(work)
    sends_before = run.sends
    try:
        result = fn()
    except CachedFailureError as exc:
        return Answer("cached_failure", error_text=exc.raw.decode("utf-8"))
    except InvalidRequest as exc:
        refused = exc.status is None and run.sends == sends_before
        return Answer("invalid_request" if refused else "invalid_request_sent", error_text=str(exc))
    except IdemError as exc:
        for cls, name in ERROR_NAMES.items():
            if isinstance(exc, cls):
                return Answer(name, error_text=str(exc))
        raise
    except (CasePermanent, CaseRetryable) as exc:
        assert raised and exc is raised[-1], f"not the handler's own error: {exc!r}"
        if isinstance(exc, CaseRetryable):
            return Answer("error", error_text=str(exc))
        record = run.client.get(call["biz_type"], key)
        stored = record.raw.decode("utf-8") if record.raw is not None else ""
        return Answer("failed" if record.state == "FAILED" else f"failed, {record.state}",
                      error_text=stored)
    return Answer("executed" if ran else "replayed", result=result)


def _check_answer(answer: Answer, expect: dict[str, Any], single: bool) -> None:
    if single and "outcome" in expect:
        assert answer.outcome == expect["outcome"], answer
    if "result" in expect:
        assert answer.outcome in ("executed", "replayed"), answer
        assert answer.result == expect["result"], answer
    if "error_contains" in expect:
        assert expect["error_contains"] in answer.error_text, answer


def _decorator_step(run: Run, step: dict[str, Any]) -> None:
    if "purge" in step:
        _check_fields("step", step, {"purge"})
        run.purge(step["purge"])
        return
    _check_fields("step", step, {"call", "expect"})
    call, expect = step["call"], step["expect"]
    _check_fields("call", call, {"key", "key_literal", "biz_type", "fingerprint", "retention_s",
                                 "handler", "concurrent", "wait_ms"})
    _check_fields("expect", expect, {"outcome", "outcomes", "result", "error_contains",
                                     "handler_runs", "ledger_rows"})
    n = call.get("concurrent", 1)
    if n == 1:
        answers = [_decorator_call(run, call)]
    else:
        answers: list[Answer] = [None] * n  # type: ignore[list-item]
        start = threading.Barrier(n)

        def one(i: int) -> None:
            start.wait()
            answers[i] = _decorator_call(run, call)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(a is not None for a in answers), "a concurrent call raised (see above)"
    if "outcomes" in expect:
        assert dict(Counter(a.outcome for a in answers)) == expect["outcomes"], answers
    for answer in answers:
        _check_answer(answer, expect, single=n == 1)
    if "handler_runs" in expect:
        assert run.handler_runs == expect["handler_runs"]
    if "ledger_rows" in expect:
        assert run.ledger[run.key(call)] == expect["ledger_rows"]


def _http_step(run: Run, step: dict[str, Any]) -> None:
    if "sleep_ms" in step:
        _check_fields("step", step, {"sleep_ms"})
        time.sleep(step["sleep_ms"] / 1000)
        return
    if "purge" in step:
        _check_fields("step", step, {"purge"})
        run.purge(step["purge"])
        return
    (verb,) = set(step) - {"expect"}
    spec, expect = step[verb], step.get("expect", {})
    _check_fields("expect", expect, {"outcome", "takeover", "save_token", "result", "error_json",
                                     "error", "status", "retry_after", "client_side",
                                     "error_contains"})
    key = run.key(spec)
    c = run.client
    sends_before = run.sends
    try:
        if verb == "claim":
            _check_fields("claim", spec, {"key", "key_literal", "biz_type", "fingerprint",
                                          "lease_ms"})
            value = c.claim(spec["biz_type"], key, spec.get("fingerprint"),
                            lease_ms=spec.get("lease_ms"))
        elif verb == "complete":
            _check_fields("complete", spec, {"key", "biz_type", "token", "result"})
            value = c.complete(spec["biz_type"], key, run.tokens[spec["token"]],
                               spec["result"])
        elif verb == "fail":
            _check_fields("fail", spec, {"key", "biz_type", "token", "retryable", "error"})
            value = c.fail(spec["biz_type"], key, run.tokens[spec["token"]], spec["retryable"],
                           spec["error"])
        else:
            raise AssertionError(f"this runner does not know the step {verb!r}")
    except IdemError as exc:
        name = next((n for cls, n in ERROR_NAMES.items() if isinstance(exc, cls)), None)
        assert "error" in expect, f"{verb} raised {exc!r}"
        assert name == expect["error"], repr(exc)
        if "status" in expect:
            assert exc.status == expect["status"], repr(exc)
        if "retry_after" in expect:
            assert (getattr(exc, "retry_after", None) is not None) == expect["retry_after"]
        if "client_side" in expect:
            assert (exc.status is None and run.sends == sends_before) == expect["client_side"]
        if "error_contains" in expect:
            assert expect["error_contains"] in str(exc)
        return
    assert "error" not in expect, f"{verb} answered {value!r}, not the error {expect['error']}"
    if isinstance(value, Claim):
        outcome = "acquired"
        assert value.takeover == expect.get("takeover", value.takeover)
        if "save_token" in expect:
            run.tokens[expect["save_token"]] = value.token
    elif isinstance(value, Replayed):
        outcome = "replayed"
        assert value.result == expect.get("result", value.result)
    elif isinstance(value, CachedFailure):
        outcome = "cached_failure"
        assert value.error == expect.get("error_json", value.error)
    else:
        outcome = value
    assert outcome == expect.get("outcome", outcome)
    if "save_token" in expect or "takeover" in expect:
        assert outcome == "acquired"
    if "result" in expect:
        assert outcome == "replayed"
    if "error_json" in expect:
        assert outcome == "cached_failure"


def _cases(section: str) -> list[Any]:
    return [pytest.param(case, id=case["name"]) for case in TABLE[section] if _for_python(case)]


def _run_case(server, case: dict[str, Any], step_fn) -> None:
    run = Run(server, case["name"])
    try:
        for step in case["steps"]:
            step_fn(run, step)
    finally:
        run.client.close()


@pytest.mark.parametrize("case", _cases("decorator"))
def test_decorator_case(cases_server, case):
    _run_case(cases_server, case, _decorator_step)


@pytest.mark.parametrize("case", _cases("http"))
def test_http_case(cases_server, case):
    _run_case(cases_server, case, _http_step)
