"""The client's HTTP handling against a scripted fake server: what goes on the wire,
503 retries, closed keep-alive connections and timeouts."""

import json
import socket
import threading
from dataclasses import dataclass, field

import pytest

import idem_client
from idem_client import Claim, Client, RetryPolicy, ServerError, Unavailable


@dataclass
class Reply:
    status: int
    body: bytes = b"{}"
    headers: dict = field(default_factory=dict)
    close_after: bool = False  # close the socket without saying Connection: close
    hang: bool = False  # read the request, never answer


@dataclass
class Seen:
    method: str
    target: str
    headers: dict
    body: bytes


class FakeServer:
    """Answers each request with the next scripted Reply."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.seen: list[Seen] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self.open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            self._exchange(conn)
        except OSError:  # stop() closed the socket under us
            pass

    def _exchange(self, conn):
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    conn.close()
                    return
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ")
            headers = {k.strip().lower(): v.strip()
                       for k, v in (line.split(":", 1) for line in lines[1:])}
            n = int(headers.get("content-length", "0"))
            while len(buf) < n:
                buf += conn.recv(65536)
            body, buf = buf[:n], buf[n:]
            self.seen.append(Seen(method, target, headers, body))
            reply = self.replies.pop(0)
            if reply.hang:
                continue
            extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
            conn.sendall(f"HTTP/1.1 {reply.status} X\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(reply.body)}\r\n{extra}\r\n".encode()
                         + reply.body)
            if reply.close_after:
                conn.close()
                return

    def stop(self):
        self.sock.close()
        for c in self.open:
            c.close()


ACQUIRED = (b'{"outcome":"acquired","token":1,"lease_until":"2026-01-01T00:00:00.000Z",'
            b'"takeover":false}')
RECORD = (b'{"biz_type":"refund","key":"k","state":"PROCESSING","token":1,"lease_until":null,'
          b'"fingerprint":null,"created_at":null,"updated_at":null}')
UNAVAILABLE = (b'{"type":"urn:idem:problem:store_unavailable","title":"Store unavailable",'
               b'"status":503,"detail":"claim: down","outcome":"unavailable"}')


@pytest.fixture
def fake():
    servers = []

    def make(*replies):
        s = FakeServer(replies)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def policy(sleeps, **kw):
    return RetryPolicy(sleep=sleeps.append, random=lambda: 1.0, **kw)


def test_what_a_claim_sends(fake):
    srv = fake(Reply(201, ACQUIRED))
    with Client(srv.url + "/gw/", "s3cret", request_id=lambda: "rid-1") as c:
        c.claim("refund", "R-\u00e9", "sha256:ab", lease_ms=500, wait_ms=100)
    [seen] = srv.seen
    assert (seen.method, seen.target) == ("POST", "/gw/v1/claims")
    assert seen.headers["authorization"] == "Bearer s3cret"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-request-id"] == "rid-1"
    assert seen.headers["user-agent"] == f"idem-python/{idem_client.__version__}"
    assert json.loads(seen.body) == {"biz_type": "refund", "key": "R-\u00e9",
                                     "fingerprint": "sha256:ab", "lease_ms": 500, "wait_ms": 100}


def test_get_percent_encodes_both_segments(fake):
    srv = fake(Reply(200, RECORD))
    with Client(srv.url, "t") as c:
        c.get("re/fund", "a b/\u00e9?%")
    assert srv.seen[0].target == "/v1/records/re%2Ffund/a%20b%2F%C3%A9%3F%25"


def test_a_503_is_retried_with_the_same_request(fake):
    sleeps = []
    srv = fake(Reply(503, UNAVAILABLE, {"Retry-After": "1"}), Reply(201, ACQUIRED))
    with Client(srv.url, "t", retry=policy(sleeps)) as c:
        claim = c.claim("refund", "k", "fp")
    assert claim == Claim(token=1, lease_until="2026-01-01T00:00:00.000Z")
    assert sleeps == [0.1]
    first, second = srv.seen
    assert first.body == second.body
    assert first.headers["x-request-id"] == second.headers["x-request-id"]


def test_a_closed_keep_alive_connection_is_reopened_without_a_retry(fake):
    sleeps = []
    srv = fake(Reply(200, RECORD, close_after=True), Reply(200, RECORD, close_after=True),
               Reply(200, RECORD))
    with Client(srv.url, "t", retry=policy(sleeps)) as c:
        for _ in range(3):
            assert c.get("refund", "k").state == "PROCESSING"
    assert sleeps == []
    assert (len(srv.seen), srv.connections) == (3, 3)


def test_a_timeout_is_unavailable(fake):
    sleeps = []
    srv = fake(Reply(0, hang=True), Reply(0, hang=True))
    with Client(srv.url, "t", timeout=0.2, retry=policy(sleeps, max_attempts=2)) as c:
        with pytest.raises(Unavailable) as info:
            c.complete("refund", "k", 1, {"a": 1})
    assert isinstance(info.value.__cause__, TimeoutError)
    assert "timed out" in info.value.detail
    assert (info.value.attempts, info.value.status) == (2, None)
    assert sleeps == [0.1]
    assert len(srv.seen) == 2


def test_an_answer_that_is_not_json_is_a_server_error(fake):
    srv = fake(Reply(201, b"<html>"))
    with Client(srv.url, "t", retry=RetryPolicy.none()) as c:
        with pytest.raises(ServerError) as info:
            c.claim("refund", "k")
    assert info.value.status == 201


def test_a_url_that_is_not_http_is_refused():
    with pytest.raises(ValueError):
        Client("ftp://host", "t")
