"""Unit tests of the exact-bytes helpers and the default fingerprint."""

import hashlib

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
