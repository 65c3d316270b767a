"""Turns the suite's measurements into ``REPORT.md``, ``results.json`` and PNG plots (matplotlib, Agg).

Conventions the report keeps:
- A figure measured in several rounds is shown as its median with the range (min-max) of the rounds.
- Ratios compare medians measured in the same run. For throughput, *pylog ÷ peer* (above 1: pylog is
  faster); for latency, *peer ÷ pylog* (above 1: pylog is quicker). Either way, above 1 favours pylog.
- MB are 10^6 bytes of payload (values only, as in the seed's benchmark); GiB of stored data are 2^30.
- Every peer that ran appears in every table and plot; peers that could not run are listed with why.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: no display on a server or in CI
import matplotlib.pyplot as plt  # noqa: E402

#: Throughput workloads: id -> (title, what it does). The seed's set, in the seed's order.
THROUGHPUT: dict[str, tuple[str, str]] = {
    "produce1": ("1 producer", "One process appends 100-byte records in batches of 1,000 to one stream."),
    "produce3": ("3 producer processes", "Three processes at once, each appending to its own stream."),
    "consume1": ("1 consumer", "One process reads back what the 1-producer round wrote, in reads of up to "
                 "500 records."),
    "consume3": ("3 consumer processes", "Three processes at once, each reading back one stream of the "
                 "3-producer round."),
    "together_produce": ("Producer and consumer together: producer", "One producer process and one consumer "
                         "process tailing the same stream, at the same time: the producer's rate."),
    "together_consume": ("Producer and consumer together: consumer", "The same rounds: the tailing "
                         "consumer's rate."),
}
PLOTS = {"throughput": "throughput.png", "size_records": "size_records.png", "size_mb": "size_mb.png",
         "stored": "stored.png", "latency": "latency.png"}
_COLORS = {"pylog": "#1f77b4", "pylog-client": "#17becf", "file": "#7f7f7f", "lmdb": "#2ca02c",
           "sqlite": "#ff7f0e", "redis": "#d62728"}


def _color(peer: str) -> str:
    return _COLORS.get(peer, "#9467bd")


def _stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def rate_text(x: float) -> str:
    """A rate with 3 significant figures and a unit prefix: 4.07 M, 812 k, 95.3."""
    for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _range(values: list[float], fmt: Any = rate_text) -> str:
    med, lo, hi = _stats(values)
    return fmt(med) if len(values) == 1 else f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})"


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


def _pct(x: float) -> str:
    return f"{x:.2g}%"


def _ms(x: float) -> str:
    return f"{x:.3g}"


# ---------------------------------------------------------------------------------------------- plots


def _plot_throughput(tp: dict[str, dict[str, list[dict[str, Any]]]], peers: list[str], path: str) -> None:
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(peers)
    ids = list(THROUGHPUT)
    for i, peer in enumerate(peers):
        meds = [_stats([r["records_s"] for r in tp[w][peer]])[0] for w in ids]
        los = [m - _stats([r["records_s"] for r in tp[w][peer]])[1] for w, m in zip(ids, meds)]
        his = [_stats([r["records_s"] for r in tp[w][peer]])[2] - m for w, m in zip(ids, meds)]
        xs = [j + (i - (len(peers) - 1) / 2) * width for j in range(len(ids))]
        ax.bar(xs, meds, width, yerr=[los, his], label=peer, color=_color(peer), capsize=2)
    ax.set_xticks(range(len(ids)))
    ax.set_xticklabels(["1 producer", "3 producers", "1 consumer", "3 consumers", "together:\nproducer",
                        "together:\nconsumer"])
    ax.set_yscale("log")
    ax.set_ylabel("records/s (100-byte values, log scale)")
    ax.set_title("Throughput, seed 001 workloads (median of rounds, bars: range)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(ncol=len(peers), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_sizes(sizes: dict[str, dict[Any, list[dict[str, Any]]]], peers: list[str], key: str, ylabel: str,
                title: str, path: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    for peer in peers:
        xs = sorted(int(s) for s in sizes[peer])
        ys = [_stats([r[key] for r in sizes[peer][_k(sizes[peer], s)]])[0] for s in xs]
        ax.plot(xs, ys, marker="o", label=peer, color=_color(peer))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("value size (bytes)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _k(d: dict[Any, Any], size: int) -> Any:
    """The key of ``size`` in ``d``: int in memory, str after a JSON round trip."""
    return size if size in d else str(size)


def _plot_stored(stored: dict[str, dict[str, Any]], peers: list[str], path: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 5))
    for peer in peers:
        series = stored[peer]["series"]
        ax.plot([s[0] for s in series], [s[1] for s in series], marker=".", label=peer, color=_color(peer))
    ax.set_yscale("log")
    ax.set_xlabel("payload already stored (GiB)")
    ax.set_ylabel("MB/s appended (1,000-byte values, log scale)")
    ax.set_title("Producer throughput against data stored")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_latency(lat: dict[str, list[dict[str, Any]]], peers: list[str], path: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 5))
    qs = ("p50", "p99", "p99.9")
    width = 0.8 / len(peers)
    for i, peer in enumerate(peers):
        meds = [_stats([r[q] for r in lat[peer]])[0] for q in qs]
        xs = [j + (i - (len(peers) - 1) / 2) * width for j in range(len(qs))]
        ax.bar(xs, meds, width, label=peer, color=_color(peer))
    ax.set_xticks(range(len(qs)))
    ax.set_xticklabels(qs)
    ax.set_yscale("log")
    ax.set_ylabel("ms, producer process to consumer process (log scale)")
    ax.set_title("End-to-end latency (one record every 0.5 ms; median of rounds)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------- report


def _ratio_vs_pylog(base: float | None, value: float, higher_is_better: bool = True) -> float | None:
    if base is None or value <= 0 or base <= 0:
        return None
    return base / value if higher_is_better else value / base


def _throughput_table(runs: dict[str, list[dict[str, Any]]], peers: list[str]) -> list[str]:
    base = _stats([r["records_s"] for r in runs["pylog"]])[0] if "pylog" in runs else None
    lines = ["| peer | records/s | MB/s | pylog ÷ peer | rounds |", "|---|---:|---:|---:|---|"]
    for peer in peers:
        rs = runs[peer]
        med = _stats([r["records_s"] for r in rs])[0]
        note = f"{len(rs)}" + (" (capped: ran out of time)" if any(r["capped"] for r in rs) else "")
        lines.append(f"| {peer} | {_range([r['records_s'] for r in rs])} | "
                     f"{_range([r['mb_s'] for r in rs], lambda x: f'{x:.1f}')} | "
                     f"{_ratio(_ratio_vs_pylog(base, med))} | {note} |")
    return lines


def _sizes_tables(sizes: dict[str, dict[Any, list[dict[str, Any]]]], peers: list[str],
                  message_sizes: list[int]) -> list[str]:
    head = "| peer | " + " | ".join(f"{s:,} B" for s in message_sizes) + " |"
    rule = "|---|" + "---:|" * len(message_sizes)
    lines = ["Records/s (MB/s):", "", head, rule]
    for peer in peers:
        cells = []
        for s in message_sizes:
            rs = sizes[peer][_k(sizes[peer], s)]
            cells.append(f"{_range([r['records_s'] for r in rs])} ({_stats([r['mb_s'] for r in rs])[0]:.1f})"
                         + ("*" if any(r["capped"] for r in rs) else ""))
        lines.append(f"| {peer} | " + " | ".join(cells) + " |")
    lines += ["", "pylog ÷ peer (records/s):", "", head, rule]
    for peer in peers:
        cells = []
        for s in message_sizes:
            med = _stats([r["records_s"] for r in sizes[peer][_k(sizes[peer], s)]])[0]
            base = (_stats([r["records_s"] for r in sizes["pylog"][_k(sizes["pylog"], s)]])[0]
                    if "pylog" in sizes else None)
            cells.append(_ratio(_ratio_vs_pylog(base, med)))
        lines.append(f"| {peer} | " + " | ".join(cells) + " |")
    return lines


def _gib_medians(series: list[list[float]]) -> tuple[float, float]:
    """Median MB/s of the chunks appended within the first GiB stored, and within the last GiB."""
    end = series[-1][0]
    first = [s[1] for s in series if s[0] < 1] or [series[0][1]]
    last = [s[1] for s in series if s[0] >= end - 1 + 1e-9] or [series[-1][1]]
    return statistics.median(first), statistics.median(last)


def _stored_table(stored: dict[str, dict[str, Any]], peers: list[str]) -> list[str]:
    lines = ["| peer | stored | in | MB/s, first GiB | MB/s, last GiB | last ÷ first | slowest chunk | "
             "footprint ÷ payload |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for peer in peers:
        r = stored[peer]
        if not r["series"]:
            continue
        first, last = _gib_medians(r["series"])
        reached = f"{r['stored'] / (1 << 30):.2f} GiB" + (" (time cap)" if r["capped"] else "")
        lines.append(f"| {peer} | {reached} | {r['seconds']:.0f} s | {first:.0f} | {last:.0f} | "
                     f"{last / first:.2f}x | {min(s[1] for s in r['series']):.0f} MB/s | "
                     f"{r['footprint'] / max(r['stored'], 1):.2f}x |")
    return lines


def _latency_table(lat: dict[str, list[dict[str, Any]]], peers: list[str]) -> list[str]:
    base = {q: _stats([r[q] for r in lat["pylog"]])[0] for q in ("p50", "p99", "p99.9")} if "pylog" in lat else {}
    lines = ["| peer | p50 ms | p99 ms | p99.9 ms | max ms | peer ÷ pylog (p50 / p99 / p99.9) | consumer CPU | "
             "idle consumer CPU |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for peer in peers:
        rs = lat[peer]
        ratios = " / ".join(_ratio(_ratio_vs_pylog(base.get(q), _stats([r[q] for r in rs])[0], False))
                            for q in ("p50", "p99", "p99.9"))
        lines.append(f"| {peer} | {_range([r['p50'] for r in rs], _ms)} | {_range([r['p99'] for r in rs], _ms)} | "
                     f"{_range([r['p99.9'] for r in rs], _ms)} | {_range([r['max'] for r in rs], _ms)} | {ratios} | "
                     f"{_range([r['consumer_cpu'] for r in rs], _pct)} | {_range([r['idle_cpu'] for r in rs], _pct)} |")
    return lines


def _median(runs: list[dict[str, Any]], key: str = "records_s") -> float:
    return _stats([r[key] for r in runs])[0]


def _bounds(meta: dict[str, Any], results: dict[str, Any], peers: list[str]) -> list[str]:
    """The "what bounds these figures" section: mechanisms, with this run's numbers where they exist."""
    tp = results["throughput"]
    out: list[str] = []
    has = set(peers).__contains__

    def ratio(w: str, a: str, b: str) -> str:
        return f"{_median(tp[w][a]) / _median(tp[w][b]):.2f}x"

    cores = meta["machine"]["cores"]
    out.append(f"- **{cores} cores for everything.** Producers, consumers, the Redis server and other jobs on "
               f"this VM (load average {meta['load_before'][0]:.1f} at the start, "
               f"{meta.get('load_after', meta['load_before'])[0]:.1f} at the end) share them. Three processes "
               "cannot go past about twice one process, and a producer with a consumer beside it shares the "
               "same two cores; the 3-process ratios say how the processes share the machine, not how a peer "
               "scales.")
    if has("pylog") and has("file"):
        out.append(f"- **The physical baseline.** The plain file writer does about the least a Python program can "
                   "do with a batch of `bytes` (count the lengths in C, join once, one `write`), and its reader "
                   "the least to hand them back (one slice per record). pylog appends at "
                   f"{ratio('produce1', 'pylog', 'file')} of the file's rate and reads at "
                   f"{ratio('consume1', 'pylog', 'file')} of it: on top, it frames a checksummed batch (CRC-32C) with "
                   "offsets and timestamps, adds a sparse index entry and keeps the segment's bookkeeping; "
                   "reading, it checks every batch's CRC and builds one `Record` (offset, timestamp, key, value, "
                   "headers) per record. `read_columns`, which builds no Python object per record, is not used "
                   "here, so that every peer hands its consumer the same list of `bytes`.")
    if has("pylog") and has("pylog-client"):
        out.append(f"- **The client APIs.** `producer.send()` is one Python call, a lock and a future per record; "
                   f"it reaches {ratio('produce1', 'pylog-client', 'pylog')} of `append_values` with the same "
                   f"batches. `consumer.poll()` builds 12-field `ConsumerRecord`s: "
                   f"{ratio('consume1', 'pylog-client', 'pylog')} of `Partition.read`.")
    if has("lmdb"):
        lm = _median(tp["consume1"]["lmdb"]) / _median(tp["produce1"]["lmdb"])
        out.append("- **LMDB** inserts every record into a B+tree (in append mode, without searching) and copies it "
                   "into a page of the memory map, in a write transaction per batch; values over about 2 KB go to "
                   "overflow pages of their own. Its reads walk a cursor over the mapped pages, with no checksum "
                   f"to check: here it read at {lm:.2f}x its write rate.")
    if has("sqlite"):
        out.append("- **SQLite (persist-queue)** runs one `INSERT` statement, and commits, per `put()`: the "
                   "library has no batch insert (`task_done()` commits what is pending, but each `put()` has "
                   "committed already). Reading runs one "
                   "`SELECT` per record. Both go through the SQL engine and the B-tree per record; with "
                   "`synchronous=OFF` none of it waits for the disk.")
    if has("redis"):
        out.append("- **Redis** keeps the streams in the server's memory and appends every command to its "
                   "append-only file. Every record crosses a loopback socket as a command the server parses; "
                   "pipelining removes the round trips but not that work, and the server is a second process "
                   "competing for the same cores as the client. Large values are copied several times (client "
                   "buffer, socket, server, AOF).")
    stored = results.get("stored") or {}
    if has("pylog") and stored.get("pylog", {}).get("series"):
        first, last = _gib_medians(stored["pylog"]["series"])
        text = (f"- **Data stored.** Nothing pylog does per append grows with the data already stored (the index "
                f"append and the roll are O(1)); over its last GiB it appended at {last / first:.2f}x its rate "
                "over the first (medians of the chunks)")
        if has("file") and stored["file"]["series"]:
            f_first, f_last = _gib_medians(stored["file"]["series"])
            text += f", the plain file at {f_last / f_first:.2f}x"
        text += (". What changes with gigabytes stored is the page cache: writing into memory the kernel first "
                 "has to reclaim or write back costs more, for every peer that writes through it.")
        if stored["pylog"]["stored"] > 1 << 30:
            text += (" pylog's dips come every `segment.bytes` (1 GiB): rolling to a new segment seals the full "
                     "one, and sealing fdatasyncs it in the appending thread (`Segment.seal`), so that chunk "
                     "waits for a gigabyte to reach the disk.")
        out.append(text)
    lat = results["latency"]
    cpu = {p: _median(lat[p], "consumer_cpu") for p in peers}
    pollers = [p for p in ("file", "lmdb", "sqlite") if has(p)]
    text = ("- **Latency.** Peers without a cross-process wake-up (file, LMDB, SQLite) are polled every 0.2 ms, "
            "pylog's own polling floor. With a record every 0.5 ms a poller seldom looks in vain, so its p50 is "
            "about the time to notice plus one read")
    if pollers:
        text += "; the pollers used " + ", ".join(f"{cpu[p]:.2g}% ({p})" for p in pollers) + " of a core doing it"
    text += (". pylog's reader sleeps in a futex until the writer's notify, and Redis's client blocks in "
             "`XREAD BLOCK`: each record pays a wake-up through the scheduler")
    if has("pylog"):
        text += (f"; pylog's consumer used {cpu['pylog']:.2g}% of a core on waits, wake-ups and one "
                 "checksummed read per record")
    if has("pylog") and pollers:
        idle = {p: _median(lat[p], "idle_cpu") for p in peers}
        text += (f". Waiting with nothing to read, pylog's consumer used {idle['pylog']:.2g}% of a core, the "
                 "pollers " + ", ".join(f"{idle[p]:.2g}% ({p})" for p in pollers))
    text += (". The tails (p99, p99.9) come from the two processes and everything else on the machine sharing "
             "the cores.")
    out.append(text)
    return out


