#!/usr/bin/env python3
"""Parses scrapes of kvserver's /metrics with python3-prometheus-client's
text parser (it raises on malformed input) and checks the conventions the
parser does not: kvrdma_ prefix, HELP on every family, counters' samples
end in _total, histograms have +Inf == _count."""
import sys

from prometheus_client.parser import text_string_to_metric_families


def check(path):
    text = open(path, encoding="utf-8").read()
    fams = list(text_string_to_metric_families(text))
    if not fams:
        raise SystemExit(f"{path}: no metric families")
    for f in fams:
        assert f.name.startswith("kvrdma_"), f.name
        assert f.documentation, f"{f.name}: no HELP"
        assert f.type in ("counter", "gauge", "histogram"), (f.name, f.type)
        assert f.samples, f"{f.name}: no samples"
        if f.type == "counter":
            assert all(s.name.endswith("_total") for s in f.samples), f.name
        if f.type == "histogram":
            inf = [s.value for s in f.samples if s.name.endswith("_bucket") and s.labels.get("le") == "+Inf"]
            count = [s.value for s in f.samples if s.name.endswith("_count")]
            assert inf and count and inf[0] == count[0], (f.name, inf, count)
    return len(fams)


if __name__ == "__main__":
    n = [check(p) for p in sys.argv[1:]]
    print(f"parsed {len(n)} scrapes, {n[-1]} metric families each")
