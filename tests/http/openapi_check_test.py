#!/usr/bin/env python3
"""Tests of openapi_check.py: the checker must catch drift, not only pass.

Each case feeds a hand-made record (as tests/http/client.h writes them) to the
checker over the real docs/openapi.yaml: answers the server gives today pass;
an undocumented status, a body that breaks its schema, a wrong content type, a
missing or undocumented header, a wrong Allow, a request the document would not
accept, a broken document and an empty record directory are each reported.

Usage: openapi_check_test.py [--spec docs/openapi.yaml] [unittest options]
"""

import copy
import io
import json
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openapi_check  # noqa: E402

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                    "openapi.yaml")

JSON = "application/json"
PROBLEM = "application/problem+json"
METRICS = "text/plain; version=0.0.4; charset=utf-8"


def rec(method, target, status, body, content_type=JSON, headers=None, request_body=None,
        authorization=True):
    h = {"content-type": content_type, "server": "idem"}
    h.update(headers or {})
    r = {"method": method, "target": target, "status": status, "content_type": content_type,
         "headers": h, "body": body if isinstance(body, str) else json.dumps(body),
         "authorization": authorization, "raw": False, "test": "Synthetic.Case"}
    if request_body is not None:
        r["request_body"] = request_body
        r["request_body_bytes"] = len(request_body)
    return r


def problem(status, slug, title, outcome=None, **extra):
    p = {"type": "urn:idem:problem:" + slug if slug else "about:blank", "title": title,
         "status": status, "detail": "something"}
    if outcome:
        p["outcome"] = outcome
    p.update(extra)
    return p


CLAIM = '{"biz_type":"refund","key":"R-1"}'
LEASE = "2024-06-18T07:13:00.123Z"