def write(meta: dict[str, Any], results: dict[str, Any], out: str) -> list[str]:
    """Write results.json, the plots and REPORT.md into ``out``; the paths written."""
    os.makedirs(out, exist_ok=True)
    peers = [p for p in meta["peers"]]
    written = []
    path = os.path.join(out, "results.json")
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    written.append(path)
    tp, sizes, lat, stored = results["throughput"], results["sizes"], results["latency"], results["stored"]
    plan = meta["plan"]
    _plot_throughput(tp, peers, os.path.join(out, PLOTS["throughput"]))
    _plot_sizes(sizes, peers, "records_s", "records/s (log scale)", "Producer records/s against value size",
                os.path.join(out, PLOTS["size_records"]))
    _plot_sizes(sizes, peers, "mb_s", "MB/s of payload (log scale)", "Producer MB/s against value size",
                os.path.join(out, PLOTS["size_mb"]))
    _plot_stored(stored, peers, os.path.join(out, PLOTS["stored"]))
    _plot_latency(lat, peers, os.path.join(out, PLOTS["latency"]))
    written += [os.path.join(out, name) for name in PLOTS.values()]

    m, v = meta["machine"], meta["versions"]
    L: list[str] = [
        "# pylog against its peers: Kafka's benchmark on one machine",
        "",
        f"Generated by `{meta['command']}` on {meta['date']} ({meta['mode']} run, {meta['seconds'] / 60:.1f} "
        "minutes). Every figure and every ratio below comes from this one run: the peers ran side by side, "
        "round after round, on the same machine, payloads and batch sizes. The workloads are those of Kafka's "
        "benchmark as told in seed 001, adapted to an embedded library on one machine (processes instead of "
        "machines, streams instead of partitions).",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu'] or 'unknown'}, {m['cores']} cores; memory {m['memory_bytes'] / (1 << 30):.0f} GiB; "
        f"Linux {m['kernel']}",
        f"- Python {m['python']}; " + "; ".join(f"{k} {val}" for k, val in v.items()),
        f"- Load average (1 min) {meta['load_before'][0]:.2f} at the start, "
        f"{meta.get('load_after', meta['load_before'])[0]:.2f} at the end: this VM is shared with other jobs, "
        "so rounds vary; ranges show by how much.",
        "",
        "## How each peer is used",
        "",
        "Same payloads (one value of the workload's size, no key), same batches (1,000 records, or 1 MiB for "
        "large values), reads of up to 500 records, and the same durability: **nothing is fsynced**; every peer "
        "leaves its writes in the page cache, as pylog does by default (a process crash loses nothing, a power "
        "loss may). Each process opens its own handles before the clock starts. A round passes only if every "
        "consumer reads back exactly the records and bytes that were written.",
        "",
    ]
    L += [f"- **{name}**: {how}" for name, how in meta["peers"].items()]
    if meta["skipped"]:
        L += ["", "Skipped in this run:", ""]
        L += [f"- **{name}**: {why}" for name, why in meta["skipped"].items()]
    L += ["", "Ratios: *pylog ÷ peer* for throughput and *peer ÷ pylog* for latency, medians of this run; above "
          "1 favours pylog. Figures are medians of the rounds with the range in brackets. MB = 10^6 bytes of "
          "payload.", ""]

    L += ["## Throughput (seed 001's workloads)", "",
          f"Up to {plan['records']:,} records of {plan['value_size']} bytes per producer process and round, "
          f"or {plan['cap']:g} s, whichever comes first (a capped round's rate covers what it did in the time).",
          "", f"![throughput]({PLOTS['throughput']})", ""]
    for wid, (title, desc) in THROUGHPUT.items():
        L += [f"### {title}", "", desc, ""] + _throughput_table(tp[wid], peers) + [""]

    L += ["## Throughput against message size", "",
          f"One producer process; values of {', '.join(f'{s:,}' for s in plan['message_sizes'])} bytes; "
          f"{plan['size_bytes'] / (1 << 20):.0f} MiB of payload per round (at most {plan['records']:,} records) "
          f"or {plan['size_cap']:g} s. `*`: a round ran out of time.", "",
          f"![records/s against message size]({PLOTS['size_records']})",
          f"![MB/s against message size]({PLOTS['size_mb']})", ""]
    L += _sizes_tables(sizes, peers, list(plan["message_sizes"])) + [""]

    L += ["## Throughput against data stored", "",
          f"One producer process appends {plan['stored_value']:,}-byte values in batches of {plan['batch']:,} up "
          f"to {plan['stored_bytes'] / (1 << 30):g} GiB of payload ({plan['redis_stored_bytes'] / (1 << 30):g} "
          f"GiB for Redis, which holds all of it in memory) or {plan['stored_cap']:g} s; one point per "
          f"{plan['stored_chunk'] >> 20} MiB. Footprint: the bytes the peer's files take on disk (allocated "
          "blocks), plus the server's memory for Redis.", "", f"![throughput against data stored]({PLOTS['stored']})",
          ""]
    L += _stored_table(stored, peers) + [""]

    L += ["## End-to-end latency", "",
          f"A producer process appends one {plan['value_size']}-byte record every "
          f"{plan['latency_interval'] * 1000:g} ms (a batch of one), stamped with CLOCK_MONOTONIC; a consumer "
          "process tails the stream and takes the difference when it reads the record. "
          f"{plan['latency_records']:,} records per round. Consumer CPU: the consumer process's CPU time while "
          f"the records arrive, as a share of one core; idle: the same over the next {plan['idle_seconds']:g} s, "
          "when nothing arrives. Together: what its way of waiting costs.", "",
          f"![latency]({PLOTS['latency']})", ""]
    L += _latency_table(lat, peers) + [""]

    L += ["## What bounds these figures", ""] + _bounds(meta, results, peers) + [""]
    path = os.path.join(out, "REPORT.md")
    with open(path, "w") as f:
        f.write("\n".join(L))
    written.append(path)
    return written
