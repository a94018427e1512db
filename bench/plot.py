#!/usr/bin/python3
"""Plots kvbench JSON results: latency percentiles and throughput against depth.

    bench/plot.py OUT.png RUN.json [RUN.json ...]

Each JSON file is one kvbench run (--json); runs are ordered by threads x depth.
Uses Debian's python3-matplotlib (tools/setup installs it).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, files = sys.argv[1], sys.argv[2:]
    runs = []
    for f in files:
        d = json.load(open(f))
        c = d["config"]
        op = "read" if "read" in d["results"] else next(iter(d["results"]))
        r = d["results"][op]
        runs.append((c["threads"] * c["depth"], r, d["total_ops_per_sec"], c))
    runs.sort(key=lambda x: x[0])
    x = [r[0] for r in runs]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label in (("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9")):
        a1.plot(x, [r[1][key] for r in runs], marker="o", label=label)
    a1.set_xscale("log", base=2)
    a1.set_yscale("log")
    a1.set_xlabel("operations in flight (threads x depth)")
    a1.set_ylabel("GET latency (us)")
    a1.set_title("GET latency vs. depth")
    a1.grid(True, which="both", alpha=0.3)
    a1.legend()
    a2.plot(x, [r[2] / 1e3 for r in runs], marker="o", color="tab:green")
    a2.set_xscale("log", base=2)
    a2.set_xlabel("operations in flight (threads x depth)")
    a2.set_ylabel("GET throughput (k ops/s)")
    a2.set_title("GET throughput vs. depth")
    a2.grid(True, which="both", alpha=0.3)
    c = runs[0][3]
    fig.suptitle("kvbench workload %s, %d keys, %d B values, location cache %s (Soft-RoCE in an emulated guest)"
                 % (c["workload"], c["keys"], c["value_size_max"],
                    "off" if c.get("location_cache", -1) == 0 else "on"), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
