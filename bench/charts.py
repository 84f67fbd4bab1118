#!/usr/bin/env python3
"""Draws the charts of a bench/run results folder from its summary.json.

    /usr/bin/python3 bench/charts.py RESULTS_DIR

Needs matplotlib (Debian: python3-matplotlib); bench/run calls this with an
interpreter that has it.  Prints the name of every PNG written.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"glibc": "#7f7f7f", "freeway": "#d62728", "mimalloc": "#1f77b4",
          "jemalloc": "#2ca02c", "tcmalloc": "#ff7f0e"}
MARKERS = {"glibc": "s", "freeway": "o", "mimalloc": "^", "jemalloc": "D", "tcmalloc": "v"}


def color(a):
    return COLORS.get(a, None)


def throughput_of(bench, entry):
    """Operations per second for the thread charts: fixed-time benchmarks
    report it as their figure; fixed-work ones print ops_per_sec too."""
    if bench["kind"] == "throughput":
        return entry.get("primary")
    return entry.get("ops_per_sec")


def bar_x(k, i, n, width):
    """Where allocator i of n draws its bar of group k, bars `width` wide side by side."""
    return k + (i - (n - 1) / 2) * width


def thread_axes(ax, bench, allocs):
    xs_all = [c["x"] for c in bench["configs"]]
    failed_any = False
    for a in allocs:
        xs, ys, fx = [], [], []
        for c in bench["configs"]:
            e = c["allocators"].get(a)
            if not e:
                continue
            y = throughput_of(bench, e) if "primary" in e else None
            if y is None:
                fx.append(c["x"])
            else:
                xs.append(c["x"])
                ys.append(y)
        if xs:
            ax.plot(xs, ys, marker=MARKERS.get(a, "o"), color=color(a), label=a)
        if fx:
            failed_any = True
            ax.scatter(fx, [0] * len(fx), marker="x", s=80, color=color(a), label="%s failed" % a, zorder=5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs_all)
    ax.set_xticklabels([str(x) for x in xs_all])
    ax.set_xlabel("threads")
    unit = bench["unit"] if bench["kind"] == "throughput" else "ops/s"
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(bench["name"] + (" (x = failed run)" if failed_any else ""))


def main():
    outdir = Path(sys.argv[1])
    data = json.loads((outdir / "summary.json").read_text())
    allocs = data["allocators"]
    benches = data["benchmarks"]
    written = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(outdir / name, dpi=110)
        plt.close(fig)
        written.append(name)

    # Thread sweeps of operations per second: only the benchmarks that report
    # them (idle-threads and lb-falseshare print none; drawn, every point of
    # theirs would be marked a failed run).
    def reports_ops(b):
        return b["kind"] == "throughput" or any(
            e.get("ops_per_sec") is not None for c in b["configs"] for e in c["allocators"].values())
    sweeps = [b for b in benches if b["xlabel"] == "threads" and len(b["configs"]) > 1 and reports_ops(b)]
    for b in sweeps:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        thread_axes(ax, b, allocs)
        ax.legend(fontsize=8)
        save(fig, "threads-%s.png" % b["name"])
    if sweeps:
        n = len(sweeps)
        cols = 3 if n > 4 else 2 if n > 1 else 1
        rows = (n + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
        for i, b in enumerate(sweeps):
            thread_axes(axes[i // cols][i % cols], b, allocs)
        for j in range(n, rows * cols):
            axes[j // cols][j % cols].axis("off")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=9, bbox_to_anchor=(0.5, 1.0))
        fig.suptitle("Throughput vs threads (higher is better)", y=1.03)
        save(fig, "throughput.png")

    # Peak RSS: each benchmark at its last configuration (most threads,
    # most rounds or largest objects).
    names = [b["name"] for b in benches]
    if names:
        fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(names)), 4.6))
        width = 0.8 / max(1, len(allocs))
        for i, a in enumerate(allocs):
            xs, ys = [], []
            for k, b in enumerate(benches):
                e = b["configs"][-1]["allocators"].get(a) if b["configs"] else None
                if e and e.get("maxrss_kb"):
                    xs.append(bar_x(k, i, len(allocs), width))
                    ys.append(e["maxrss_kb"] / 1024.0)
            ax.bar(xs, ys, width=width, color=color(a), label=a)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(["%s\n%s" % (b["name"], b["configs"][-1]["key"] if b["configs"] else "")
                            for b in benches], rotation=45, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("peak RSS, MiB (log)")
        ax.set_title("Peak RSS per benchmark, last configuration (lower is better)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "peak-rss.png")

    for b in benches:
        if b["name"] == "lb-leak" and b["configs"]:
            fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
            for a in allocs:
                pts = [(c["x"], c["allocators"][a]["primary"], c["allocators"][a]["maxrss_kb"] / 1024.0)
                       for c in b["configs"] if a in c["allocators"] and "primary" in c["allocators"][a]]
                if pts:
                    a1.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS.get(a, "o"), color=color(a), label=a)
                    a2.plot([p[0] for p in pts], [p[2] for p in pts], marker=MARKERS.get(a, "o"), color=color(a), label=a)
            xs = [c["x"] for c in b["configs"]]
            for ax, yl in ((a1, "minor page faults"), (a2, "peak RSS, MiB")):
                ax.set_xscale("log", base=2)
                ax.set_xticks(xs)
                ax.set_xticklabels([str(x) for x in xs])
                ax.set_xlabel("rounds (thread generations)")
                ax.set_ylabel(yl)
                ax.set_ylim(bottom=0)
                ax.grid(True, alpha=0.3)
            a1.set_title("lb-leak: minor faults vs rounds, %s" % b["configs"][0]["key"].split()[0])
            a2.set_title("lb-leak: peak RSS vs rounds")
            a1.legend(fontsize=8)
            save(fig, "lb-leak.png")
        elif b["name"] == "sizesweep" and b["configs"]:
            fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
            # Ranges may run with different bytes per cycle, so compare
            # allocation throughput (GiB allocated per second) when known.
            def speed(c, e):
                p = c["params"]
                if p.get("bytes_per_cycle") and p.get("cycles"):
                    return p["bytes_per_cycle"] * p["cycles"] * p.get("threads", 1) / e["primary"] / 2 ** 30
                return e["primary"]
            have_bytes = all(c["params"].get("bytes_per_cycle") for c in b["configs"])
            for a in allocs:
                pts = [(c["x"], speed(c, c["allocators"][a]), c["allocators"][a]["maxrss_kb"] / 1024.0)
                       for c in b["configs"] if a in c["allocators"] and "primary" in c["allocators"][a]]
                if pts:
                    a1.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS.get(a, "o"), color=color(a), label=a)
                    a2.plot([p[0] for p in pts], [p[2] for p in pts], marker=MARKERS.get(a, "o"), color=color(a), label=a)
            xs = [c["x"] for c in b["configs"]]
            y1 = "GiB allocated per second (log, higher is better)" if have_bytes else "seconds (log)"
            for ax, yl in ((a1, y1), (a2, "peak RSS, MiB (log)")):
                ax.set_yscale("log")
                ax.set_xticks(xs)
                ax.set_xticklabels(["2^%d" % x for x in xs])
                ax.set_xlabel("object sizes [2^x, 2^(x+2)) bytes")
                ax.set_ylabel(yl)
                ax.grid(True, alpha=0.3)
            a1.set_title("sizesweep: %s per size range, %s" % ("allocation rate" if have_bytes else "time",
                                                                b["configs"][0]["key"].split()[0]))
            a2.set_title("sizesweep: peak RSS")
            a1.legend(fontsize=8)
            save(fig, "sizesweep.png")
        elif b["name"] == "latency" and b["configs"]:
            keys = [k for k in b["extra"]]
            c = b["configs"][0]
            fig, ax = plt.subplots(figsize=(11, 4.2))
            width = 0.8 / max(1, len(allocs))
            for i, a in enumerate(allocs):
                e = c["allocators"].get(a)
                if not e or "extra" not in e:
                    continue
                xs = [bar_x(k, i, len(allocs), width) for k in range(len(keys))]
                ax.bar(xs, [e["extra"].get(k, 0) for k in keys], width=width, color=color(a), label=a)
            ax.set_xticks(range(len(keys)))
            ax.set_xticklabels([k.replace("ns_", "") for k in keys], fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("ns (log)")
            ax.set_title("latency: ns per malloc/free pair by size; ns per free (local / remote batch)")
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8)
            save(fig, "latency.png")
        elif b["name"] == "lb-falseshare" and b["configs"]:
            c = b["configs"][-1]
            fig, ax = plt.subplots(figsize=(9, 4.2))
            ideal = []
            for a in allocs:
                e = c["allocators"].get(a)
                if not e or not e.get("per_size"):
                    continue
                ks = sorted(int(k) for k in e["per_size"])
                ax.plot(ks, [e["per_size"][str(k)] * 1000 for k in ks], marker=MARKERS.get(a, "o"),
                        markersize=3, color=color(a), label=a)
                if e.get("extra", {}).get("ideal_seconds"):
                    ideal.append(e["extra"]["ideal_seconds"] / len(ks) * 1000)
            if ideal:
                ax.axhline(sorted(ideal)[len(ideal) // 2], color="black", linestyle="--",
                           label="separate cache lines (ideal)")
            ax.set_xlabel("object size, bytes")
            ax.set_ylabel("ms for all threads' writes")
            ax.set_ylim(bottom=0)
            ax.set_title("lb-falseshare: false cache-line sharing, %s" % c["key"])
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            save(fig, "lb-falseshare.png")
        elif b["name"] == "after-peak" and b["configs"]:
            # Per configuration, each allocator's resident set at the end (solid)
            # in front of its peak (pale): how much of the peak it kept.
            fig, ax = plt.subplots(figsize=(10, 4.2))
            width = 0.8 / max(1, len(allocs))
            for i, a in enumerate(allocs):
                xs, ends, peaks = [], [], []
                for k, c in enumerate(b["configs"]):
                    e = c["allocators"].get(a)
                    if e and "primary" in e:
                        xs.append(bar_x(k, i, len(allocs), width))
                        ends.append(e["primary"] / 1024.0)
                        peaks.append(e["maxrss_kb"] / 1024.0)
                ax.bar(xs, peaks, width=width, color=color(a), alpha=0.25)
                ax.bar(xs, ends, width=width, color=color(a), label=a)
            ax.set_xticks(range(len(b["configs"])))
            ax.set_xticklabels([c["key"] for c in b["configs"]], fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("MiB (log)")
            ax.set_title("after-peak: resident set 3 s after the heap was freed (solid), peak (pale)")
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8)
            save(fig, "after-peak.png")

    for w in written:
        print(w)


if __name__ == "__main__":
    main()
