"""The exceptions of the idem client: one class per outcome or problem.

Every error answer of ``idem serve`` is ``application/problem+json`` with ``type``,
``title``, ``detail`` and, where a guard outcome applies, ``outcome``. The class is
chosen by ``outcome`` first, then by the problem ``type``, then by the HTTP status,
so a proxy's plain 502 still comes out as :class:`Unavailable`.

What each class tells a caller to do:

- :class:`Unavailable` (503, 502, 504, connection errors, timeouts): retry the same
  call with the same key; nothing ran (fail closed). The client already retried it
  with backoff before raising.
- :class:`InProgress` (409 ``in_progress``): another holder owns a live lease; try
  again after ``retry_after`` seconds, or claim with ``wait_ms``.
- :class:`LeaseLost` (409 ``lease_lost``): your token is stale; another holder took
  over. Do not retry with that token.
- :class:`KeyReused`, :class:`FingerprintMismatch`, :class:`Conflict`,
  :class:`InvalidRequest`, :class:`Unauthorized`, :class:`Expired`: do not retry; the
  request or the caller's state is wrong.
- :class:`CachedFailureError`: the first run of this key failed for good; the stored
  error is in ``error``.

Thread safety: exception instances are plain values.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

PROBLEM_PREFIX = "urn:idem:problem:"


class IdemError(Exception):
    """Base class of every error the client raises.

    Attributes:
        status: the HTTP status, or None when no answer arrived (connection error).
        type: the problem ``type`` URI ("urn:idem:problem:lease_lost", "about:blank").
        title: the problem ``title``.
        detail: the problem ``detail`` (a human-readable sentence).
        outcome: the guard outcome the answer reports ("lease_lost", ...), or None.
        request_id: the ``X-Request-Id`` of the answer, else the one the client sent.
        body: the parsed problem object (a dict), or None.
        attempts: how many times the call was sent before this error was raised.
    """

    #: Whether the retry policy sends the same call again after this error.
    retryable = False

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        type: str = "about:blank",
        title: str = "",
        outcome: str | None = None,
        request_id: str | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.outcome = outcome
        self.request_id = request_id
        self.body = dict(body) if body is not None else None
        self.attempts = 1

    @property
    def slug(self) -> str | None:
        """The idem problem name ("lease_lost") from ``type``, or None for about:blank."""
        if self.type.startswith(PROBLEM_PREFIX):
            return self.type[len(PROBLEM_PREFIX):]
        return None

    def __str__(self) -> str:
        head = f"{self.status} " if self.status is not None else ""
        name = self.outcome or self.slug or self.title
        text = f"{head}{name}: {self.detail}" if name else f"{head}{self.detail}"
        if self.request_id:
            text += f" (request id {self.request_id})"
        return text


class InProgress(IdemError):
    """409 in_progress: another holder's lease is live.

    ``retry_after`` is the whole seconds until that lease ends (from ``Retry-After``),
    ``lease_until`` its end as an RFC 3339 string, either None when absent.
    """

    def __init__(self, detail: str, *, retry_after: float | None = None,
                 lease_until: str | None = None, **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.retry_after = retry_after
        self.lease_until = lease_until


class KeyReused(IdemError):
    """409 key_reused: the key belongs to another biz_type."""


class FingerprintMismatch(IdemError):
    """422 fingerprint_mismatch: the key was first claimed with another payload."""


class LeaseLost(IdemError):
    """409 lease_lost: the token is not the current holder's (it was taken over)."""


class Conflict(IdemError):
    """409 conflict: the claim already ended with other content (a second complete or
    fail with the same token and a different result or error)."""


class NotFound(IdemError):
    """404: no record for this key (in the caller's tenant), or no such route."""


class InvalidRequest(IdemError):
    """400 (and the other 4xx request defects: 405, 411, 413, 415, 431): the request
    itself is malformed: an empty or over-long key, lease_ms out of range, ..."""


class Unauthorized(IdemError):
    """401/403: the bearer token is missing, malformed or unknown."""


class Expired(IdemError):
    """410 expired: the key's record was purged after its retention; a
    tombstone remembers it, so the request must not run again."""


