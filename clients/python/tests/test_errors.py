"""Unit tests of the answer -> exception mapping, on bodies `idem serve` sends."""

import json

import pytest

import idem_client as ic
from idem_client.errors import error_from_response

IN_PROGRESS = (b'{"type":"urn:idem:problem:in_progress","title":"Claim in progress","status":409,'
               b'"detail":"another holder\'s lease on this key runs until '
               b'2026-12-01T09:04:15.610Z",'
               b'"outcome":"in_progress","lease_until":"2026-12-01T09:04:15.610Z"}')


def test_in_progress_carries_retry_after_and_lease_until():
    e = error_from_response(409, {"Retry-After": "30"}, IN_PROGRESS, request_id="r-1")
    assert type(e) is ic.InProgress
    assert (e.status, e.type, e.title, e.outcome) == (
        409, "urn:idem:problem:in_progress", "Claim in progress", "in_progress")
    assert e.retry_after == 30.0
    assert e.lease_until == "2026-12-01T09:04:15.610Z"
    assert e.slug == "in_progress"
    assert e.request_id == "r-1"
    assert e.body["status"] == 409
    assert not e.retryable


@pytest.mark.parametrize("status,body,cls", [
    (409, b'{"type":"urn:idem:problem:key_reused","title":"Key reused","status":409,'
          b'"detail":"d","outcome":"key_reused"}', ic.KeyReused),
    (422, b'{"type":"urn:idem:problem:fingerprint_mismatch","title":"Fingerprint mismatch",'
          b'"status":422,"detail":"d","outcome":"fingerprint_mismatch"}', ic.FingerprintMismatch),
    (409, b'{"type":"urn:idem:problem:lease_lost","title":"Lease lost","status":409,'
          b'"detail":"d","outcome":"lease_lost"}', ic.LeaseLost),
    (409, b'{"type":"urn:idem:problem:conflict","title":"Already finished differently",'
          b'"status":409,"detail":"d","outcome":"conflict"}', ic.Conflict),
    (404, b'{"type":"urn:idem:problem:not_found","title":"No such record","status":404,'
          b'"detail":"d","outcome":"not_found"}', ic.NotFound),
    (404, b'{"type":"about:blank","title":"Not Found","status":404,"detail":"no route"}',
     ic.NotFound),
    (400, b'{"type":"urn:idem:problem:invalid_request","title":"Invalid request","status":400,'
          b'"detail":"field \\"key\\": InvalidKey: key is empty"}', ic.InvalidRequest),
    (413, b'{"type":"about:blank","title":"Content Too Large","status":413,"detail":"d"}',
     ic.InvalidRequest),
    (401, b'{"type":"about:blank","title":"Unauthorized","status":401,"detail":"d"}',
     ic.Unauthorized),
    (403, b'{"type":"about:blank","title":"Forbidden","status":403,"detail":"d"}',
     ic.Unauthorized),
    (410, b'{"type":"urn:idem:problem:expired","title":"Expired","status":410,"detail":"d",'
          b'"outcome":"expired"}', ic.Expired),
    (500, b'{"type":"urn:idem:problem:internal","title":"Internal error","status":500,'
          b'"detail":"d"}', ic.ServerError),
])
def test_each_problem_gets_its_class(status, body, cls):
    e = error_from_response(status, {}, body)
    assert type(e) is cls
    assert e.status == status
    assert e.detail == json.loads(body)["detail"]
    assert isinstance(e, ic.IdemError)


def test_store_unavailable_is_retryable_with_retry_after():
    body = (b'{"type":"urn:idem:problem:store_unavailable","title":"Store unavailable",'
            b'"status":503,"detail":"claim: down","outcome":"unavailable"}')
    e = error_from_response(503, {"Retry-After": "1"}, body)
    assert type(e) is ic.Unavailable
    assert e.retryable and e.retry_after == 1.0


def test_a_gateway_page_that_is_not_json_still_maps_by_status():
    e = error_from_response(502, {}, b"<html>Bad Gateway</html>", reason="Bad Gateway")
    assert type(e) is ic.Unavailable
    assert (e.type, e.title, e.detail) == ("about:blank", "Bad Gateway", "<html>Bad Gateway</html>")
    assert e.body is None


def test_server_errors_retry_only_for_5xx():
    assert error_from_response(500, {}, b"{}").retryable is True
    assert error_from_response(418, {}, b"{}").retryable is False


def test_the_answer_request_id_wins_and_is_printed():
    e = error_from_response(401, {"X-Request-Id": "srv-7"}, b'{"detail":"no token"}',
                            request_id="mine")
    assert e.request_id == "srv-7"
    assert str(e) == "401 no token (request id srv-7)"
