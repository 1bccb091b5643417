"""@idempotent and `with client.idempotent(...)` against a real `idem serve`."""

import threading
import time

import pytest

from idem_client import (CachedFailureError, Claim, FingerprintMismatch, InProgress, LeaseLost,
                         NotFound, RawJSON, Unavailable, current_claim, fingerprint_of,
                         idempotent)


class Counter:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def test_first_call_runs_and_a_duplicate_replays_without_calling(client, key):
    ran = Counter()

    @idempotent(client, biz_type="refund", key=lambda req: req["order_no"])
    def refund(req):
        ran(req)
        return {"refund_id": "F-1", "amount": req["amount"], "parts": (1, 2)}

    req = {"order_no": key, "amount": "12.50"}
    first = refund(req)
    again = refund(dict(req))
    assert first == again == {"refund_id": "F-1", "amount": "12.50", "parts": [1, 2]}
    assert ran.calls == [(req,)]
    assert refund.__name__ == "refund"


def test_the_default_fingerprint_is_sha256_of_the_bound_arguments(client, key):
    @idempotent(client, biz_type="refund", key=lambda order_no, amount, currency="EUR": order_no)
    def refund(order_no, amount, currency="EUR"):
        return "ok"

    refund(key, 5)
    expected = fingerprint_of({"order_no": key, "amount": 5, "currency": "EUR"})
    assert client.get("refund", key).fingerprint == expected
    assert expected.startswith("sha256:") and len(expected) == 7 + 64
    # The same call spelled with keywords is the same request.
    assert refund(amount=5, order_no=key) == "ok"


def test_the_same_key_with_other_arguments_is_refused_without_calling(client, key):
    ran = Counter()

    @idempotent(client, biz_type="refund", key=lambda req: req["order_no"])
    def refund(req):
        ran(req)
        return "ok"

    refund({"order_no": key, "amount": 1})
    with pytest.raises(FingerprintMismatch):
        refund({"order_no": key, "amount": 2})
    assert len(ran.calls) == 1


def test_a_fingerprint_callable_and_none(client, key):
    @idempotent(client, biz_type="refund", key=lambda self, n: f"{key}-{n}",
                fingerprint=lambda self, n: f"n={n}")
    def method(self, n):
        return n * 2

    @idempotent(client, biz_type="refund", key=lambda n: f"{key}-nofp-{n}", fingerprint=False)
    def plain(n):
        return n

    assert method(object(), 3) == 6
    assert method(object(), 3) == 6
    assert client.get("refund", f"{key}-3").fingerprint == "n=3"
    assert plain(4) == 4
    assert client.get("refund", f"{key}-nofp-4").fingerprint is None


def test_a_retryable_exception_releases_the_key(client, key):
    attempts = []

    @idempotent(client, biz_type="refund", key=lambda order_no: order_no)
    def refund(order_no):
        attempts.append(order_no)
        if len(attempts) == 1:
            raise ConnectionError("payment gateway reset the connection")
        return {"refund_id": "F-2"}

    with pytest.raises(ConnectionError):
        refund(key)
    assert refund(key) == {"refund_id": "F-2"}
    assert refund(key) == {"refund_id": "F-2"}
    assert len(attempts) == 2
    assert client.get("refund", key).token == 2  # released, then claimed again


def test_a_non_retryable_exception_is_cached(client, key):
    ran = Counter()

    @idempotent(client, biz_type="refund", key=lambda order_no: order_no)
    def refund(order_no):
        ran(order_no)
        raise ValueError("amount exceeds the original payment")

    with pytest.raises(ValueError):
        refund(key)
    for _ in range(2):
        with pytest.raises(CachedFailureError) as info:
            refund(key)
        assert info.value.error == {"type": "ValueError",
                                    "message": "amount exceeds the original payment"}
    assert ran.calls == [(key,)]
    assert client.get("refund", key).state == "FAILED"


def test_the_retryable_set_is_configurable(client, key):
    class Busy(Exception):
        pass

    calls = []

    @idempotent(client, biz_type="refund", key=lambda k: k, retryable=(Busy,))
    def work(k):
        calls.append(k)
        if len(calls) == 1:
            raise Busy("later")
        if len(calls) == 2:
            raise ConnectionError("not retryable here")
        return "never"

    with pytest.raises(Busy):
        work(key)
    with pytest.raises(ConnectionError):
        work(key)
    with pytest.raises(CachedFailureError) as info:
        work(key)
    assert info.value.error == {"type": "ConnectionError", "message": "not retryable here"}
    assert len(calls) == 2


def test_a_result_json_cannot_hold_is_a_cached_failure(client, key):
    @idempotent(client, biz_type="refund", key=lambda k: k)
    def work(k):
        return {"when": object()}

    with pytest.raises(TypeError):
        work(key)
    with pytest.raises(CachedFailureError) as info:
        work(key)
    assert info.value.error["type"] == "TypeError"


def test_arguments_json_cannot_hold_need_a_fingerprint(client, key):
    @idempotent(client, biz_type="refund", key=lambda x: key)
    def work(x):
        return 1

    with pytest.raises(TypeError, match="fingerprint"):
        work(object())
    with pytest.raises(NotFound):
        client.get("refund", key)  # nothing was claimed