class Unavailable(IdemError):
    """503 (store down, connection limit), 502/504 from a gateway, or no answer at
    all (connection refused or reset, timeout). Nothing ran; retrying is safe.

    ``retry_after`` is the server's ``Retry-After`` in seconds, or None.
    """

    retryable = True

    def __init__(self, detail: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(detail, **kw)
        self.retry_after = retry_after


class ServerError(IdemError):
    """Any other answer: 500 and unexpected statuses. 5xx are retried."""

    @property  # type: ignore[override]
    def retryable(self) -> bool:
        return self.status is not None and self.status >= 500


class CachedFailureError(IdemError):
    """The key's first run failed non-retryably; this duplicate gets that failure.

    ``error`` is the stored error (any JSON value, parsed), ``raw`` its exact bytes.
    Raised by the decorator and by the context manager; :meth:`Client.claim` returns a
    :class:`~idem_client.CachedFailure` value instead.
    """

    def __init__(self, error: Any, raw: bytes, *, request_id: str | None = None) -> None:
        super().__init__(
            f"the first run of this key failed: {raw.decode('utf-8', 'replace')}",
            status=200,
            title="Cached failure",
            outcome="cached_failure",
            request_id=request_id,
        )
        self.error = error
        self.raw = raw


_BY_OUTCOME: dict[str, type[IdemError]] = {
    "in_progress": InProgress,
    "key_reused": KeyReused,
    "fingerprint_mismatch": FingerprintMismatch,
    "lease_lost": LeaseLost,
    "conflict": Conflict,
    "not_found": NotFound,
    "expired": Expired,
    "unavailable": Unavailable,
}

_BY_SLUG: dict[str, type[IdemError]] = {
    **_BY_OUTCOME,
    "store_unavailable": Unavailable,
    "invalid_request": InvalidRequest,
    "bad_http": InvalidRequest,
}

_BY_STATUS: dict[int, type[IdemError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    405: InvalidRequest,
    409: Conflict,
    410: Expired,
    411: InvalidRequest,
    413: InvalidRequest,
    415: InvalidRequest,
    422: FingerprintMismatch,
    431: InvalidRequest,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def _retry_after(value: str | None) -> float | None:
    # The server sends whole seconds; an HTTP-date (RFC 9110) is not worth parsing here.
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    reason: str = "",
    request_id: str | None = None,
) -> IdemError:
    """Builds the exception for one error answer.

    ``headers`` is looked up by exact name, so pass an ``http.client.HTTPMessage`` (its
    lookups ignore case) or a dict with canonical names. A body that is not a JSON
    object (a proxy's HTML page) still gives the class chosen by ``status``.
    """
    problem: dict[str, Any] | None = None
    try:
        parsed = json.loads(body.decode("utf-8"))
        if isinstance(parsed, dict):
            problem = parsed
    except (UnicodeDecodeError, ValueError):
        problem = None

    def member(name: str) -> str | None:
        value = problem.get(name) if problem is not None else None
        return value if isinstance(value, str) else None

    outcome = member("outcome")
    ptype = member("type") or "about:blank"
    slug = ptype[len(PROBLEM_PREFIX):] if ptype.startswith(PROBLEM_PREFIX) else None
    cls = (
        _BY_OUTCOME.get(outcome or "")
        or _BY_SLUG.get(slug or "")
        or _BY_STATUS.get(status)
        or ServerError
    )
    detail = member("detail")
    if detail is None:
        detail = body.decode("utf-8", "replace").strip()[:500] if problem is None else ""
    kw: dict[str, Any] = dict(
        status=status,
        type=ptype,
        title=member("title") or reason,
        outcome=outcome,
        request_id=headers.get("X-Request-Id") or request_id,
        body=problem,
    )
    if cls is InProgress:
        return InProgress(detail, retry_after=_retry_after(headers.get("Retry-After")),
                          lease_until=member("lease_until"), **kw)
    if cls is Unavailable:
        return Unavailable(detail, retry_after=_retry_after(headers.get("Retry-After")), **kw)
    return cls(detail, **kw)
