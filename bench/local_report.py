"""bench/local_report.py RAW_DIR: the markdown report of a
bench/local-compare.sh run (standard library only).

Reads RAW_DIR/limits/{memcpy,cma}_rN.tsv, gpucache/{tcp,unix,region}_SIZE_rN.json,
redis/{get,put}_SIZE_cC_rN.csv and python/{tcp,unix,region}_rN.json; writes
the report to stdout, the medians to RAW_DIR/summary.csv and every
repetition to RAW_DIR/reps.csv. Every figure is
the median over the repetitions of that row; a ratio is the ratio of two
medians, and "per rep" lists the ratios of the same repetition's figures.
Tests: python3 bench/local_report_test.py.
"""

import csv
import json
import os
import re
import statistics
import sys

NOT_RUN = "NOT_RUN"
TRANSPORTS = ("tcp", "unix", "region")
LABEL = {"tcp": "gpucache TCP", "unix": "gpucache Unix socket", "region": "gpucache region",
         "redis": "Redis 7 Unix socket", "memcpy": "memcpy", "cma": "process_vm_readv"}
PY_LABEL = {"tcp": "TCP, private memory (socket path)", "unix": "Unix socket, private memory (socket path)",
            "region": "Unix socket, pool in gpucache.shm memory (registered region)"}


def parse_size(s):
    m = re.fullmatch(r"(\d+)(GiB|MiB|KiB)?", s)
    if not m:
        raise ValueError("bad size %r" % s)
    return int(m.group(1)) << {"GiB": 30, "MiB": 20, "KiB": 10, None: 0}[m.group(2)]


def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def fmt_us(us):
    if us is None:
        return NOT_RUN
    if us < 1000:
        return "%.0f µs" % us if us >= 10 else "%.1f µs" % us
    if us < 1e6:
        return "%.2f ms" % (us / 1e3)
    return "%.2f s" % (us / 1e6)


def fmt_gbs(v):
    return NOT_RUN if v is None else "%.3f" % v


class Series:
    """One row's repetitions: (rep, GB/s, p50 µs, p99 µs)."""

    def __init__(self):
        self.reps = {}

    def add(self, rep, gbs, p50, p99):
        self.reps[rep] = (gbs, p50, p99)

    def med(self, i):
        xs = [v[i] for v in self.reps.values() if v[i] is not None]
        return statistics.median(xs) if xs else None

    @property
    def gbs(self):
        return self.med(0)

    @property
    def p50(self):
        return self.med(1)

    @property
    def p99(self):
        return self.med(2)

    def cell(self):
        if not self.reps:
            return NOT_RUN
        return "%s (%s / %s)" % (fmt_gbs(self.gbs), fmt_us(self.p50), fmt_us(self.p99))


