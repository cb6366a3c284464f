#!/usr/bin/env python3
"""bench/flash_report.py RAW: the report of one bench/flash-compare.sh run.

Reads RAW/fio/*.json, RAW/tier/bench.txt, RAW/get/*.json and RAW/put/*.json
and prints a markdown report: flash reads through gpucached against fio's
sequential O_DIRECT read (target 0.9x), the publish cost (target under 10%),
and PUT with the flash tier against without it (target: at most 5% slower,
and the writer keeps up).
"""
import glob
import json
import os
import re
import statistics
import sys


def fio_gbs(path):
    with open(path) as f:
        d = json.load(f)
    return d["jobs"][0]["read"]["bw_bytes"] / 1e9


NS = {}  # benchmark name -> ns/op, filled by bench_gbs


def bench_gbs(path):
    """Go benchmark lines -> {name: [GB/s...]}"""
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        m = re.match(r"(Benchmark\S+?)-\d+\s+\d+\s+([\d.]+) ns/op\s+([\d.]+) MB/s", line)
        if m:
            out.setdefault(m.group(1), []).append(float(m.group(3)) / 1000)
            NS.setdefault(m.group(1), []).append(float(m.group(2)))
    return out


def main(raw):
    print(f"# Flash tier against fio ({os.path.basename(raw)})\n")
    mach = open(os.path.join(raw, "machine.txt")).read().strip().splitlines()
    print("Machine: " + "; ".join(l.replace("\t", ": ") for l in mach) + "\n")
    tier = bench_gbs(os.path.join(raw, "tier", "bench.txt"))
    print("## Reads: gpucached GET from flash, and the tier alone, against fio (GB/s, CPU machine)\n")
    print("| block | conns/jobs | fio seq read O_DIRECT | gpucached GET | of which from flash | GET ÷ fio | target 0.9× | tier read (1 reader, median) | tier ÷ fio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size, bs in (("1MiB", "1M"), ("32MiB", "32M")):
        gj = os.path.join(raw, "get", f"get-{size}.json")
        get = json.load(open(gj)) if os.path.exists(gj) else {"cases": [], "server_stat": {}}
        st = get.get("server_stat", {})
        share = st.get("flash_hits", 0) / max(st.get("blocks_hit", 0), 1)
        for conns in (1, 8):
            f = fio_gbs(os.path.join(raw, "fio", f"read-{bs}-{conns}.json"))
            g = next((c["gb_per_sec"] for c in get["cases"] if c["conns"] == conns), None)
            t = tier.get(f"BenchmarkFlashRead/auto/{size}")
            tcell = f"{statistics.median(t):.2f}" if (t and conns == 1) else ""
            tratio = f"{statistics.median(t) / f:.2f}×" if (t and conns == 1) else ""
            if g is None:
                print(f"| {size} | {conns} | {f:.2f} | NOT_RUN | | | | {tcell} | {tratio} |")
                continue
            verdict = "PASS" if g / f >= 0.9 else "MISS"
            print(f"| {size} | {conns} | {f:.2f} | {g:.2f} | {share:.0%} (whole file) | {g / f:.2f}× | {verdict} | {tcell} | {tratio} |")
    print("\nThe GET rows move each block over loopback TCP too (a DRAM hit among them is not a flash read: see the share); the tier rows are the read alone.\n")
    print("## Publishing a flash hit into DRAM (one reader; medians)\n")
    print("| block | flash read into an aligned buffer | publish alone: reserve the slot, publish, pin, release | publish ÷ read (time) | target < 10% | read into the slot and publish (same run, for reference) |")
    print("|---|---|---|---|---|---|")
    for size in ("1MiB", "32MiB"):
        r = tier.get(f"BenchmarkFlashRead/auto/{size}")
        p = tier.get(f"BenchmarkFlashPublish/{size}")
        rp = tier.get(f"BenchmarkFlashRefillPublish/auto/{size}")
        if not r or not p:
            print(f"| {size} | NOT_RUN | | | | |")
            continue
        rns = statistics.median(NS[f"BenchmarkFlashRead/auto/{size}"])
        pns = statistics.median(NS[f"BenchmarkFlashPublish/{size}"])
        extra = pns / rns
        rpc = f"{statistics.median(rp):.2f} GB/s" if rp else ""
        print(f"| {size} | {statistics.median(r):.2f} GB/s ({rns / 1000:.0f} µs) | {pns:.0f} ns | {extra:.3%} | {'PASS' if extra < 0.10 else 'MISS'} | {rpc} |")
    print("\nThe disk of this shared VM changes speed from one second to the next, so two reads (with and without the publish) differ by more than the publish costs; the publish is therefore timed alone.\n")
    print("\n## PUT 1 MiB at 8 connections: the flash tier behind DRAM, against none\n")
    wpath = os.path.join(raw, "fio", "write-1M-1.json")
    if os.path.exists(wpath):
        with open(wpath) as f:
            w = json.load(f)["jobs"][0]["write"]["bw_bytes"] / 1e9
        print(f"The disk's own write rate in this run (fio, 1 MiB, O_DIRECT, 1 job): {w:.2f} GB/s.\n")
    runs = {}
    declined, written = {}, {}
    for p in sorted(glob.glob(os.path.join(raw, "put", "put-*.json"))):
        mode = os.path.basename(p).split("-")[1]
        d = json.load(open(p))
        runs.setdefault(mode, []).extend(c["gb_per_sec"] for c in d["cases"])
        declined[mode] = declined.get(mode, 0) + d["server_stat"].get("flash_declined_full", 0)
        written[mode] = written.get(mode, 0) + d["server_stat"].get("flash_blocks_written", 0)
    label = {"none": "nothing (cold tier off)", "flash": "flash (cold tier off)", "cold": "the fs cold tier (the default)", "coldflash": "flash, then the fs cold tier (write-through)"}
    if not runs:
        print("NOT_RUN")
        return
    print("| behind DRAM | GB/s per rep | median | blocks written to flash | evictions flash could not take (flash_declined_full) |")
    print("|---|---|---|---|---|")
    med = {m: statistics.median(v) for m, v in runs.items()}
    for m in ("none", "flash", "cold", "coldflash"):
        if m in runs:
            print(f"| {label[m]} | {', '.join(f'{x:.2f}' for x in runs[m])} | {med[m]:.2f} | {written.get(m, 0)} | {declined.get(m, 0)} |")
    for with_, without in (("flash", "none"), ("coldflash", "cold")):
        if with_ in med and without in med:
            r = med[with_] / med[without]
            print(f"\n{label[with_]} ÷ {label[without]}: {r:.2f}× (target: at least 0.95×: {'PASS' if r >= 0.95 else 'MISS'}); "
                  f"the writer {'kept up' if declined.get(with_, 0) == 0 else 'did not keep up'} ({declined.get(with_, 0)} evictions past a full write buffer, which went to the next tier or were dropped).")

if __name__ == "__main__":
    main(sys.argv[1])
