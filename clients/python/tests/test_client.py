"""Client calls against a real `idem serve`: every outcome, exactly."""

import socket
import threading
import time

import pytest

from idem_client import (CachedFailure, Claim, Client, Conflict, FingerprintMismatch,
                         InProgress, InvalidRequest, KeyReused, LeaseLost, NotFound, RawJSON,
                         Record, Replayed, RetryPolicy, Unauthorized, Unavailable)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def claim_until_acquired(client, biz_type, key, **kw) -> Claim:
    """Claims until the live lease in the way has run out (a short lease_ms)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return client.claim(biz_type, key, **kw)
        except InProgress:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_acquire_complete_replay_is_byte_identical(client, key, fake_sleep):
    c = client.claim("refund", key, "sha256:ab12")
    assert isinstance(c, Claim)
    assert (c.outcome, c.token, c.takeover, c.previous_token, c.degraded) == (
        "acquired", 1, False, None, False)
    assert c.lease_until.endswith("Z")

    raw = b'{"refund_id": "F-1", "amount": 12.50, "tags": ["a", "\xc3\xa9"]}'
    client.complete("refund", key, c.token, RawJSON(raw))

    for _ in range(2):
        r = client.claim("refund", key, "sha256:ab12")
        assert r == Replayed(result={"refund_id": "F-1", "amount": 12.5, "tags": ["a", "\u00e9"]},
                             raw=raw)
        assert r.outcome == "replayed"
        assert r.text == raw.decode("utf-8")
    assert fake_sleep.delays == []


def test_a_plain_result_round_trips(client, key):
    c = client.claim("refund", key)
    client.complete("refund", key, c.token, {"z": [1, None, True], "a": "x"})
    r = client.claim("refund", key)
    assert r.result == {"z": [1, None, True], "a": "x"}
    assert r.raw == b'{"z":[1,null,true],"a":"x"}'


def test_fingerprint_mismatch_is_422(client, key):
    client.claim("refund", key, "sha256:ab12")
    with pytest.raises(FingerprintMismatch) as info:
        client.claim("refund", key, "sha256:ffff")
    e = info.value
    assert (e.status, e.type, e.outcome, e.title) == (
        422, "urn:idem:problem:fingerprint_mismatch", "fingerprint_mismatch",
        "Fingerprint mismatch")
    assert e.attempts == 1


def test_key_reused_under_another_biz_type(client, key):
    c = client.claim("refund", key)
    with pytest.raises(KeyReused) as info:
        client.claim("payout", key)
    assert (info.value.status, info.value.outcome) == (409, "key_reused")
    with pytest.raises(KeyReused):
        client.complete("payout", key, c.token, 1)


def test_a_live_lease_is_in_progress_and_not_retried(client, key, fake_sleep):
    c = client.claim("refund", key, lease_ms=30_000)
    with pytest.raises(InProgress) as info:
        client.claim("refund", key)
    e = info.value
    assert (e.status, e.outcome, e.type) == (409, "in_progress", "urn:idem:problem:in_progress")
    assert 1 <= e.retry_after <= 30
    assert e.lease_until == c.lease_until
    assert e.attempts == 1
    assert fake_sleep.delays == []


def test_a_stale_token_loses_the_lease(client, key):
    first = client.claim("refund", key)
    assert client.fail("refund", key, first.token, True, "try again") == "released"
    second = client.claim("refund", key)
    assert second.token > first.token
    with pytest.raises(LeaseLost) as info:
        client.complete("refund", key, first.token, {"late": True})
    assert (info.value.status, info.value.outcome) == (409, "lease_lost")
    assert client.complete("refund", key, second.token, {"ok": True}) == "completed"
    assert client.claim("refund", key).result == {"ok": True}


def test_an_expired_lease_is_taken_over_and_the_old_token_fenced(client, key):
    first = client.claim("refund", key, lease_ms=100)
    second = claim_until_acquired(client, "refund", key)
    assert (second.takeover, second.previous_token) == (True, first.token)
    assert second.token > first.token
    with pytest.raises(LeaseLost):
        client.complete("refund", key, first.token, 1)


def test_a_holder_whose_lease_ran_out_unclaimed_still_completes(client, key):
    c = client.claim("refund", key, lease_ms=100)
    time.sleep(0.3)  # the lease runs out; nobody takes it over
    client.complete("refund", key, c.token, {"late": "but fine"})
    assert client.get("refund", key).state == "SUCCEEDED"


def test_complete_repeats_with_the_same_result_and_conflicts_with_another(client, key):
    c = client.claim("refund", key)
    client.complete("refund", key, c.token, {"a": 1})
    client.complete("refund", key, c.token, {"a": 1})
    with pytest.raises(Conflict) as info:
        client.complete("refund", key, c.token, {"a": 2})
    assert (info.value.status, info.value.outcome) == (409, "conflict")


def test_fail_retryable_releases_the_key_to_a_higher_token(client, key):
    first = client.claim("refund", key)
    client.fail("refund", key, first.token, True, {"why": "timeout"})
    again = client.claim("refund", key)
    assert isinstance(again, Claim)
    assert again.token == first.token + 1
    assert again.takeover is False


def test_fail_non_retryable_is_a_cached_failure(client, key):
    c = client.claim("refund", key)
    client.fail("refund", key, c.token, False, {"code": "E1", "msg": "card blocked"})
    for _ in range(2):
        r = client.claim("refund", key)
        assert r == CachedFailure(error={"code": "E1", "msg": "card blocked"},
                                  raw=b'{"code":"E1","msg":"card blocked"}')
    rec = client.get("refund", key)
    assert (rec.state, rec.error, rec.result) == ("FAILED", {"code": "E1", "msg": "card blocked"},
                                                  None)


def test_get_shows_the_record(client, key):
    c = client.claim("refund", key, "sha256:01")
    held = client.get("refund", key)
    assert (held.state, held.token, held.lease_until, held.raw) == (
        "PROCESSING", c.token, c.lease_until, None)
    client.complete("refund", key, c.token, RawJSON('{"n": 1.0}'))
    rec = client.get("refund", key)
    assert isinstance(rec, Record)
    assert (rec.biz_type, rec.key, rec.state, rec.token, rec.fingerprint) == (
        "refund", key, "SUCCEEDED", c.token, "sha256:01")
    assert (rec.result, rec.raw, rec.error, rec.lease_until) == ({"n": 1.0}, b'{"n": 1.0}',
                                                                 None, None)
    assert rec.created_at.endswith("Z") and rec.updated_at.endswith("Z")


def test_keys_with_slashes_spaces_and_utf8_are_percent_encoded(client, key):
    odd_key = f"R/2024 06?x=1&y#\u00e9\u20ac%2F-{key}"
    odd_type = "re fund/\u00fc"
    c = client.claim(odd_type, odd_key)
    client.complete(odd_type, odd_key, c.token, "done")
    rec = client.get(odd_type, odd_key)
    assert (rec.biz_type, rec.key, rec.result) == (odd_type, odd_key, "done")


def test_get_of_a_missing_record_is_404(client, key):
    with pytest.raises(NotFound) as info:
        client.get("refund", key)
    assert (info.value.status, info.value.type, info.value.outcome) == (
        404, "urn:idem:problem:not_found", "not_found")
    with pytest.raises(NotFound):
        client.complete("refund", key, 1, "x")


def test_bad_input_is_400(client, key):
    with pytest.raises(InvalidRequest) as info:
        client.claim("refund", key, lease_ms=5)
    assert (info.value.status, info.value.type) == (400, "urn:idem:problem:invalid_request")
    assert "lease_ms" in info.value.detail


def test_bad_names_are_refused_before_sending(server, key):
    sent = []
    c = server.client(request_id=lambda: sent.append(1) or "rid")
    refusals = {
        lambda: c.claim("refund", ""): "key is empty",
        lambda: c.claim("refund", "a\x00b"): "key holds a NUL byte at character 1",
        lambda: c.claim("", key): "biz_type is empty",
        lambda: c.claim("refund", "k" * 256): "key is 256 bytes, over the limit of 255",
        lambda: c.claim("refund", "\ud800"): "key is not UTF-8",
        lambda: c.claim("refund", key, "f" * 1025): "fingerprint is 1025 bytes",
        lambda: c.complete("refund", "", 1, "x"): "key is empty",
        lambda: c.fail("x" * 256, key, 1, False, "x"): "biz_type is 256 bytes",
        lambda: c.get("refund", 7): "key is a int, not a str",
    }
    for call, detail in refusals.items():
        with pytest.raises(InvalidRequest) as info:
            call()
        assert info.value.status is None
        assert info.value.detail.startswith(detail), info.value.detail
        assert info.value.slug == "invalid_request"
    assert sent == []  # nothing was sent


def test_wait_ms_attaches_to_a_holder_that_completes(server, client, key):
    holder = client.claim("refund", key)
    waits_before = server.metric("idem_claim_waits_total")
    answers = []
    waiter = threading.Thread(
        target=lambda: answers.append(client.claim("refund", key, wait_ms=20_000)))
    waiter.start()
    server.wait_for_waiters(above=waits_before)
    client.complete("refund", key, holder.token, {"refund_id": "F-9"})
    waiter.join(timeout=30)
    assert answers == [Replayed(result={"refund_id": "F-9"}, raw=b'{"refund_id":"F-9"}')]


def test_wait_ms_becomes_the_holder_when_the_holder_releases(server, client, key):
    holder = client.claim("refund", key)
    waits_before = server.metric("idem_claim_waits_total")
    answers = []
    waiter = threading.Thread(
        target=lambda: answers.append(client.claim("refund", key, wait_ms=20_000)))
    waiter.start()
    server.wait_for_waiters(above=waits_before)
    client.fail("refund", key, holder.token, True, "released")
    waiter.join(timeout=30)
    assert len(answers) == 1 and isinstance(answers[0], Claim)
    assert answers[0].token == holder.token + 1


def test_wait_ms_that_runs_out_is_in_progress(client, key):
    client.claim("refund", key, lease_ms=30_000)
    with pytest.raises(InProgress):
        client.claim("refund", key, wait_ms=200)


def test_a_racing_claim_is_won_by_exactly_one_thread(client, key):
    barrier = threading.Barrier(8)
    answers, errors = [], []

    def race():
        barrier.wait()
        try:
            answers.append(client.claim("refund", key))
        except InProgress as e:
            errors.append(e)

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert [a.token for a in answers] == [1]
    assert len(errors) == 7


def test_an_unknown_token_is_401_and_not_retried(server, key, fake_sleep):
    with server.client("not-a-tenant-token",
                       retry=RetryPolicy(sleep=fake_sleep, random=lambda: 1.0)) as bad:
        with pytest.raises(Unauthorized) as info:
            bad.claim("refund", key)
        with pytest.raises(Unauthorized):
            bad.get("refund", key)
    assert (info.value.status, info.value.attempts) == (401, 1)
    assert fake_sleep.delays == []


def test_tenants_do_not_see_each_others_records(client, client2, key):
    c = client.claim("refund", key)
    client.complete("refund", key, c.token, {"tenant": "t1"})
    with pytest.raises(NotFound):
        client2.get("refund", key)
    mine = client2.claim("refund", key)
    assert isinstance(mine, Claim) and mine.token == 1
    client2.complete("refund", key, mine.token, {"tenant": "t2"})
    assert client.claim("refund", key).result == {"tenant": "t1"}
    assert client2.claim("refund", key).result == {"tenant": "t2"}


def test_a_server_that_is_down_is_unavailable_after_the_retries(key, fake_sleep):
    url = f"http://127.0.0.1:{closed_port()}"
    with Client(url, "token", timeout=2,
                retry=RetryPolicy(sleep=fake_sleep, random=lambda: 1.0)) as down:
        with pytest.raises(Unavailable) as info:
            down.claim("refund", key)
        e = info.value
        assert (e.status, e.attempts, e.retryable) == (None, 4, True)
        assert isinstance(e.__cause__, ConnectionRefusedError)
        assert fake_sleep.delays == [0.1, 0.2, 0.4]
        assert down.ready() is False


def test_retry_policy_none_sends_once(key, fake_sleep):
    with Client(f"http://127.0.0.1:{closed_port()}", "t",
                retry=RetryPolicy(max_attempts=1, sleep=fake_sleep)) as down:
        with pytest.raises(Unavailable) as info:
            down.complete("refund", key, 1, "x")
    assert info.value.attempts == 1
    assert fake_sleep.delays == []


def test_one_client_serves_many_threads_on_kept_alive_connections(client, key):
    results = {}

    def work(i):
        k = f"{key}-{i}"
        for _ in range(5):
            c = client.claim("refund", k)
            if isinstance(c, Claim):
                client.complete("refund", k, c.token, {"i": i})
        results[i] = client.claim("refund", k).result

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {i: {"i": i} for i in range(6)}


def test_calls_of_one_thread_share_a_kept_alive_connection(client, key):
    client.claim("refund", key)
    sock = client._local.slot.conn.sock
    assert sock is not None
    client.get("refund", key)
    client.get("refund", key)
    assert client._local.slot.conn.sock is sock


def test_close_then_reuse_reconnects(client, key):
    client.claim("refund", key)
    client.close()
    assert client._local.slot.conn.sock is None
    assert client.get("refund", key).state == "PROCESSING"


def test_ready_and_repr_hide_the_token(server, client):
    assert client.ready() is True
    assert server.token1 not in repr(client)
