"""Operation: one idempotent effect as a ``with`` block.

A ``with`` statement cannot skip its body, so the body asks whether it holds the
key and does the work only then::

    with client.idempotent("refund", order_no, fingerprint=fp) as op:
        if op.acquired:
            op.complete(send_refund(order_no))   # stored, then replayed to duplicates
    print(op.result)   # the first result, on the first call and on every duplicate

On entry the key is claimed (``Client.claim``):

- acquired: ``op.acquired`` is true; the body must end with ``op.complete(result)``
  or ``op.fail(error, retryable=...)``. ``op.takeover`` tells it an earlier holder's
  lease expired unfinished (probe before redoing an external effect).
- replayed: ``op.replayed`` is true and ``op.result``/``op.raw`` hold the first
  result; the body should do nothing.
- cached failure: :class:`CachedFailureError` is raised from the ``with`` line, so
  the body does not run. Every other outcome (InProgress, FingerprintMismatch, ...)
  is raised there too.

When the body of a holder raises, the claim is reported failed and the exception
propagates: an instance of one of ``retryable`` (default ``Unavailable``,
``TimeoutError``, ``ConnectionError``) releases the key (``fail(retryable=True)``),
any other ``Exception`` caches the failure as ``{"type": class name, "message":
str(exc)}``. Once ``complete``/``fail`` has been sent the outcome is never changed
again, also when that call itself failed: then the effect may have happened, so the
claim is left to run out and the next claim is a takeover. A body that ends without
either, or a KeyboardInterrupt/SystemExit, also leaves the claim to run out
(RuntimeError for the former).

``current_claim()`` returns the :class:`Claim` of the innermost holding ``with`` (or
decorated function) in the current thread or task, else None.

Thread safety: an Operation belongs to the thread that entered it.
"""

from __future__ import annotations

import contextvars
import json
from typing import TYPE_CHECKING, Any, Iterable

from . import _json
from .errors import CachedFailureError, IdemError, Unavailable
from .models import CachedFailure, Claim, Replayed

if TYPE_CHECKING:
    from .client import Client

#: The exception types that release the key instead of caching the failure.
DEFAULT_RETRYABLE: tuple[type[BaseException], ...] = (Unavailable, TimeoutError, ConnectionError)

_current: contextvars.ContextVar[Claim | None] = contextvars.ContextVar(
    "idem_current_claim", default=None)


def current_claim() -> Claim | None:
    """The claim the running idempotent body holds, or None outside one."""
    return _current.get()


def describe(exc: BaseException) -> dict[str, str]:
    """The error stored for an exception: ``{"type": class name, "message": str}``."""
    return {"type": type(exc).__name__, "message": str(exc)}


class Operation:
    """The state of one ``with client.idempotent(...)`` block (see the module doc)."""

    def __init__(self, client: "Client", biz_type: str, key: str, *,
                 fingerprint: str | None = None, lease_ms: int | None = None,
                 wait_ms: int | None = None,
                 retryable: Iterable[type[BaseException]] = DEFAULT_RETRYABLE) -> None:
        self.client = client
        self.biz_type = biz_type
        self.key = key
        self.fingerprint = fingerprint
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.retryable = tuple(retryable)
        #: The claim when this block holds the key, else None.
        self.claim: Claim | None = None
        #: The result: the first one on a replay, the stored one after complete().
        self.result: Any = None
        #: The exact bytes of ``result`` (None until there is one).
        self.raw: bytes | None = None
        # new -> holding -> finishing -> completed | failed | released
        # new -> replayed
        self._state = "new"
        self._context_token: contextvars.Token[Claim | None] | None = None

    @property
    def acquired(self) -> bool:
        """True when this block claimed the key and so must do the work."""
        return self.claim is not None

    @property
    def replayed(self) -> bool:
        """True when the key was done before; ``result`` is the first result."""
        return self._state == "replayed"

    @property
    def token(self) -> int | None:
        return self.claim.token if self.claim is not None else None

    @property
    def takeover(self) -> bool:
        """True when an earlier holder's lease expired unfinished (see Claim)."""
        return self.claim is not None and self.claim.takeover

    def __enter__(self) -> "Operation":
        if self._state != "new":
            raise RuntimeError("an Operation can be entered once")
        outcome = self.client.claim(self.biz_type, self.key, self.fingerprint,
                                    lease_ms=self.lease_ms, wait_ms=self.wait_ms)
        if isinstance(outcome, Claim):
            self.claim = outcome
            self._state = "holding"
            self._context_token = _current.set(outcome)
        elif isinstance(outcome, Replayed):
            self._state = "replayed"
            self.result, self.raw = outcome.result, outcome.raw
        elif isinstance(outcome, CachedFailure):
            raise CachedFailureError(outcome.error, outcome.raw)
        return self

    def complete(self, result: Any) -> None:
        """Stores ``result`` (a JSON-serialisable value or RawJSON) as the key's result.

        Afterwards ``result`` is the stored value as a duplicate will see it (decoded
        from JSON, so a tuple comes back a list). Raises TypeError/ValueError before
        sending anything for a value JSON cannot hold, and the client's errors
        (LeaseLost, Unavailable, ...) when the server does not take it.
        """
        self._require_holding("complete")
        # Encoding errors (TypeError, NaN, lone surrogates) come before anything is sent:
        # they are the body's failure and get reported on exit like any other.
        text = _json.dumps(result)
        raw = text.encode("utf-8")
        self._state = "finishing"
        self.client.complete(self.biz_type, self.key, self.claim.token, _json.RawJSON(text))
        self._state = "completed"
        self.raw = raw
        self.result = json.loads(text)

    def fail(self, error: Any, *, retryable: bool = False) -> None:
        """Reports the work failed: ``retryable`` releases the key, otherwise ``error``
        (any JSON value) is cached and duplicates get CachedFailureError."""
        self._require_holding("fail")
        text = _json.dumps(error)
        text.encode("utf-8")  # refuse lone surrogates before anything is sent
        self._state = "finishing"
        self.client.fail(self.biz_type, self.key, self.claim.token, retryable,
                         _json.RawJSON(text))
        self._state = "released" if retryable else "failed"

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> bool:
        if self._context_token is not None:
            _current.reset(self._context_token)
            self._context_token = None
        if self._state != "holding":
            return False
        if exc is None:
            raise RuntimeError(
                f"the idempotent block for key {self.key!r} ended without complete() or "
                "fail(); the claim is left to run out and its next claim is a takeover")
        if not isinstance(exc, Exception):
            return False  # KeyboardInterrupt, SystemExit: the effect may be half done
        retry = isinstance(exc, self.retryable)
        self._state = "finishing"
        try:
            self.client.fail(self.biz_type, self.key, self.claim.token, retry, describe(exc))
            self._state = "released" if retry else "failed"
        except IdemError as fail_error:
            exc.add_note(f"idem: reporting this failure for key {self.key!r} failed too: "
                         f"{fail_error}")
        return False

    def _require_holding(self, what: str) -> None:
        if self._state != "holding":
            raise RuntimeError(f"{what}() needs a claim this block holds "
                               f"(the operation is {self._state})")
