"""Draws results.json of `tern bench suite` as a PNG: throughput and latency per benchmark."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(results_path: str, png_path: str) -> None:
    report = json.load(open(results_path))
    results = report["results"]
    names = [r["name"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    left.barh(names, [r["throughput_per_s"] for r in results], color="#3b7dd8")
    left.set_xlabel("requests / s (higher is better)")
    left.invert_yaxis()
    # p99 first, p50 on top of it, so both stay visible.
    for label, key, color in [("p99", "p99_us", "#e4572e"), ("p50", "p50_us", "#2e8540")]:
        right.barh(names, [r[key] / 1000 for r in results], color=color, label=label)
    right.set_xlabel("latency ms (lower is better)")
    right.invert_yaxis()
    right.legend()
    m = report["machine"]
    fig.suptitle(f"tern bench suite — {m['cpus']} cpus, {m.get('cpu_model')}, {report['value_bytes']} B values")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
