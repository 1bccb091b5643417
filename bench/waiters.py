#!/usr/bin/env python3
"""waiters.py: the waiting side of bench/waiters.sh.

Claims KEY once and holds it (lease --lease-ms, never completed), then keeps
--waiters keep-alive connections each waiting on KEY with POST /v1/claims
{"wait_ms": --wait-ms}: as soon as a wait ends (409 in_progress), the
connection asks again, so --waiters claims are waiting at every moment. Prints
"READY" once every waiter has sent its first claim, and at SIGTERM/SIGINT the line
  WAITERS waiters=N answers=A errors=E seconds=S
then exits 0. Python standard library only (asyncio).

  waiters.py --port P --token T [--waiters 1000] [--key hot] [--wait-ms 30000]
"""
import argparse
import asyncio
import json
import signal
import sys
import time


async def request(reader, writer, host, token, body):
    """Sends one POST /v1/claims and returns (status, body bytes)."""
    data = json.dumps(body).encode()
    writer.write(
        (f"POST /v1/claims HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
         f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    payload = await reader.readexactly(length) if length else b""
    return status, payload


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--token", required=True)
    p.add_argument("--waiters", type=int, default=1000)
    p.add_argument("--key", default="hot")
    p.add_argument("--wait-ms", type=int, default=30000)
    p.add_argument("--lease-ms", type=int, default=3600000)
    args = p.parse_args()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    reader, writer = await asyncio.open_connection(args.host, args.port)
    status, payload = await request(reader, writer, args.host, args.token,
                                    {"biz_type": "bench", "key": args.key,
                                     "lease_ms": args.lease_ms})
    if status != 201:
        print(f"waiters.py: the holder's claim of {args.key!r} answered {status}: "
              f"{payload[:200]!r}", file=sys.stderr)
        return 1

    answers = 0
    errors = 0
    sent = 0
    all_sent = asyncio.Event()
    body = {"biz_type": "bench", "key": args.key, "wait_ms": args.wait_ms}

    async def waiter():
        nonlocal answers, errors, sent
        first = True
        while not stop.is_set():
            try:
                r, w = await asyncio.open_connection(args.host, args.port)
            except OSError:
                errors += 1
                await asyncio.sleep(0.1)
                continue
            try:
                while not stop.is_set():
                    task = asyncio.ensure_future(request(r, w, args.host, args.token, body))
                    if first:
                        first = False
                        sent += 1
                        if sent == args.waiters:
                            all_sent.set()
                    status, _ = await task
                    if status == 409:
                        answers += 1
                    else:
                        errors += 1
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                errors += 1
            finally:
                w.close()

    start = time.monotonic()
    tasks = [asyncio.ensure_future(waiter()) for _ in range(args.waiters)]
    await asyncio.wait([asyncio.ensure_future(all_sent.wait()), asyncio.ensure_future(stop.wait())],
                       return_when=asyncio.FIRST_COMPLETED)
    # The writes are queued; give the server a moment to read them all.
    await asyncio.sleep(1)
    print("READY", flush=True)
    await stop.wait()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    writer.close()
    print(f"WAITERS waiters={args.waiters} answers={answers} errors={errors} "
          f"seconds={time.monotonic() - start:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
