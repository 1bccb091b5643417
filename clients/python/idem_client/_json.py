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


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, compact separators, UTF-8 kept, NaN refused."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":"))


def fingerprint_of(value: Any) -> str:
    """The request fingerprint of a JSON-serialisable value: ``"sha256:<hex>"`` of its
    canonical JSON in UTF-8. Raises TypeError for a value JSON cannot hold."""
    digest = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    return f"sha256:{digest}"