def test_the_function_sees_its_claim(client, key):
    seen = []

    @idempotent(client, biz_type="refund", key=lambda k: k)
    def work(k):
        seen.append(current_claim())
        return "done"

    assert current_claim() is None
    work(key)
    work(key)
    assert len(seen) == 1 and isinstance(seen[0], Claim)
    assert (seen[0].token, seen[0].takeover) == (1, False)
    assert current_claim() is None


def test_a_concurrent_duplicate_is_in_progress_or_waits(server, client, key):
    inside, release = threading.Event(), threading.Event()
    calls = []

    def body(k):
        calls.append(k)
        inside.set()
        assert release.wait(30)
        return {"refund_id": "F-3"}

    plain = idempotent(client, biz_type="refund", key=lambda k: k)(body)
    waiting = idempotent(client, biz_type="refund", key=lambda k: k, wait_ms=20_000)(body)

    results = {}
    first = threading.Thread(target=lambda: results.setdefault("first", plain(key)))
    first.start()
    assert inside.wait(30)
    with pytest.raises(InProgress):
        plain(key)
    waits_before = server.metric("idem_claim_waits_total")
    second = threading.Thread(target=lambda: results.setdefault("second", waiting(key)))
    second.start()
    server.wait_for_waiters(above=waits_before)
    release.set()
    first.join(30)
    second.join(30)
    assert results == {"first": {"refund_id": "F-3"}, "second": {"refund_id": "F-3"}}
    assert calls == [key]


def test_decorating_a_coroutine_function_is_refused(client):
    with pytest.raises(TypeError):
        @idempotent(client, biz_type="refund", key=lambda: "k")
        async def work():
            return 1


# -- the with form -------------------------------------------------------------------


def test_with_block_runs_once_and_replays(client, key):
    ran = Counter()
    outcomes = []
    for _ in range(3):
        with client.idempotent("refund", key, fingerprint="sha256:aa") as op:
            if op.acquired:
                ran()
                op.complete(RawJSON('{"refund_id": "F-4", "amount": 12.50}'))
        outcomes.append((op.acquired, op.replayed, op.result, op.raw))
    assert len(ran.calls) == 1
    raw = b'{"refund_id": "F-4", "amount": 12.50}'
    assert outcomes == [(True, False, {"refund_id": "F-4", "amount": 12.5}, raw)] + \
        [(False, True, {"refund_id": "F-4", "amount": 12.5}, raw)] * 2


def test_with_block_exception_is_cached_and_raised_on_entry(client, key):
    with pytest.raises(KeyError):
        with client.idempotent("refund", key) as op:
            assert op.token == 1 and not op.takeover
            raise KeyError("order")
    with pytest.raises(CachedFailureError) as info:
        with client.idempotent("refund", key):
            pytest.fail("the body of a cached failure must not run")
    assert info.value.error == {"type": "KeyError", "message": "'order'"}


def test_with_block_retryable_exception_releases(client, key):
    with pytest.raises(Unavailable):
        with client.idempotent("refund", key):
            raise Unavailable("downstream store down", status=503)
    with client.idempotent("refund", key) as op:
        assert (op.acquired, op.token) == (True, 2)
        op.complete("second try")
    assert client.claim("refund", key).result == "second try"


def test_with_block_explicit_fail(client, key):
    with client.idempotent("refund", key) as op:
        op.fail({"code": "DECLINED"})
    assert client.claim("refund", key).error == {"code": "DECLINED"}
    with client.idempotent("refund", f"{key}-r") as op:
        op.fail("busy", retryable=True)
    assert client.claim("refund", f"{key}-r").token == 2


def test_with_block_that_forgets_to_finish_leaves_the_claim(client, key):
    with pytest.raises(RuntimeError, match="without complete"):
        with client.idempotent("refund", key) as op:
            assert op.acquired
    rec = client.get("refund", key)
    assert (rec.state, rec.token) == ("PROCESSING", 1)


def test_complete_twice_or_after_a_replay_is_a_programming_error(client, key):
    with client.idempotent("refund", key) as op:
        op.complete(1)
        with pytest.raises(RuntimeError):
            op.complete(2)
    with client.idempotent("refund", key) as op:
        assert op.replayed
        with pytest.raises(RuntimeError):
            op.complete(3)
    assert client.get("refund", key).result == 1


def test_a_result_with_a_lone_surrogate_is_a_cached_failure(client, key):
    with pytest.raises(UnicodeEncodeError):
        with client.idempotent("refund", key) as op:
            op.complete("\ud800")
    with pytest.raises(CachedFailureError) as info:
        client.idempotent("refund", key).__enter__()
    assert info.value.error["type"] == "UnicodeEncodeError"


def test_a_lease_lost_while_running_propagates_and_reports_nothing(client, key):
    @idempotent(client, biz_type="refund", key=lambda k: k, lease_ms=100)
    def slow(k):
        # Another worker takes the expired lease over before this one finishes.
        deadline = time.monotonic() + 20
        while True:
            try:
                taken = client.claim("refund", k)
                break
            except InProgress:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert taken.takeover
        return "late"

    with pytest.raises(LeaseLost):
        slow(key)
    rec = client.get("refund", key)
    assert (rec.state, rec.token) == ("PROCESSING", 2)
