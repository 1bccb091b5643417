#!/usr/bin/env python3
"""fsync_probe: what a bare durable append costs on the disk under DIR, the floor
under a durable claim's latency. Appends SIZE bytes to a fresh file in DIR and
fdatasync()s it, COUNT times, timing each append + fdatasync, and prints one line:

  RESULT count=… size=… p50_ms=… p99_ms=… max_ms=… cpu_us=…

cpu_us is this process's CPU time (user + system) per append + fdatasync: what the
kernel charges the caller for a durable write on this disk, whatever it holds.

bench/claims.sh runs it in the same run as the claims, on the same disk as the
store, and checks the claim p99 at half of peak against twice this p99.

  bench/fsync_probe.py DIR [--count 2000] [--size 4096]
"""
import argparse
import os
import resource
import sys
import time


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def percentile(sorted_values, fraction):
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="directory on the disk to measure (a file is created in it)")
    parser.add_argument("--count", type=positive, default=2000, help="appends (default 2000)")
    parser.add_argument("--size", type=positive, default=4096,
                        help="bytes per append (default 4096)")
    args = parser.parse_args()
    if not os.path.isdir(args.dir):
        sys.exit(f"fsync_probe: {args.dir} is not a directory")
    path = os.path.join(args.dir, f"fsync_probe.{os.getpid()}")
    block = b"x" * args.size
    latencies = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    before = resource.getrusage(resource.RUSAGE_SELF)
    try:
        for _ in range(args.count):
            start = time.perf_counter()
            written = os.write(fd, block)
            if written != len(block):
                sys.exit(f"fsync_probe: short write to {path}: {written} of {len(block)} bytes")
            os.fdatasync(fd)
            latencies.append((time.perf_counter() - start) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    latencies.sort()
    print(f"RESULT count={args.count} size={args.size} p50_ms={percentile(latencies, 0.50):.3f} "
          f"p99_ms={percentile(latencies, 0.99):.3f} max_ms={latencies[-1]:.3f} "
          f"cpu_us={cpu * 1e6 / args.count:.1f}")


if __name__ == "__main__":
    main()
