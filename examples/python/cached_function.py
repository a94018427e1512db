#!/usr/bin/env python3
"""A cache in front of a slow function, shared by every process that uses
the same kvserver: the first call computes, later calls (from any machine)
read the result with one-sided RDMA READs.

    python3 examples/python/cached_function.py SERVER_ADDR [PORT]

Results are stored as JSON (never pickle: whoever can write to the store
could make pickle run code in every reader). A lock around the computation
keeps several processes that miss at once from all computing it.
"""
import functools
import hashlib
import json
import sys
import time

import kvrdma


def kv_cache(kv: kvrdma.Client, lease: float = 60.0):
    """Memoizes a function of JSON-serialisable arguments in kvrdma."""

    def wrap(fn):
        @functools.wraps(fn)
        def cached(*args, **kwargs):
            call = json.dumps([fn.__module__, fn.__qualname__, args, kwargs], sort_keys=True)
            key = "cache:" + hashlib.sha256(call.encode()).hexdigest()
            hit = kv.get(key)
            if hit is not None:
                return json.loads(hit)
            with kv.lock(key, lease=lease):  # one process computes, the others wait
                hit = kv.get(key)
                if hit is not None:
                    return json.loads(hit)
                result = fn(*args, **kwargs)
                kv.put(key, json.dumps(result).encode())
                return result

        return cached

    return wrap


def main():
    host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 7471
    with kvrdma.Client(host, port) as kv:

        @kv_cache(kv)
        def slow_feature(user_id: int, window_days: int = 7) -> dict:
            time.sleep(0.5)  # a database query, a model, ...
            return {"user": user_id, "score": (user_id * 7919) % 1000 / 1000, "window": window_days}

        for attempt in ("first call", "second call"):
            t = time.perf_counter()
            value = slow_feature(42, window_days=30)
            ms = (time.perf_counter() - t) * 1000
            print(f"{attempt}: {value} in {ms:.1f} ms")
        # Invalidate by deleting the key, e.g. when the input data changes.
        t = time.perf_counter()
        slow_feature(42, window_days=30)
        if (time.perf_counter() - t) < 0.25:
            print("cache hit: the second and third calls did not run the function")


if __name__ == "__main__":
    main()
