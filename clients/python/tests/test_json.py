"""Unit tests of the exact-bytes helpers and the default fingerprint."""

import hashlib
import json
from pathlib import Path

import pytest

from idem_client import RawJSON, canonical_json, fingerprint_of
from idem_client._json import encode_object, member_spans, raw_member


def test_raw_member_returns_the_value_bytes_verbatim():
    text = '{"outcome":"replayed","result":{"amount": 12.50, "n":[1, 2e3]} }'
    assert raw_member(text, "result") == b'{"amount": 12.50, "n":[1, 2e3]}'
    assert raw_member(text, "outcome") == b'"replayed"'
    assert raw_member(text, "error") is None


def test_raw_member_handles_strings_with_braces_and_utf8():
    text = ' { "a" : "}{,:\\"" , "result" : "r\u00e9sum\u00e9 \u20ac" } '
    assert raw_member(text, "result") == '"r\u00e9sum\u00e9 \u20ac"'.encode("utf-8")
    assert set(member_spans(text)) == {"a", "result"}


def test_member_spans_of_an_empty_object_and_of_junk():
    assert member_spans("{}") == {}
    for junk in ["[1]", '{"a" 1}', '{"a":1,}', '{1:2}', ""]:
        with pytest.raises(ValueError):
            member_spans(junk)


def test_encode_object_splices_raw_json_verbatim():
    body = encode_object({"key": "k\u00e9", "token": 3, "result": RawJSON(b'{"a": 1.50}')})
    assert body == '{"key":"k\u00e9","token":3,"result":{"a": 1.50}}'.encode("utf-8")


def test_encode_object_refuses_nan():
    with pytest.raises(ValueError):
        encode_object({"result": float("nan")})


def test_fingerprint_is_sha256_of_canonical_json():
    value = {"b": [1, {"z": None, "y": True}], "a": "\u00e9"}
    assert canonical_json(value) == '{"a":"\u00e9","b":[1,{"y":true,"z":null}]}'
    expected = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    assert fingerprint_of(value) == "sha256:" + expected
    reordered = {"a": "\u00e9", "b": [1, {"y": True, "z": None}]}
    assert fingerprint_of(reordered) == fingerprint_of(value)
    assert fingerprint_of({"a": 1}) != fingerprint_of({"a": 2})


CASES_FILE = Path(__file__).resolve().parents[2] / "cases.json"


def test_canonical_json_answers_the_shared_cases():
    """The canonical_json cases of clients/cases.json (CASES.md gives the form): the
    input text given as RawJSON, so its numbers keep their digits."""
    cases = json.loads(CASES_FILE.read_text(encoding="utf-8"))["canonical_json"]
    assert cases, "cases.json has no canonical_json cases"
    for case in cases:
        name, text = case["name"], case["json"]
        if case.get("error"):
            with pytest.raises(ValueError, match="lone surrogate"):
                canonical_json(RawJSON(text))
            with pytest.raises(ValueError, match="lone surrogate"):
                fingerprint_of(RawJSON(text))
            continue
        assert canonical_json(RawJSON(text)) == case["canonical"], name
        assert fingerprint_of(RawJSON(text)) == "sha256:" + case["sha256"], name


def test_canonical_json_of_values_and_a_lone_surrogate():
    # Code point order: U+E000 before U+1F600 (UTF-16 order would swap them).
    value = {"\U0001F600": 1, "\ue000": 2.5, "s": "a\u2028\b\x7f"}
    assert canonical_json(value) == '{"s":"a\u2028\\b\x7f","\ue000":2.5,"\U0001F600":1}'
    with pytest.raises(ValueError, match=r"a lone surrogate \\ud800 in the string 'x\\ud800'"):
        fingerprint_of({"a": "x\ud800"})
    with pytest.raises(ValueError, match="NaN"):
        canonical_json(RawJSON('{"a": NaN}'))
