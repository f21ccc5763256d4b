"""Draws scale.json of `tern-bench scale` as a PNG: cost against records per node.

Left: each measurement's rate as a ratio of the same at the baseline size
(1.0 = as fast as with 10,000 records). Right: memory (RSS after loading,
peak RSS while restoring) and disk bytes per record, against N (log scale).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(report_path: str, png_path: str) -> None:
    report = json.load(open(report_path))
    sizes = report["sizes"]
    records = [s["records"] for s in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    measures = list(sizes[0]["versus_baseline"].keys()) if sizes else []
    for measure in measures:
        ratios = [s["versus_baseline"][measure]["ratio_median"] for s in sizes]
        left.plot(records, ratios, marker="o", label=measure)
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set_xscale("log")
    left.set_xlabel("records on the node")
    left.set_ylabel(f"rate / rate at {report['baseline']} records (median of rounds)")
    left.legend()
    mib = 1024 * 1024
    right.plot(records, [s["rss_after_load_bytes"] / mib for s in sizes], marker="o", label="RSS after load (MiB)")
    right.plot(records, [s["rss_peak_restore_bytes"] / mib for s in sizes], marker="o", label="peak RSS, restore + catch-up (MiB)")
    right.set_xscale("log")
    right.set_xlabel("records on the node")
    right.set_ylabel("MiB")
    disk = right.twinx()
    disk.plot(records, [s["data_bytes_per_record"] for s in sizes], marker="s", color="#888888", label="disk bytes / record")
    disk.set_ylabel("disk bytes per record")
    right.legend(loc="upper left")
    disk.legend(loc="upper right")
    fig.suptitle(f"tern-bench scale: {report['value_bytes']} B values, {report['partitions']} partitions")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
