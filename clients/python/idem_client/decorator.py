"""``@idempotent``: make a function's effect happen once per key.

::

    @idempotent(client, biz_type="refund", key=lambda req: req["order_no"])
    def refund(req):
        return payments.refund(req["order_no"], req["amount"])   # any JSON value

Each call claims ``key(*args, **kwargs)``:

- acquired: the function runs and its return value is stored (``complete``);
- replayed: the function is *not* called; the stored result is returned;
- cached failure: the function is not called; :class:`CachedFailureError` is raised
  with the stored error;
- in progress: :class:`InProgress` is raised, unless ``wait_ms`` is given, in which
  case the call waits up to that long for the holder and returns its result (or
  runs the function itself if the holder gave up).

When the function raises, the exception propagates after the claim is reported: one
of ``retryable`` (default ``Unavailable``, ``TimeoutError``, ``ConnectionError``)
releases the key so a retry runs again; any other exception is cached as
``{"type": class name, "message": str(exc)}`` and every later duplicate gets
``CachedFailureError``. A return value JSON cannot hold counts as such a failure
(TypeError), since the effect has happened and must not run twice.

When storing the result fails (LeaseLost: another holder took the key over while
the function ran; Unavailable after the retries), that error propagates and nothing
is reported: the effect has happened, so the key is left to its lease and the next
claim is a takeover.

Every call returns the result as a duplicate sees it, decoded from the stored JSON
(a tuple comes back as a list), so the first call and its duplicates agree.

``fingerprint`` identifies the payload, so that the key reused with other arguments
raises :class:`FingerprintMismatch` instead of returning another request's result.
By default it is ``"sha256:<hex>"`` of the canonical JSON (sorted keys, compact) of
the bound arguments by parameter name, defaults applied; pass a callable taking the
function's arguments for arguments JSON cannot hold (a method's ``self``), or
``False`` for none.

Inside the function, ``current_claim()`` is the claim it runs under (check
``.takeover`` to probe before redoing an external effect).

Thread safety: the decorated function is as safe for concurrent use as the function
itself; the client is shared.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from ._json import fingerprint_of
from .operation import DEFAULT_RETRYABLE, Operation

if TYPE_CHECKING:
    from .client import Client

F = TypeVar("F", bound=Callable[..., Any])


def idempotent(
    client: "Client",
    *,
    biz_type: str,
    key: Callable[..., str],
    fingerprint: Callable[..., str | None] | bool | None = None,
    lease_ms: int | None = None,
    wait_ms: int | None = None,
    retryable: Iterable[type[BaseException]] = DEFAULT_RETRYABLE,
) -> Callable[[F], F]:
    """Returns a decorator that runs the decorated function once per key (see the
    module doc). ``key`` is called with the function's arguments and must return a
    non-empty str. Raises TypeError when applied to a coroutine function."""
    if not callable(key):
        raise TypeError("key must be a callable taking the function's arguments")
    retry_types = tuple(retryable)

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise TypeError("@idempotent does not support async functions")
        signature = inspect.signature(fn)

        def payload_fingerprint(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
            if fingerprint is False:
                return None
            if callable(fingerprint):
                return fingerprint(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            try:
                return fingerprint_of(dict(bound.arguments))
            except (TypeError, ValueError) as exc:
                raise TypeError(
                    f"@idempotent({fn.__qualname__}): the arguments are not JSON-"
                    f"serialisable ({exc}); pass fingerprint=callable or False") from exc

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            k = key(*args, **kwargs)
            if not isinstance(k, str):
                raise TypeError(f"key() must return a str, got {type(k).__name__}")
            op = Operation(client, biz_type, k, fingerprint=payload_fingerprint(args, kwargs),
                           lease_ms=lease_ms, wait_ms=wait_ms, retryable=retry_types)
            with op:
                if op.acquired:
                    op.complete(fn(*args, **kwargs))
            return op.result

        return wrapper  # type: ignore[return-value]

    return decorate