# Answers `idem serve` gives today; every one must pass.
GOOD = [
    rec("POST", "/v1/claims", 201,
        '{"outcome":"acquired","token":1,"lease_until":"%s","takeover":false,'
        '"expires_at":"%s"}' % (LEASE, LEASE), request_body=CLAIM),
    rec("POST", "/v1/claims", 201,
        '{"outcome":"acquired","token":2,"lease_until":"%s","takeover":true,'
        '"previous_token":1,"expires_at":null}' % LEASE, request_body=CLAIM),
    rec("POST", "/v1/claims", 201,
        '{"outcome":"acquired","token":0,"degraded":true,"lease_until":null,"takeover":false}',
        request_body='{"biz_type":"feed_like","key":"l","wait_ms":0}'),
    rec("POST", "/v1/claims", 200,
        '{"outcome":"replayed","expires_at":"%s","result":{"a" : 1.50}}' % LEASE,
        headers={"idempotent-replayed": "true"}, request_body=CLAIM),
    rec("POST", "/v1/claims", 200, '{"outcome":"cached_failure","expires_at":null,"error":"E"}',
        headers={"idempotent-replayed": "true"}, request_body=CLAIM),
    rec("POST", "/v1/claims", 410,
        problem(410, "expired", "Expired", "expired", purged_at=LEASE, tombstone_until=LEASE),
        PROBLEM),
    rec("GET", "/v1/records/refund/R-1", 410,
        problem(410, "expired", "Expired", "expired", purged_at=LEASE, tombstone_until=None),
        PROBLEM),
    rec("GET", "/v1/records?biz_type=refund&limit=2", 200,
        '{"records":[{"biz_type":"refund","key":"R-1","state":"SUCCEEDED","token":1,'
        '"lease_until":null,"fingerprint":null,"created_at":"%s","updated_at":"%s",'
        '"expires_at":null}],"next_cursor":"Ui0x"}' % (LEASE, LEASE)),
    rec("GET", "/v1/records", 200, '{"records":[],"next_cursor":null}'),
    rec("GET", "/v1/records?state=BUSY", 400,
        problem(400, "invalid_request", "Invalid request"), PROBLEM),
    rec("POST", "/v1/claims", 409,
        problem(409, "in_progress", "Claim in progress", "in_progress", lease_until=LEASE),
        PROBLEM, headers={"retry-after": "29"}),
    rec("POST", "/v1/claims", 409, problem(409, "key_reused", "Key reused", "key_reused"),
        PROBLEM),
    rec("POST", "/v1/claims", 422,
        problem(422, "fingerprint_mismatch", "Fingerprint mismatch", "fingerprint_mismatch"),
        PROBLEM),
    rec("POST", "/v1/claims", 401, problem(401, "", "Unauthorized"), PROBLEM,
        headers={"www-authenticate": 'Bearer realm="idem"'}, authorization=False),
    rec("POST", "/v1/claims", 503,
        problem(503, "store_unavailable", "Store unavailable", "unavailable"), PROBLEM,
        headers={"retry-after": "1"}),
    rec("POST", "/v1/claims/complete", 200, '{"outcome":"completed"}',
        request_body='{"biz_type":"refund","key":"R-1","token":1,"result":[1]}'),
    rec("POST", "/v1/claims/complete", 409,
        problem(409, "lease_lost", "Lease lost", "lease_lost"), PROBLEM),
    rec("POST", "/v1/claims/fail", 200, '{"outcome":"released"}',
        request_body='{"biz_type":"r","key":"k","token":1,"retryable":true,"error":null}'),
    rec("POST", "/v1/claims/fail", 404, problem(404, "not_found", "No such record", "not_found"),
        PROBLEM),
    rec("GET", "/v1/records/refund/R-1", 200,
        '{"biz_type":"refund","key":"R-1","state":"SUCCEEDED","token":1,"lease_until":null,'
        '"fingerprint":"fp1","created_at":"%s","updated_at":"%s","expires_at":"%s",'
        '"result":{"a":1}}' % (LEASE, LEASE, LEASE)),
    rec("GET", "/v1/records/refund/R%2F1?x=y", 200,
        '{"biz_type":"refund","key":"R/1","state":"PROCESSING","token":3,"lease_until":"%s",'
        '"fingerprint":null,"created_at":"%s","updated_at":"%s","expires_at":null}'
        % (LEASE, LEASE, LEASE)),
    rec("GET", "/healthz", 200, '{"status":"ok"}', authorization=False),
    rec("GET", "/readyz", 503, problem(503, "store_unavailable", "Store unavailable"), PROBLEM,
        headers={"retry-after": "1"}),
    rec("GET", "/metrics", 200, "# HELP idem_http_requests_total HTTP answers\n", METRICS,
        authorization=False),
    rec("DELETE", "/v1/claims", 405, problem(405, "", "Method Not Allowed"), PROBLEM,
        headers={"allow": "POST"}),
    rec("GET", "/nope", 404, problem(404, "", "Not Found"), PROBLEM),
    rec("GET", "/", 400, problem(400, "bad_http", "Malformed HTTP request"), PROBLEM),
    rec("POST", "/v1/claims", 413, problem(413, "", "Content Too Large"), PROBLEM),
]


