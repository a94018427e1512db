#!/usr/bin/env python3
"""GET latency at depth 1 and batched GET throughput through the Python
package, in the shape of kvbench's read-only run (uniform keys, fixed key
and value sizes), so the two can be compared in one guest run
(bench/python_vs_kvbench.sh).

    bench_get.py HOST PORT [--keys N] [--key-size B] [--value-size B]
                 [--duration S] [--batch N] [--json FILE]
"""
import argparse
import json
import os
import random
import statistics
import time

import kvrdma


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json")
    a = ap.parse_args()

    kv = kvrdma.Client(a.host, a.port)
    keys = [f"py{i:0{a.key_size - 2}d}".encode() for i in range(a.keys)]
    value = os.urandom(a.value_size)
    for i in range(0, len(keys), 1000):
        kv.put_many({k: value for k in keys[i:i + 1000]})
    rng = random.Random(1)

    # Depth 1: one get at a time, each timed (warm-up: 1 s).
    lat = []
    end_warm = time.monotonic() + 1.0
    while time.monotonic() < end_warm:
        kv.get(rng.choice(keys))
    end = time.monotonic() + a.duration
    while time.monotonic() < end:
        k = rng.choice(keys)
        t = time.perf_counter_ns()
        v = kv.get(k)
        lat.append(time.perf_counter_ns() - t)
        assert v is not None
    lat.sort()
    p50 = lat[len(lat) // 2] / 1000
    p99 = lat[int(len(lat) * 0.99)] / 1000

    # Batched: get_many of `batch` keys back to back (one doorbell per batch).
    n = 0
    end = time.monotonic() + a.duration
    t0 = time.perf_counter()
    while time.monotonic() < end:
        got = kv.get_many([rng.choice(keys) for _ in range(a.batch)])
        n += len(got)
    secs = time.perf_counter() - t0
    res = {
        "keys": a.keys, "key_size": a.key_size, "value_size": a.value_size, "batch": a.batch,
        "depth1": {"ops": len(lat), "ops_per_sec": len(lat) / a.duration, "p50_us": p50, "p99_us": p99,
                   "mean_us": statistics.fmean(lat) / 1000},
        "batched": {"ops": n, "ops_per_sec": n / secs},
    }
    print(f"python depth 1: {len(lat)} gets, p50 {p50:.1f} us, p99 {p99:.1f} us")
    print(f"python get_many x{a.batch}: {n / secs:.0f} gets/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)
    kv.close()


if __name__ == "__main__":
    main()
