"""Client: the HTTP API of ``idem serve`` from Python.

Get one with ``Client("http://127.0.0.1:7070", token)``; the bearer token names
the tenant, so every key is the caller's own. Each call is one request (plus
retries): ``claim`` returns a value for the three expected outcomes (Claim,
Replayed, CachedFailure) and raises a typed :class:`IdemError` for the others;
``complete``/``fail``/``get`` return or raise likewise.

Retries follow ``retry``: a call that met :class:`Unavailable` (503,
connection refused or reset, timeout) is sent again, unchanged, with backoff; 4xx
answers, ``in_progress`` included, are raised at once. Retrying is safe for every
call: ``complete``/``fail`` with the same token and value answer 200 again, and a
claim is fail-closed (503 means nothing was recorded). One case to know: when a
claim *was* recorded but its answer was lost (a timeout after sending), the retry
meets the caller's own lease and raises :class:`InProgress`; the key is then free
again after ``lease_ms``, and the next claim reports ``takeover=True``.

Connections: HTTP/1.1 keep-alive, one connection per thread, opened on first use
and reopened once at no cost when the server closed an idle one.

Thread safety: a Client is safe for concurrent use from many threads. ``close()``
closes every thread's connection; a later call opens a new one. Calls block for up
to ``timeout`` seconds per send (plus ``wait_ms`` for a waiting claim) and sleep
between retries.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import quote, urlsplit

from . import _json
from .errors import PROBLEM_PREFIX, InvalidRequest, ServerError, Unavailable, error_from_response
from .models import (BatchItem, BatchResult, CachedFailure, Claim, ClaimItem, CompleteItem,
                     FailItem, Outcome, Record, Replayed)
from .operation import DEFAULT_RETRYABLE, Operation
from .retry import RetryPolicy

__all__ = ["Client", "MAX_BATCH_ITEMS"]

#: The most items one batch may hold (the server refuses more).
MAX_BATCH_ITEMS = 1000
#: The bounds of a biz_type or key and of a fingerprint, in UTF-8 bytes (the server's).
MAX_NAME_BYTES = 255
MAX_FINGERPRINT_BYTES = 1024


def _user_agent() -> str:
    """The User-Agent header: the package's version, which is idem's."""
    from . import __version__  # at call time: the package imports this module first
    return f"idem-python/{__version__}"


# Errors that mean the server closed a kept-alive connection before reading our
# request; the request is then sent once more on a fresh connection.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
          ConnectionAbortedError)


class _Slot:
    """A thread's connection; closed when the thread ends and its locals go."""

    __slots__ = ("conn", "__weakref__")

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn = conn

    def __del__(self) -> None:
        try:
            self.conn.close()
        except Exception:  # interpreter shutdown: nothing left to tidy
            pass


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes
    request_id: str

    def text(self) -> str:
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.malformed(f"not UTF-8: {exc}") from exc

    def json(self) -> dict[str, Any]:
        try:
            value = json.loads(self.text())
        except ValueError as exc:
            raise self.malformed(f"not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise self.malformed("not a JSON object")
        return value

    def malformed(self, why: str) -> ServerError:
        snippet = self.body[:200].decode("utf-8", "replace")
        return ServerError(f"unexpected answer ({why}): {snippet}", status=self.status,
                           title="Malformed answer", request_id=self.request_id)


class Client:
    """A client of one ``idem serve``.

    Args:
        url: the server's base URL, "http://host:port" (https:// works too; a path
            prefix such as "http://gw/idem" is kept in front of every route).
        token: the tenant's bearer token.
        timeout: seconds to connect and to wait for each answer.
        retry: the retry policy; ``RetryPolicy.none()`` sends every call once.
        ssl_context: for https:// URLs; the default verifies certificates.
        request_id: makes the ``X-Request-Id`` sent with a call (same for its
            retries); default a random hex string.

    Raises ValueError for a URL that is not http:// or https://.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
        request_id: Callable[[], str] | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http://host[:port] or https://..., got {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._auth = f"Bearer {token}"
        self._timeout = timeout
        self._ssl_context = ssl_context
        self.retry = retry if retry is not None else RetryPolicy()
        self._make_request_id = request_id or (lambda: uuid.uuid4().hex)
        self._local = threading.local()
        self._lock = threading.Lock()
        # Every thread's connection, for close(); weak, so a finished thread's goes.
        self._connections: weakref.WeakSet[http.client.HTTPConnection] = weakref.WeakSet()
        self.url = url

    def __repr__(self) -> str:
        # Never the token: it is a secret.
        return f"Client({self.url!r})"

    # -- the API ------------------------------------------------------------------

    def claim(
        self,
        biz_type: str,
        key: str,
        fingerprint: str | None = None,
        lease_ms: int | None = None,
        wait_ms: int | None = None,
    ) -> Outcome:
        """Claims ``key`` (POST /v1/claims).

        Returns :class:`Claim` when the caller now holds the key, :class:`Replayed`
        with the byte-identical first result when it was done before, or
        :class:`CachedFailure` when its first run failed non-retryably.

        ``fingerprint`` identifies the payload (a retry must send the same one);
        ``lease_ms`` (100 … 3 600 000, server default 30 000) is how long the claim is
        held; ``wait_ms`` (≤ 30 000) makes a claim that meets a live lease wait for the
        holder's result instead of raising InProgress (it blocks that long).

        Raises InProgress (409, not retried), KeyReused (409), FingerprintMismatch
        (422), Expired (410), InvalidRequest (400; or ``status`` None: refused before
        sending, for an empty, over-long or NUL-holding biz_type or key or an over-long
        fingerprint), Unauthorized (401/403), Unavailable (503 or no answer, after
        retries).
        """
        _check_request(biz_type, key, fingerprint)
        body: dict[str, Any] = {"biz_type": biz_type, "key": key}
        if fingerprint is not None:
            body["fingerprint"] = fingerprint
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        if wait_ms is not None:
            body["wait_ms"] = wait_ms
        extra = (wait_ms or 0) / 1000.0
        answer = self._call("POST", "/v1/claims", body, extra_timeout=extra)
        return _claim_outcome(answer)

    def complete(self, biz_type: str, key: str, token: int, result: Any) -> str:
        """Stores ``result`` (any JSON value, or :class:`RawJSON` for exact bytes) as
        the key's result under ``token`` (POST /v1/claims/complete) and returns the
        server's outcome: ``"completed"``, or ``"degraded"`` for a degraded claim of a
        fail-open biz_type (token 0: nothing was stored). Repeating it with the same
        token and result succeeds again.

        Raises LeaseLost (409: the token is stale, another holder took over),
        Conflict (409: already finished with another value), KeyReused (409),
        NotFound (404: no record), InvalidRequest, Unauthorized, Unavailable;
        TypeError/ValueError for a result JSON cannot hold.
        """
        _check_request(biz_type, key)
        return _outcome_of(self._call(
            "POST", "/v1/claims/complete",
            {"biz_type": biz_type, "key": key, "token": token, "result": result}))

    def fail(self, biz_type: str, key: str, token: int, retryable: bool, error: Any) -> str:
        """Reports that the holder of ``token`` failed (POST /v1/claims/fail) and
        returns the server's outcome: ``"released"`` (retryable), ``"failed"`` (the
        failure is cached) or ``"degraded"`` (a degraded claim: nothing to finish).

        ``retryable=True`` releases the key: the next claim acquires it with a higher
        token. ``retryable=False`` caches the failure: later claims get
        :class:`CachedFailure` with ``error`` (any JSON value or :class:`RawJSON`).

        Raises the same errors as :meth:`complete`.
        """
        _check_request(biz_type, key)
        return _outcome_of(self._call(
            "POST", "/v1/claims/fail",
            {"biz_type": biz_type, "key": key, "token": token,
             "retryable": bool(retryable), "error": error}))

    def batch(self, items: Sequence[BatchItem]) -> list[BatchResult]:
        """Sends up to 1,000 claims, completes and fails in one request
        (POST /v1/claims/batch) and returns one :class:`BatchResult` per item, in
        their order.

        Each item is decided as its single call would be (items of one key in their
        order: a second :class:`ClaimItem` of a key the batch just acquired is
        ``in_progress``); an item's error is in its result, never raised, and the
        other items are decided all the same. Every item's write is durable when
        this returns.

        Raises ValueError for no items or more than 1,000 (nothing is sent),
        TypeError for an item of another type; InvalidRequest (400) for a batch
        the server refuses whole, Unauthorized, Unavailable (503 or no answer,
        after retries: the batch is sent again whole, which every item repeats
        harmlessly, as the single calls do).
        """
        items = list(items)
        if not 1 <= len(items) <= MAX_BATCH_ITEMS:
            raise ValueError(f"a batch holds 1 to {MAX_BATCH_ITEMS} items, got {len(items)}")
        # Each item encoded as a single call's body is (RawJSON results kept exact).
        members = b",".join(_json.encode_object(_batch_member(i)) for i in items)
        body = {"requests": _json.RawJSON(b"[" + members + b"]")}
        answer = self._call("POST", "/v1/claims/batch", body)
        return _batch_results(answer, items)

    def get(self, biz_type: str, key: str) -> Record:
        """Returns the caller's record of ``key`` (GET /v1/records/{biz_type}/{key}).

        Raises NotFound (404: no such record in this tenant), InvalidRequest,
        Unauthorized, Unavailable.
        """
        _check_request(biz_type, key)
        path = f"/v1/records/{quote(biz_type, safe='')}/{quote(key, safe='')}"
        answer = self._call("GET", path, None)
        return _record(answer)

    def ready(self) -> bool:
        """True when GET /readyz answers 200 (the server and its store answer), False
        when it answers otherwise or cannot be reached. Sent once, never retried."""
        try:
            answer = self._send("GET", "/readyz", None, self._make_request_id(), 0.0)
        except Unavailable:
            return False
        return answer.status == 200

    def idempotent(self, biz_type: str, key: str, *, fingerprint: str | None = None,
                   lease_ms: int | None = None, wait_ms: int | None = None,
                   retryable: Iterable[type[BaseException]] | None = None) -> Operation:
        """A context manager that claims ``key`` on entry; see :class:`Operation`."""
        return Operation(self, biz_type, key, fingerprint=fingerprint, lease_ms=lease_ms,
                         wait_ms=wait_ms,
                         retryable=DEFAULT_RETRYABLE if retryable is None else retryable)

    def close(self) -> None:
        """Closes every connection this client opened (in any thread)."""
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ----------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any] | None, *,
              extra_timeout: float = 0.0) -> _Answer:
        payload = _json.encode_object(body) if body is not None else None
        request_id = self._make_request_id()

        def attempt() -> _Answer:
            answer = self._send(method, path, payload, request_id, extra_timeout)
            if answer.status >= 400:
                raise error_from_response(answer.status, answer.headers, answer.body,
                                          reason=http.client.responses.get(answer.status, ""),
                                          request_id=answer.request_id)
            return answer

        return self.retry.run(attempt)

    def _connection(self) -> http.client.HTTPConnection:
        slot = getattr(self._local, "slot", None)
        if slot is None:
            if self._https:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout,
                    context=self._ssl_context or ssl.create_default_context())
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            slot = self._local.slot = _Slot(conn)
            with self._lock:
                self._connections.add(conn)
        return slot.conn

    def _send(self, method: str, path: str, payload: bytes | None, request_id: str,
              extra_timeout: float) -> _Answer:
        headers = {
            "Authorization": self._auth,
            "Accept": "application/json",
            "User-Agent": _user_agent(),
            "X-Request-Id": request_id,
        }
        if payload is not None:
            headers["Content-Type"] = "application/json"
        timeout = self._timeout + extra_timeout
        conn = self._connection()
        reused = conn.sock is not None
        try:
            try:
                return self._exchange(conn, method, path, payload, headers, timeout, request_id)
            except _STALE:
                if not reused:
                    raise
                # Almost always the server closed the idle connection before reading
                # this request, so a fresh connection gets it once more at no cost (not
                # counted as a retry). Had it been read, resending is still safe: every
                # call here repeats harmlessly (see the module doc).
                conn.close()
                return self._exchange(conn, method, path, payload, headers, timeout, request_id)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            what = "timed out" if isinstance(exc, TimeoutError) else "failed"
            raise Unavailable(
                f"{method} {self._host}:{self._port}{self._prefix}{path} {what}: "
                f"{type(exc).__name__}: {exc}",
                title="No answer", request_id=request_id) from exc

    def _exchange(self, conn: http.client.HTTPConnection, method: str, path: str,
                  payload: bytes | None, headers: dict[str, str], timeout: float,
                  request_id: str) -> _Answer:
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        conn.request(method, self._prefix + path, body=payload, headers=headers)
        response = conn.getresponse()
        body = response.read()
        if response.will_close:
            conn.close()
        return _Answer(response.status, response.headers, body,
                       response.headers.get("X-Request-Id") or request_id)


def _name_problem(what: str, value: Any, limit: int, *, name: bool = True) -> str | None:
    """What is wrong with a biz_type or key (``name``: 1 byte or more, no NUL) or a
    fingerprint, None when nothing."""
    if not isinstance(value, str):
        return f"{what} is a {type(value).__name__}, not a str"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return f"{what} is not UTF-8 (a lone surrogate at character {exc.start})"
    if name and size == 0:
        return f"{what} is empty"
    if size > limit:
        return f"{what} is {size} bytes, over the limit of {limit}"
    if name and "\x00" in value:
        return f"{what} holds a NUL byte at character {value.index(chr(0))}"
    return None


def _check_request(biz_type: Any, key: Any, fingerprint: Any = None) -> None:
    """Refuses, before anything is sent, what the server would refuse: InvalidRequest
    with ``status`` None naming the field."""
    problem = (_name_problem("biz_type", biz_type, MAX_NAME_BYTES)
               or _name_problem("key", key, MAX_NAME_BYTES)
               or (None if fingerprint is None
                   else _name_problem("fingerprint", fingerprint, MAX_FINGERPRINT_BYTES,
                                     name=False)))
    if problem is not None:
        raise InvalidRequest(problem, type=PROBLEM_PREFIX + "invalid_request",
                             title="Invalid request")


def _outcome_of(answer: _Answer) -> str:
    """The ``outcome`` of a complete's or a fail's answer."""
    outcome = answer.json().get("outcome")
    if not isinstance(outcome, str) or not outcome:
        raise answer.malformed("no outcome")
    return outcome


def _claim_outcome(answer: _Answer) -> Outcome:
    return _claim_value(answer.text(), answer.json(), answer)


def _claim_value(text: str, obj: dict[str, Any], answer: _Answer) -> Outcome:
    """The claim outcome of the JSON object ``obj`` (whose text is ``text``), part
    of ``answer``."""
    outcome = obj.get("outcome")
    if outcome == "acquired":
        if not isinstance(obj.get("token"), int):
            raise answer.malformed("acquired without an integer token")
        return Claim(
            token=int(obj["token"]),
            lease_until=obj.get("lease_until"),
            takeover=bool(obj.get("takeover", False)),
            previous_token=obj.get("previous_token"),
            degraded=bool(obj.get("degraded", False)),
            expires_at=obj.get("expires_at"),
        )
    if outcome == "replayed":
        return Replayed(result=obj.get("result"), raw=_json.raw_member(text, "result") or b"null")
    if outcome == "cached_failure":
        return CachedFailure(error=obj.get("error"),
                             raw=_json.raw_member(text, "error") or b"null")
    raise answer.malformed(f"unknown claim outcome {outcome!r}")


def _batch_member(item: BatchItem) -> dict[str, Any]:
    """The request object of one batch item."""
    if isinstance(item, ClaimItem):
        member: dict[str, Any] = {"op": "claim", "biz_type": item.biz_type, "key": item.key}
        if item.fingerprint is not None:
            member["fingerprint"] = item.fingerprint
        if item.lease_ms is not None:
            member["lease_ms"] = item.lease_ms
        return member
    if isinstance(item, CompleteItem):
        return {"op": "complete", "biz_type": item.biz_type, "key": item.key,
                "token": item.token, "result": item.result}
    if isinstance(item, FailItem):
        return {"op": "fail", "biz_type": item.biz_type, "key": item.key, "token": item.token,
                "retryable": bool(item.retryable), "error": item.error}
    raise TypeError(f"a batch item is a ClaimItem, CompleteItem or FailItem, got {item!r}")


def _batch_results(answer: _Answer, items: list[BatchItem]) -> list[BatchResult]:
    text = answer.text()
    obj = answer.json()
    responses = obj.get("responses")
    span = _json.member_spans(text).get("responses")
    if not isinstance(responses, list) or span is None:
        raise answer.malformed("no responses array")
    if len(responses) != len(items):
        raise answer.malformed(f"{len(responses)} responses for {len(items)} items")
    # Each item's own text, for the exact bytes of a replayed result or error.
    spans = _json.element_spans(text[span[0]:span[1]])
    results = []
    for item, response, (start, end) in zip(items, responses, spans):
        if not isinstance(response, dict) or not isinstance(response.get("status"), int):
            raise answer.malformed(f"a response without a status: {response!r}")
        item_text = text[span[0] + start:span[0] + end]
        status = response["status"]
        outcome = response.get("outcome")
        if status >= 400:
            error = error_from_response(status, {}, item_text.encode("utf-8"),
                                        reason=http.client.responses.get(status, ""),
                                        request_id=answer.request_id)
            results.append(BatchResult(status=status, outcome=outcome, error=error))
        elif isinstance(item, ClaimItem):
            results.append(BatchResult(status=status, outcome=outcome,
                                       value=_claim_value(item_text, response, answer)))
        else:
            results.append(BatchResult(status=status, outcome=outcome))
    return results


def _record(answer: _Answer) -> Record:
    text = answer.text()
    obj = answer.json()
    for name in ("biz_type", "key", "state", "token"):
        if name not in obj:
            raise answer.malformed(f"record without {name!r}")
    raw = None
    if "result" in obj:
        raw = _json.raw_member(text, "result")
    elif "error" in obj:
        raw = _json.raw_member(text, "error")
    return Record(
        biz_type=obj["biz_type"],
        key=obj["key"],
        state=obj["state"],
        token=int(obj["token"]),
        lease_until=obj.get("lease_until"),
        fingerprint=obj.get("fingerprint"),
        created_at=obj.get("created_at"),
        updated_at=obj.get("updated_at"),
        expires_at=obj.get("expires_at"),
        result=obj.get("result"),
        error=obj.get("error"),
        raw=raw,
    )
