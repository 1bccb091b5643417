"""The values the client returns: the three claim outcomes and a record.

A claim answers with exactly one of :class:`Claim` (you hold the key now),
:class:`Replayed` (done before: here is the first result) or
:class:`CachedFailure` (the first run failed for good); every other outcome is an
exception (see errors.py). Match on the type::

    match client.claim("refund", key):
        case Claim(token=token): ...
        case Replayed(result=result): ...
        case CachedFailure(error=error): ...

Stored values come back twice: ``result``/``error`` parsed with ``json.loads`` and
``raw``, the exact bytes the first holder sent (parse them yourself to keep numbers
exact, e.g. ``json.loads(r.raw, parse_float=decimal.Decimal)``).

Times are RFC 3339 strings in UTC as the server sends them
("2024-06-18T07:13:00.123Z"), or None.

The items of a batch (``Client.batch``) are :class:`ClaimItem`,
:class:`CompleteItem` and :class:`FailItem`, each answered by a
:class:`BatchResult` at the same index.

Thread safety: immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Claim:
    """201 acquired: the caller holds the key until ``lease_until`` and must finish it
    with ``complete`` or ``fail`` under ``token``.

    ``takeover`` is true when an earlier holder's lease expired unfinished
    (``previous_token`` is its token): that attempt may already have had its effect,
    so probe the external system before doing it again. ``degraded`` is true
    for a fail-open biz_type whose store was down: nothing was recorded (token 0).
    """

    outcome: str = field(default="acquired", init=False)
    token: int
    lease_until: str | None
    takeover: bool = False
    previous_token: int | None = None
    degraded: bool = False
    expires_at: str | None = None


@dataclass(frozen=True)
class Replayed:
    """200 replayed: the key was done before; ``result`` is its first result."""

    outcome: str = field(default="replayed", init=False)
    result: Any
    raw: bytes

    @property
    def text(self) -> str:
        """The stored result as JSON text."""
        return self.raw.decode("utf-8")


@dataclass(frozen=True)
class CachedFailure:
    """200 cached_failure: the key's first run failed non-retryably with ``error``."""

    outcome: str = field(default="cached_failure", init=False)
    error: Any
    raw: bytes

    @property
    def text(self) -> str:
        """The stored error as JSON text."""
        return self.raw.decode("utf-8")


@dataclass(frozen=True)
class Record:
    """A record as ``GET /v1/records/{biz_type}/{key}`` shows it.

    ``state`` is "PROCESSING", "SUCCEEDED" or "FAILED". ``result`` is set for
    SUCCEEDED, ``error`` for FAILED; ``raw`` holds the exact bytes of whichever is
    present (None while PROCESSING).
    """

    biz_type: str
    key: str
    state: str
    token: int
    lease_until: str | None
    fingerprint: str | None
    created_at: str | None
    updated_at: str | None
    expires_at: str | None = None
    result: Any = None
    error: Any = None
    raw: bytes | None = None


Outcome = Claim | Replayed | CachedFailure


@dataclass(frozen=True)
class ClaimItem:
    """A claim in a batch: ``Client.claim``'s arguments but ``wait_ms`` (the claims of
    a batch never wait)."""

    biz_type: str
    key: str
    fingerprint: str | None = None
    lease_ms: int | None = None


@dataclass(frozen=True)
class CompleteItem:
    """A complete in a batch: ``Client.complete``'s arguments."""

    biz_type: str
    key: str
    token: int
    result: Any


@dataclass(frozen=True)
class FailItem:
    """A fail in a batch: ``Client.fail``'s arguments."""

    biz_type: str
    key: str
    token: int
    retryable: bool
    error: Any


BatchItem = ClaimItem | CompleteItem | FailItem


@dataclass(frozen=True)
class BatchResult:
    """One item's answer in a batch: what its single call would have answered.

    ``status`` is that call's HTTP status. ``outcome`` its outcome ("acquired",
    "replayed", "completed", "released", "failed", "in_progress", ...; None for an
    invalid item). ``value`` is a claim's :class:`Claim`, :class:`Replayed` or
    :class:`CachedFailure` (None for a complete or fail, and for an error).
    ``error`` is the :class:`IdemError` the single call would have raised (an
    :class:`InProgress` has ``lease_until`` but no ``retry_after``), else None.
    """

    status: int
    outcome: str | None
    value: Outcome | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        """True when the item succeeded (no ``error``)."""
        return self.error is None

    def unwrap(self) -> Outcome | None:
        """Returns ``value``, or raises ``error`` as the single call would."""
        if self.error is not None:
            raise self.error
        return self.value
