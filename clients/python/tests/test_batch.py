"""Client.batch against a real `idem serve`: typed results per item, in order."""

import pytest

from idem_client import (BatchResult, CachedFailure, Claim, ClaimItem, CompleteItem, FailItem,
                         InProgress, InvalidRequest, KeyReused, NotFound, RawJSON, Replayed,
                         Unauthorized)


def test_a_batch_answers_each_item_as_its_single_call(client, key, fake_sleep):
    a, b = key + "-a", key + "-b"
    raw = b'{"amount": 12.50, "id": "F-1"}'
    results = client.batch([
        ClaimItem("refund", a, fingerprint="sha256:ab"),
        ClaimItem("refund", a),
        ClaimItem("refund", b),
        CompleteItem("refund", a, 1, RawJSON(raw)),
        ClaimItem("refund", a),
        FailItem("refund", b, 1, False, {"code": "declined"}),
        ClaimItem("refund", b),
        ClaimItem("payout", a),
        CompleteItem("refund", key + "-none", 1, None),
    ])
    assert len(results) == 9
    assert all(isinstance(r, BatchResult) for r in results)

    claim = results[0]
    assert (claim.status, claim.outcome, claim.ok) == (201, "acquired", True)
    assert isinstance(claim.value, Claim)
    assert (claim.value.token, claim.value.takeover) == (1, False)

    busy = results[1]
    assert (busy.status, busy.outcome, busy.ok, busy.value) == (409, "in_progress", False, None)
    assert isinstance(busy.error, InProgress)
    assert busy.error.lease_until == claim.value.lease_until
    with pytest.raises(InProgress):
        busy.unwrap()

    assert results[2].value.token == 1
    assert (results[3].status, results[3].outcome, results[3].value) == (200, "completed", None)
    # The replayed result keeps its exact bytes, as a single claim's does.
    assert results[4].value == Replayed(result={"amount": 12.5, "id": "F-1"}, raw=raw)
    assert results[4].unwrap() == results[4].value
    assert (results[5].status, results[5].outcome) == (200, "failed")
    assert results[6].value == CachedFailure(error={"code": "declined"},
                                             raw=b'{"code":"declined"}')
    assert isinstance(results[7].error, KeyReused)
    assert isinstance(results[8].error, NotFound)
    assert results[8].status == 404
    assert fake_sleep.delays == []

    # The single calls see what the batch wrote.
    assert client.claim("refund", a) == results[4].value
    assert client.get("refund", b).state == "FAILED"


def test_a_bad_item_is_its_own_error_and_the_others_go_on(client, key):
    results = client.batch([
        ClaimItem("refund", key),
        ClaimItem("refund", ""),
        CompleteItem("refund", key, 1, "done"),
    ])
    assert results[0].outcome == "acquired"
    assert results[1].status == 400
    assert results[1].outcome is None
    assert isinstance(results[1].error, InvalidRequest)
    assert results[1].error.detail.startswith('requests[1]: field "key"')
    assert results[2].outcome == "completed"


def test_batch_limits_are_checked_before_sending(client, key):
    with pytest.raises(ValueError, match="1 to 1000 items, got 0"):
        client.batch([])
    with pytest.raises(ValueError, match="got 1001"):
        client.batch([ClaimItem("refund", key)] * 1001)
    with pytest.raises(TypeError, match="ClaimItem, CompleteItem or FailItem"):
        client.batch([("refund", key)])
    with pytest.raises(NotFound):
        client.get("refund", key)  # nothing was sent


def test_a_batch_of_the_whole_limit(client, key):
    results = client.batch([ClaimItem("refund", f"{key}-{i}") for i in range(1000)])
    assert [r.outcome for r in results] == ["acquired"] * 1000
    assert {r.value.token for r in results} == {1}


def test_the_token_names_the_tenant_of_every_item(server, client, client2, key):
    assert client.batch([ClaimItem("refund", key)])[0].outcome == "acquired"
    assert client2.batch([ClaimItem("refund", key)])[0].outcome == "acquired"
    with pytest.raises(Unauthorized):
        server.client("not-a-token").batch([ClaimItem("refund", key + "-x")])