class CheckerTest(unittest.TestCase):
    document = None

    @classmethod
    def setUpClass(cls):
        cls.document = openapi_check.Document.load(SPEC)

    def errors(self, record, document=None):
        return openapi_check.Checker(document or self.document).check_record(record)

    def assertReported(self, record, *fragments):
        errors = self.errors(record)
        self.assertTrue(errors, "not reported: %r" % (record,))
        text = "\n".join(errors)
        for f in fragments:
            self.assertIn(f, text)

    def test_document_has_no_problems(self):
        self.assertEqual(self.document.problems(), [])

    def test_answers_of_today_pass(self):
        for r in GOOD:
            with self.subTest(target=r["target"], status=r["status"]):
                self.assertEqual(self.errors(r), [])

    def test_undocumented_status_is_reported(self):
        self.assertReported(rec("POST", "/v1/claims", 418, problem(418, "", "I'm a teapot"),
                                PROBLEM), "status 418 is not documented for POST /v1/claims")
        self.assertReported(rec("GET", "/healthz", 503, problem(503, "x", "Down"), PROBLEM),
                            "status 503 is not documented")
        self.assertReported(rec("GET", "/nope", 200, '{"status":"ok"}'),
                            "status 200 is not documented for unrouted target /nope")
        self.assertReported(rec("HEAD", "/healthz", 200, ""), "status 200 is not documented")

    def test_body_that_violates_the_schema_is_reported(self):
        # No token.
        self.assertReported(rec("POST", "/v1/claims", 201,
                                '{"outcome":"acquired","lease_until":"%s","takeover":false}'
                                % LEASE), "body")
        # An undocumented member (additionalProperties: false).
        self.assertReported(rec("POST", "/v1/claims", 201,
                                '{"outcome":"acquired","token":1,"lease_until":"%s",'
                                '"takeover":false,"expires_at":null,"ttl_ms":5}' % LEASE), "body")
        # takeover without previous_token.
        self.assertReported(rec("POST", "/v1/claims", 201,
                                '{"outcome":"acquired","token":2,"lease_until":"%s",'
                                '"takeover":true}' % LEASE), "body")
        # Not a date-time.
        self.assertReported(rec("POST", "/v1/claims", 201,
                                '{"outcome":"acquired","token":1,"lease_until":"tomorrow",'
                                '"takeover":false}'), "body")
        # An outcome string the document does not know.
        self.assertReported(rec("POST", "/v1/claims", 409,
                                problem(409, "in_progress", "Claim in progress", "busy",
                                        lease_until=LEASE), PROBLEM,
                                headers={"retry-after": "3"}), "body")
        # A record state outside the enum, a SUCCEEDED record without result.
        self.assertReported(rec("GET", "/v1/records/a/b", 200,
                                '{"biz_type":"a","key":"b","state":"RELEASED","token":1,'
                                '"lease_until":null,"fingerprint":null,"created_at":null,'
                                '"updated_at":null}'), "body")
        self.assertReported(rec("GET", "/v1/records/a/b", 200,
                                '{"biz_type":"a","key":"b","state":"SUCCEEDED","token":1,'
                                '"lease_until":null,"fingerprint":null,"created_at":null,'
                                '"updated_at":null}'), "body")
        # Problem status differs from the HTTP status; not JSON at all; duplicate members.
        self.assertReported(rec("POST", "/v1/claims/fail", 404,
                                problem(400, "not_found", "No such record", "not_found"),
                                PROBLEM), "status")
        self.assertReported(rec("GET", "/healthz", 200, "ok"), "not valid JSON")
        self.assertReported(rec("GET", "/healthz", 200, '{"status":"ok","status":"ok"}'),
                            "duplicate member")

    def test_wrong_content_type_is_reported(self):
        self.assertReported(rec("GET", "/healthz", 200, '{"status":"ok"}', "text/html"),
                            "content type 'text/html' is not documented")
        self.assertReported(rec("POST", "/v1/claims", 422,
                                problem(422, "fingerprint_mismatch", "Fingerprint mismatch",
                                        "fingerprint_mismatch"), JSON),
                            "content type")
        self.assertReported(rec("GET", "/metrics", 200, "# HELP idem_http_requests_total x\n",
                                "text/plain; version=1.0.0"), "content type")

    def test_headers_are_checked(self):
        # Required header missing.
        self.assertReported(rec("POST", "/v1/claims", 200, '{"outcome":"replayed","result":1}'),
                            "required header idempotent-replayed is missing")
        self.assertReported(rec("POST", "/v1/claims", 503,
                                problem(503, "store_unavailable", "Store unavailable",
                                        "unavailable"), PROBLEM),
                            "required header retry-after is missing")
        # Value outside its schema.
        self.assertReported(rec("POST", "/v1/claims", 409,
                                problem(409, "in_progress", "Claim in progress", "in_progress",
                                        lease_until=LEASE), PROBLEM,
                                headers={"retry-after": "0"}), "header retry-after")
        # An API header the response does not document.
        self.assertReported(rec("POST", "/v1/claims", 201,
                                '{"outcome":"acquired","token":1,"lease_until":"%s",'
                                '"takeover":false}' % LEASE,
                                headers={"idempotent-replayed": "true"}),
                            "idempotent-replayed: 'true' is sent but not documented")

    def test_allow_must_match_the_documented_methods(self):
        self.assertReported(rec("DELETE", "/v1/claims", 405, problem(405, "", "Method Not Allowed"),
                                PROBLEM, headers={"allow": "GET"}), "Allow is 'GET'")

    def test_requests_the_server_accepts_must_be_documented(self):
        self.assertReported(rec("POST", "/v1/claims", 201,
                                '{"outcome":"acquired","token":1,"lease_until":"%s",'
                                '"takeover":false}' % LEASE,
                                request_body='{"biz_type":"r","key":"k","ttl":5}'),
                            "request body accepted by the server but not by the document")
        self.assertReported(rec("POST", "/v1/claims/complete", 200, '{"outcome":"completed"}',
                                request_body='{"biz_type":"r","key":"k","token":1,"result":1}',
                                authorization=False), "without an Authorization header")

    def test_a_broken_document_is_reported(self):
        doc = copy.deepcopy(self.document.doc)
        doc["paths"]["/v1/claims"]["post"]["responses"]["201"]["content"][JSON]["schema"] = {
            "$ref": "#/components/schemas/Nope"}
        doc["paths"]["/healthz"]["get"]["responses"] = {}
        doc["paths"]["/v1/records/{biz_type}/{key}"]["get"]["parameters"].pop()
        doc["components"]["schemas"]["Record"]["type"] = "thing"
        problems = "\n".join(openapi_check.Document(doc).problems())
        self.assertIn("#/components/schemas/Nope does not resolve", problems)
        self.assertIn("GET /healthz: no responses", problems)
        self.assertIn("path parameter {key} is not declared", problems)
        self.assertIn("#/components/schemas/Record: not a valid JSON Schema", problems)

    def test_run_reports_file_and_line_and_fails(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "123.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps(GOOD[0]) + "\n")
                f.write(json.dumps(rec("GET", "/healthz", 418, "")) + "\n")
                f.write("not json\n")
            out = io.StringIO()
            self.assertEqual(openapi_check.run(SPEC, [d], out), 1)
            text = out.getvalue()
            self.assertIn(path + ":2: [Synthetic.Case] GET /healthz -> 418: status 418", text)
            self.assertIn(path + ":3: not a JSON record", text)
            self.assertIn("openapi: 2 responses checked, 1 operations covered", text)

    def test_run_passes_good_records(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "1.jsonl"), "w") as f:
                for r in GOOD:
                    f.write(json.dumps(r) + "\n")
            out = io.StringIO()
            self.assertEqual(openapi_check.run(SPEC, [d], out), 0, out.getvalue())
            self.assertIn("openapi: %d responses checked, 8 operations covered" % len(GOOD),
                          out.getvalue())

    def test_zero_records_fail(self):
        with tempfile.TemporaryDirectory() as d:
            out = io.StringIO()
            self.assertEqual(openapi_check.run(SPEC, [d], out), 1)
            self.assertIn("no recorded responses", out.getvalue())
            self.assertEqual(openapi_check.run(SPEC, [os.path.join(d, "missing")], out), 1)

    def test_reset_empties_the_directory(self):
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "records")
            openapi_check.reset(target)
            with open(os.path.join(target, "9.jsonl"), "w") as f:
                f.write("{}\n")
            openapi_check.reset(target)
            self.assertEqual(os.listdir(target), [])


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "--spec":
        SPEC = args[1]
        args = args[2:]
    unittest.main(argv=[sys.argv[0]] + args, verbosity=2)
