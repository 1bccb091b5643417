"""The client's retry policy for calls that failed retryably.

Retry *n* (0 for the first retry) sleeps ``random() * min(cap, base * 2**n)``:
exponential backoff with full jitter, 100 ms, 200 ms, 400 ms ... capped at 5 s by
default, and at most ``max_attempts`` sends in all (default 4). The same request,
with the same key, is sent every time; idem never invents a key.

Only errors whose ``retryable`` attribute is true are retried: :class:`Unavailable`
(503, 502, 504, connection errors, timeouts) and 5xx :class:`ServerError`. A 409
``in_progress`` is *not* retried: the caller decides whether to wait (``wait_ms``),
come back later (``retry_after``) or give up.

Time and randomness are injected (``sleep``, ``random``) so tests are deterministic.

Thread safety: a RetryPolicy is immutable and safe to share; ``sleep`` and ``random``
must be safe to call from every thread that uses the client (the defaults are).
"""

from __future__ import annotations

import random as _random
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

T = TypeVar("T")


def _is_retryable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retryable", False))


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait between sends of one call.

    Attributes:
        max_attempts: sends in all, including the first (>= 1; 1 disables retries).
        base: the first retry's ceiling in seconds (full jitter draws below it).
        cap: the largest ceiling in seconds.
        sleep: called with the delay in seconds before each retry (blocks).
        random: returns a float in [0, 1); scales each ceiling (full jitter).
    """

    max_attempts: int = 4
    base: float = 0.1
    cap: float = 5.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    random: Callable[[], float] = field(default=_random.random, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base < 0 or self.cap < 0:
            raise ValueError("base and cap must be >= 0")

    @classmethod
    def none(cls) -> "RetryPolicy":
        """A policy that sends every call once."""
        return cls(max_attempts=1)

    def ceiling(self, retry: int) -> float:
        """The upper bound of the delay before retry number ``retry`` (0-based)."""
        # min() before the power would overflow for a large `retry`; 2**60 is plenty.
        return min(self.cap, self.base * (2 ** min(retry, 60)))

    def delay(self, retry: int) -> float:
        """The delay before retry number ``retry`` (0-based): full jitter."""
        return self.random() * self.ceiling(retry)

    def run(self, call: Callable[[], T],
            retryable: Callable[[BaseException], bool] = _is_retryable) -> T:
        """Runs ``call`` until it returns, raises a non-retryable error, or has been
        sent ``max_attempts`` times; returns its value or raises its last error.

        An error that has an ``attempts`` attribute gets the number of sends made.
        Blocks in ``sleep`` between sends.
        """
        attempt = 1
        while True:
            try:
                return call()
            except Exception as exc:
                if hasattr(exc, "attempts"):
                    exc.attempts = attempt
                if attempt >= self.max_attempts or not retryable(exc):
                    raise
                self.sleep(self.delay(attempt - 1))
                attempt += 1