class Run:
    def __init__(self, raw):
        self.raw = raw
        self.rows = {}  # key -> Series
        self.checks = []  # problems found in the raw files
        self.region_bytes = {}  # size -> [(rep, bytes the region run moved through regions)]
        self.py_info = {}  # name -> last JSON
        self.plan = self._kv("plan.txt")
        self.machine = self._kv("machine.txt")
        self.notes = self._lines("notes.txt")
        self._load_limits()
        self._load_gpucache()
        self._load_redis()
        self._load_python()

    def _path(self, *p):
        return os.path.join(self.raw, *p)

    def _kv(self, name):
        out = {}
        try:
            with open(self._path(name)) as f:
                for line in f:
                    k, _, v = line.rstrip("\n").partition("\t")
                    if k:
                        out[k] = v
        except OSError:
            pass
        return out

    def _lines(self, name):
        try:
            with open(self._path(name)) as f:
                return [ln.rstrip("\n") for ln in f if ln.strip()]
        except OSError:
            return []

    def series(self, *key):
        return self.rows.setdefault(key, Series())

    def get(self, *key):
        return self.rows.get(key, Series())

    def _files(self, sub, pattern):
        d = self._path(sub)
        if not os.path.isdir(d):
            return []
        out = []
        for name in sorted(os.listdir(d)):
            m = re.fullmatch(pattern, name)
            if m:
                out.append((os.path.join(d, name), m))
        return out

    def _load_limits(self):
        for path, m in self._files("limits", r"(memcpy|cma)_r(\d+)\.tsv"):
            rep = int(m.group(2))
            with open(path) as f:
                for row in csv.DictReader(f, delimiter="\t"):
                    try:
                        kind = "memcpy" if row["op"] == "memcpy" else "cma"
                        self.series(kind, int(row["size"]), int(row["threads"])).add(
                            rep, float(row["GB/s"]), float(row["p50_us"]), float(row["p99_us"]))
                    except (KeyError, TypeError, ValueError):
                        self.checks.append("%s: unreadable row %r" % (os.path.basename(path), row))

    def _load_gpucache(self):
        runs = []
        for path, m in self._files("gpucache", r"(tcp|unix|region)_(\w+?)_r(\d+)\.json"):
            with open(path) as f:
                runs.append((json.load(f), m.group(1), int(m.group(3)), os.path.basename(path)))
        # In run order: the server's region counters are cumulative, so a
        # region run's share is its snapshot minus the previous run's.
        runs.sort(key=lambda x: x[0].get("started", ""))
        before = 0
        for d, tr, rep, name in runs:
            for c in d.get("cases", []):
                op, size, conns = c["op"], int(c["size"]), int(c["conns"])
                self.series(tr, op, size, conns).add(rep, c["gb_per_sec"], c["p50_ns"] / 1e3, c["p99_ns"] / 1e3)
                bad = {k: c.get(k, 0) for k in ("errors", "misses", "corrupt") if c.get(k, 0)}
                if bad:
                    self.checks.append("%s %s %s conns=%d rep %d: %s%s" % (
                        tr, op, size_label(size), conns, rep, ", ".join("%s %d" % kv for kv in bad.items()),
                        " (first error: %s)" % c["first_error"] if c.get("first_error") else ""))
            for n in d.get("notes") or []:
                self.checks.append("%s: %s" % (name, n))
            st = d.get("server_stat") or {}
            moved = st.get("region_bytes_out", 0) + st.get("region_bytes_in", 0)
            if tr == "region":
                size = (d.get("params", {}).get("sizes") or [0])[0]
                self.region_bytes.setdefault(size, []).append((rep, moved - before))
                if moved - before <= 0:
                    self.checks.append("%s: no byte went through a registered region" % name)
            before = moved

    def _load_redis(self):
        for path, m in self._files("redis", r"(get|put)_(\w+?)_c(\d+)_r(\d+)\.csv"):
            op, size, conns, rep = m.group(1), parse_size(m.group(2)), int(m.group(3)), int(m.group(4))
            with open(path) as f:
                rows = list(csv.DictReader(f))
            if not rows:
                self.checks.append("%s: no data row" % os.path.basename(path))
                continue
            r = rows[0]
            try:
                self.series("redis", op, size, conns).add(
                    rep, float(r["rps"]) * size / 1e9, float(r["p50_latency_ms"]) * 1e3, float(r["p99_latency_ms"]) * 1e3)
            except (KeyError, ValueError):
                self.checks.append("%s: unreadable row %r" % (os.path.basename(path), r))

    def _load_python(self):
        for path, m in self._files("python", r"(tcp|unix|region)_r(\d+)\.json"):
            name, rep = m.group(1), int(m.group(2))
            with open(path) as f:
                d = json.load(f)
            self.series("python", name).add(rep, d["gb_per_s"], d["p50_ms"] * 1e3, d["p99_ms"] * 1e3)
            self.py_info[name] = d
            rs = d.get("region_stats") or {}
            if name == "region" and not rs.get("get_into"):
                self.checks.append("python region rep %d: no block went through the region (%s)" % (rep, d.get("region_note")))
            if name != "region" and rs.get("get_into"):
                self.checks.append("python %s rep %d: blocks went through a region" % (name, rep))

    # ---- the report ----

    def sizes(self):
        s = self.plan.get("sizes", "64KiB,1MiB,32MiB")
        return [parse_size(x) for x in s.split(",") if x]

    def conns(self):
        return [int(x) for x in self.plan.get("conns", "1,8").split(",") if x]

    @staticmethod
    def limit_threads(conns):
        """memcpy threads that bound conns connections on this 2-CPU host."""
        return 1 if conns == 1 else 2

    def ratio(self, a, b, i=0):
        """(median ratio, per-rep ratios) of series a over series b, field i."""
        x, y = a.med(i), b.med(i)
        if x is None or y is None or y == 0:
            return None, []
        per = []
        for rep in sorted(set(a.reps) & set(b.reps)):
            u, v = a.reps[rep][i], b.reps[rep][i]
            if u is not None and v:
                per.append(u / v)
        return x / y, per

    def targets(self):
        mib, kib = 1 << 20, 1 << 10
        page = 256 * kib
        out = []

        def add(name, a, b, want, extra=None):
            r, per = self.ratio(a, b)
            ok = None if r is None else r >= want
            detail = ""
            if extra is not None and r is not None:
                ok2, detail = extra()
                ok = ok and ok2
            out.append((name, a, b, want, r, per, ok, detail))

        add("1 MiB GET, 1 conn, region ≥ 0.7× memcpy (1 thread)",
            self.get("region", "get", mib, 1), self.get("memcpy", mib, 1), 0.7)
        add("32 MiB GET, 8 conns, region ≥ 0.8× memcpy (2 threads)",
            self.get("region", "get", 32 * mib, 8), self.get("memcpy", 32 * mib, 2), 0.8)
        reg, red = self.get("region", "get", 64 * kib, 8), self.get("redis", "get", 64 * kib, 8)

        def p99_no_worse():
            a, b = reg.p99, red.p99
            if a is None or b is None:
                return False, "p99 NOT_RUN"
            return a <= b, "p99 %s vs Redis %s (%.2f×)" % (fmt_us(a), fmt_us(b), a / b)
        add("64 KiB GET, 8 conns, region ≥ 2× Redis (Unix socket), p99 no worse", reg, red, 2.0, p99_no_worse)
        for c in self.conns():
            add("1 MiB PUT, %d conn%s, region ≥ 2× gpucache TCP PUT" % (c, "" if c == 1 else "s"),
                self.get("region", "put", mib, c), self.get("tcp", "put", mib, c), 2.0)
        add("64 KiB PUT, 8 conns, region ≥ 1× Redis SET (Unix socket)",
            self.get("region", "put", 64 * kib, 8), self.get("redis", "put", 64 * kib, 8), 1.0)
        add("Python batch_get_v1 (%s pages of 256 KiB) into torch, region ≥ 0.6× memcpy (1 thread, 256 KiB)" % self.plan.get("pages", "128"),
            self.get("python", "region"), self.get("memcpy", page, 1), 0.6)
        return out

    def write(self, w):
        m, p = self.machine, self.plan
        w("# bench/local-compare.sh: co-located GET and PUT (CPU only)\n\n")
        w("Run %s: %s, %s CPUs, %s, %s, load at start %s, at end %s; %s; %s; fuzzers at start: %s, at end: %s.\n\n" % (
            os.path.basename(os.path.normpath(self.raw)), m.get("date_utc", "?"), m.get("nproc", "?"), m.get("cpu_model", "?"),
            m.get("kernel", "?"), m.get("loadavg_at_start", "?"), m.get("loadavg_at_end", "?"), m.get("go", "?"),
            m.get("redis", "?"), m.get("fuzzers_at_start", "?"), m.get("fuzzers_at_end", "?")))
        w("Revision %s; Python %s, torch %s, client from %s. Medians of %s repetitions (interleaved) of %s s per case "
          "(gpucache: after a %s s warm-up; memcpy and cma: %s s); working set %s per size; gpucache-bench GOMAXPROCS %s; "
          "redis-benchmark one thread. No GPU: every figure is CPU only.\n\n" % (
              m.get("gpucache_rev", "?"), m.get("python", "?"), m.get("torch", "?"), m.get("py_path", "?"),
              p.get("reps", "?"), p.get("duration_s", "?"), p.get("warmup_s", "?"), p.get("limit_duration_s", "?"),
              size_label(int(p.get("working_set_bytes", "0") or 0)), m.get("gpucache_client_gomaxprocs", "?")))

        w("## Targets (issue 27)\n\n")
        w("| target | measured | ratio | per rep | result |\n|---|---|---:|---|---|\n")
        for name, a, b, want, r, per, ok, detail in self.targets():
            meas = "%s vs %s GB/s" % (fmt_gbs(a.gbs), fmt_gbs(b.gbs))
            if detail:
                meas += "; " + detail
            res = NOT_RUN if ok is None else ("PASS" if ok else "**MISS**")
            w("| %s | %s | %s | %s | %s |\n" % (name, meas, NOT_RUN if r is None else "%.2f×" % r,
                                                ", ".join("%.2f" % x for x in per) or "-", res))

        w("\n## GET and PUT: GB/s (p50 / p99 per request)\n\n")
        w("The limit is memcpy of the same block size out of the same working set, 1 thread for 1 connection, "
          "2 threads for 8 (this host has 2 CPUs). Redis's PUT is SET; its latencies are redis-benchmark's.\n\n")
        w("| op | size | conns | limit: memcpy | gpucache TCP | gpucache Unix socket | gpucache region | Redis 7 Unix socket | region / limit | region / Redis |\n")
        w("|---|---:|---:|---|---|---|---|---|---:|---:|\n")
        for op in ("get", "put"):
            for size in self.sizes():
                for c in self.conns():
                    lim = self.get("memcpy", size, self.limit_threads(c))
                    reg = self.get("region", op, size, c)
                    red = self.get("redis", op, size, c)
                    r1, _ = self.ratio(reg, lim)
                    r2, _ = self.ratio(reg, red)
                    w("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n" % (
                        op.upper() if op == "get" else "PUT", size_label(size), c,
                        "%s (%d thr)" % (lim.cell(), self.limit_threads(c)),
                        self.get("tcp", op, size, c).cell(), self.get("unix", op, size, c).cell(), reg.cell(), red.cell(),
                        "-" if r1 is None else "%.2f×" % r1, "-" if r2 is None else "%.2f×" % r2))

        w("\n## The limits: memcpy and cross-memory attach (GB/s, p50 / p99 per copy)\n\n")
        w("`gpucache-bench memcpy` copies one block per call out of the working set into one buffer per thread; "
          "`gpucache-bench cma` reads each block out of a child process's working set with process_vm_readv "
          "(issue 27 item 4's measurement).\n\n")
        w("| size | memcpy 1 thread | memcpy 2 threads | process_vm_readv 1 thread | process_vm_readv 2 threads | cma / memcpy (1 thread) |\n")
        w("|---:|---|---|---|---|---:|\n")
        lsizes = sorted({k[1] for k in self.rows if k[0] in ("memcpy", "cma")})
        for size in lsizes:
            r, _ = self.ratio(self.get("cma", size, 1), self.get("memcpy", size, 1))
            w("| %s | %s | %s | %s | %s | %s |\n" % (
                size_label(size), self.get("memcpy", size, 1).cell(), self.get("memcpy", size, 2).cell(),
                self.get("cma", size, 1).cell(), self.get("cma", size, 2).cell(), "-" if r is None else "%.2f×" % r))

        w("\n## Python: the SGLang backend's batch_get_v1 into a torch CPU tensor\n\n")
        w("%s pages of 256 KiB (K and V 128 KiB each) per call, one call at a time; GB/s over the calls' summed time, "
          "p50 / p99 per call. The limit: memcpy 1 thread at 256 KiB, %s.\n\n" % (
              p.get("pages", "128"), self.get("memcpy", 256 << 10, 1).cell()))
        w("| path | GB/s (p50 / p99 per call) | / memcpy |\n|---|---|---:|\n")
        for name in TRANSPORTS:
            s = self.get("python", name)
            r, _ = self.ratio(s, self.get("memcpy", 256 << 10, 1))
            w("| %s | %s | %s |\n" % (PY_LABEL[name], s.cell(), "-" if r is None else "%.2f×" % r))
        for name in TRANSPORTS:
            d = self.py_info.get(name)
            if d:
                w("\n- %s: %s; region stats %s" % (name, d.get("region_note", ""), json.dumps(d.get("region_stats") or {}, sort_keys=True)))
        w("\n\n## Checks\n\n")
        moved = {s: xs for s, xs in self.region_bytes.items()}
        if moved:
            w("Bytes gpucached copied through registered regions in each region run (the growth of its STAT "
              "`region_bytes_out` + `region_bytes_in`): %s.\n\n" % "; ".join(
                  "%s: %s" % (size_label(s), ", ".join("rep %d %.2f GB" % (r, b / 1e9) for r, b in xs)) for s, xs in sorted(moved.items())))
        if self.checks:
            for c in self.checks:
                w("- %s\n" % c)
        else:
            w("No errors, misses or corrupt replies in any gpucache case.\n")
        if self.notes:
            w("\nNotes from the run:\n\n")
            for n in self.notes:
                w("- %s\n" % n)

    def reps_key(self, key):
        """(row, op, size, conns or threads) of a series key."""
        if key[0] in ("memcpy", "cma"):
            return key[0], "copy", key[1], key[2]
        if key[0] == "python":
            return "python_" + key[1], "batch_get_v1", 256 << 10, 1
        return key

    def write_reps_csv(self, path):
        """Every repetition of every row."""
        with open(path, "w", newline="") as f:
            cw = csv.writer(f)
            cw.writerow(["row", "op", "size", "conns_or_threads", "rep", "gb_per_s", "p50_us", "p99_us"])
            for key in sorted(self.rows, key=lambda k: tuple(str(x) for x in k)):
                for rep, (g, p50, p99) in sorted(self.rows[key].reps.items()):
                    cw.writerow(list(self.reps_key(key)) + [rep, "%.4f" % g, "%.1f" % p50, "%.1f" % p99])

    def write_csv(self, path):
        with open(path, "w", newline="") as f:
            cw = csv.writer(f)
            cw.writerow(["row", "op", "size", "conns_or_threads", "reps", "gb_per_s", "p50_us", "p99_us",
                         "gb_per_s_min", "gb_per_s_max"])
            for key in sorted(self.rows, key=lambda k: tuple(str(x) for x in k)):
                s = self.rows[key]
                row, op, size, n = self.reps_key(key)
                g = [v[0] for v in s.reps.values()]
                cw.writerow([row, op, size, n, len(s.reps), "%.4f" % s.gbs,
                             "%.1f" % s.p50 if s.p50 is not None else "", "%.1f" % s.p99 if s.p99 is not None else "",
                             "%.4f" % min(g), "%.4f" % max(g)])


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: bench/local_report.py RAW_DIR\n")
        return 2
    if not os.path.isdir(argv[1]):
        sys.stderr.write("bench/local_report.py: %s is not a directory\n" % argv[1])
        return 2
    run = Run(argv[1])
    parts = []
    run.write(parts.append)
    sys.stdout.write("".join(parts))
    run.write_csv(os.path.join(argv[1], "summary.csv"))
    run.write_reps_csv(os.path.join(argv[1], "reps.csv"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
