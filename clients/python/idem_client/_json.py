"""JSON helpers: exact bytes in both directions, and the default fingerprint.

``idem serve`` stores ``result`` and ``error`` as the exact bytes it received and
answers with them spliced into its JSON verbatim. To hand those bytes
back unchanged, :func:`member_spans` finds where each top-level member's value
starts and ends in an answer; :class:`RawJSON` lets a caller send exact bytes too.

Thread safety: pure functions.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class RawJSON:
    """A JSON value given as its exact text, sent to the server unchanged.

    Use it when the bytes matter (``{"amount": 12.50}`` keeps its ``12.50``), or to
    pass a value already encoded. The text must be one valid JSON value; the server
    answers 400 otherwise.
    """

    __slots__ = ("text",)

    def __init__(self, value: str | bytes) -> None:
        self.text = value.decode("utf-8") if isinstance(value, bytes) else value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawJSON) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"RawJSON({self.text!r})"


def dumps(value: Any) -> str:
    """Encodes ``value`` as compact JSON text (UTF-8 kept, NaN refused).

    Raises TypeError for a value JSON cannot hold, ValueError for NaN/Infinity.
    """
    if isinstance(value, RawJSON):
        return value.text
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_object(members: Mapping[str, Any]) -> bytes:
    """Encodes a request body; :class:`RawJSON` members are spliced in verbatim."""
    parts = [f"{dumps(name)}:{dumps(value)}" for name, value in members.items()]
    return ("{" + ",".join(parts) + "}").encode("utf-8")


def member_spans(text: str) -> dict[str, tuple[int, int]]:
    """Returns, for each member of the JSON object ``text``, the [start, end) span of
    its value's text. Raises ValueError when ``text`` is not one JSON object."""
    spans: dict[str, tuple[int, int]] = {}
    i = _WS.match(text, 0).end()
    if not text.startswith("{", i):
        raise ValueError("not a JSON object")
    i = _WS.match(text, i + 1).end()
    if text.startswith("}", i):
        return spans
    while True:
        name, i = _DECODER.raw_decode(text, i)
        if not isinstance(name, str):
            raise ValueError("member name is not a string")
        i = _WS.match(text, i).end()
        if not text.startswith(":", i):
            raise ValueError("expected ':'")
        start = _WS.match(text, i + 1).end()
        _, end = _DECODER.raw_decode(text, start)
        spans[name] = (start, end)
        i = _WS.match(text, end).end()
        if text.startswith(",", i):
            i = _WS.match(text, i + 1).end()
            continue
        if text.startswith("}", i):
            return spans
        raise ValueError("expected ',' or '}'")


def element_spans(text: str) -> list[tuple[int, int]]:
    """Returns the [start, end) span of each element's text in the JSON array
    ``text``. Raises ValueError when ``text`` is not one JSON array."""
    spans: list[tuple[int, int]] = []
    i = _WS.match(text, 0).end()
    if not text.startswith("[", i):
        raise ValueError("not a JSON array")
    i = _WS.match(text, i + 1).end()
    if text.startswith("]", i):
        return spans
    while True:
        _, end = _DECODER.raw_decode(text, i)
        spans.append((i, end))
        i = _WS.match(text, end).end()
        if text.startswith(",", i):
            i = _WS.match(text, i + 1).end()
            continue
        if text.startswith("]", i):
            return spans
        raise ValueError("expected ',' or ']'")


def raw_member(text: str, name: str) -> bytes | None:
    """The exact UTF-8 bytes of member ``name``'s value in the JSON object ``text``,
    or None when it is absent."""
    span = member_spans(text).get(name)
    if span is None:
        return None
    return text[span[0]:span[1]].encode("utf-8")


class _Number(str):
    """A JSON number kept as its text (``12.50`` stays 12.50)."""


class _Members(list):  # type: ignore[type-arg]
    """A JSON object's (name, value) pairs in order; a name may come twice."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


_CANONICAL_DECODER = json.JSONDecoder(object_pairs_hook=_Members, parse_float=_Number,
                                      parse_int=_Number, parse_constant=_refuse_constant)
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                  "\r": "\\r", "\t": "\\t"}
_TO_ESCAPE = re.compile(r'["\\\x00-\x1f]')
# A str holding a surrogate code point has no UTF-8 (JSON's escaped pairs are read
# as the one code point they stand for).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _quote(s: str) -> str:
    lone = _SURROGATE.search(s)
    if lone:
        raise ValueError(f"not JSON: a lone surrogate \\u{ord(lone.group()):04x} "
                         f"in the string {s[:40]!r}")
    return '"' + _TO_ESCAPE.sub(
        lambda m: _SHORT_ESCAPES.get(m.group()) or f"\\u{ord(m.group()):04x}", s) + '"'


def _write_canonical(v: Any, out: list[str]) -> None:
    if isinstance(v, _Number):
        out.append(v)
    elif isinstance(v, str):
        out.append(_quote(v))
    elif v is True or v is False or v is None:
        out.append({True: "true", False: "false", None: "null"}[v])
    elif isinstance(v, _Members):
        last = dict(v)  # a name given twice: the last value
        out.append("{")
        for i, name in enumerate(sorted(last)):  # str order is code point order
            out.append("," if i else "")
            out.append(_quote(name))
            out.append(":")
            _write_canonical(last[name], out)
        out.append("}")
    else:
        out.append("[")
        for i, item in enumerate(v):
            out.append("," if i else "")
            _write_canonical(item, out)
        out.append("]")


def canonical_json(value: Any) -> str:
    """The canonical JSON every idem client fingerprints (clients/CASES.md): members
    sorted by the code points of their names, the last of a repeated name kept, no
    white space, strings as JSON.stringify writes them, numbers as written.

    ``value`` is a :class:`RawJSON` (its text, numbers kept as written) or any value
    :func:`json.dumps` encodes (numbers as it writes them). Raises TypeError for a value
    JSON cannot hold, ValueError for text that is not one JSON value, NaN, or a string
    holding a lone surrogate.
    """
    text = value.text if isinstance(value, RawJSON) else dumps(value)
    out: list[str] = []
    _write_canonical(_CANONICAL_DECODER.decode(text), out)
    return "".join(out)


def fingerprint_of(value: Any) -> str:
    """The request fingerprint of a JSON-serialisable value: ``"sha256:<hex>"`` of its
    canonical JSON in UTF-8 (:func:`canonical_json`; its errors)."""
    digest = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    return f"sha256:{digest}"
