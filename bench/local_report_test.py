"""Tests of bench/local_report.py on a made-up run: python3 bench/local_report_test.py"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import local_report  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def bench_json(started, sizes, cases, region_out=0, region_in=0):
    return json.dumps({"started": started, "params": {"sizes": sizes}, "cases": cases,
                       "server_stat": {"region_bytes_out": region_out, "region_bytes_in": region_in}})


def case(op, size, conns, gbs, p50_us, p99_us, **bad):
    c = {"op": op, "size": size, "conns": conns, "gb_per_sec": gbs, "p50_ns": p50_us * 1000, "p99_ns": p99_us * 1000}
    c.update(bad)
    return c


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(self.dir))
        d = self.dir
        write(os.path.join(d, "plan.txt"), "reps\t2\nsizes\t64KiB,1MiB,32MiB\nconns\t1,8\npages\t128\nworking_set_bytes\t268435456\n")
        hdr = "op\tsize\tthreads\tseconds\tcopies\tGB/s\tp50_us\tp99_us\n"
        for rep, g in ((1, 10.0), (2, 12.0)):
            rows = "".join("memcpy\t%d\t%d\t3\t1\t%.1f\t5\t9\n" % (s, t, g * t) for s in (64 * KIB, 256 * KIB, MIB, 32 * MIB) for t in (1, 2))
            write(os.path.join(d, "limits", "memcpy_r%d.tsv" % rep), hdr + rows)
        write(os.path.join(d, "limits", "cma_r1.tsv"), hdr + "process_vm_readv\t%d\t1\t3\t1\t4.0\t20\t40\n" % MIB)
        # region: 1 MiB GET 1 conn at 8 (0.8x / 0.67x of 10 / 12): median 8 / 11 = 0.727 -> PASS
        g = os.path.join(d, "gpucache")
        write(os.path.join(g, "tcp_1MiB_r1.json"), bench_json("2026-01-01T00:00:01Z", [MIB], [
            case("put", MIB, 1, 1.0, 400, 900), case("put", MIB, 8, 1.0, 400, 900)], region_out=5))
        write(os.path.join(g, "region_1MiB_r1.json"), bench_json("2026-01-01T00:00:02Z", [MIB], [
            case("get", MIB, 1, 8.0, 100, 200), case("put", MIB, 1, 2.5, 90, 150), case("put", MIB, 8, 1.5, 90, 150)], region_out=1005))
        write(os.path.join(g, "region_1MiB_r2.json"), bench_json("2026-01-01T00:00:03Z", [MIB], [
            case("get", MIB, 1, 8.0, 100, 200, misses=3)], region_out=1005))
        write(os.path.join(g, "region_64KiB_r1.json"), bench_json("2026-01-01T00:00:04Z", [64 * KIB], [
            case("get", 64 * KIB, 8, 3.0, 150, 400), case("put", 64 * KIB, 8, 1.0, 150, 400)], region_out=2005))
        r = os.path.join(d, "redis")
        head = '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"\n'
        write(os.path.join(r, "get_64KiB_c8_r1.csv"), head + '"GET","20000","0.4","0.02","0.2","0.4","0.5","3"\n')  # 1.31 GB/s
        write(os.path.join(r, "put_64KiB_c8_r1.csv"), head + '"SET","20000","0.4","0.02","0.2","0.4","0.5","3"\n')
        write(os.path.join(d, "python", "region_r1.json"), json.dumps({
            "gb_per_s": 4.0, "p50_ms": 8.0, "p99_ms": 9.0, "region_note": "registered", "region_stats": {"get_into": 256}}))
        write(os.path.join(d, "python", "unix_r1.json"), json.dumps({
            "gb_per_s": 2.0, "p50_ms": 16.0, "p99_ms": 19.0, "region_note": "socket", "region_stats": {}}))
        self.run_ = local_report.Run(d)

    def target(self, prefix):
        for t in self.run_.targets():
            if t[0].startswith(prefix):
                return t
        self.fail("no target %r" % prefix)

    def test_targets(self):
        name, _a, _b, want, r, per, ok, _ = self.target("1 MiB GET, 1 conn")
        self.assertAlmostEqual(r, 8.0 / 11.0)
        self.assertEqual([round(x, 3) for x in per], [0.8, round(8 / 12, 3)])
        self.assertTrue(ok)
        _, _, _, _, r, _, ok, detail = self.target("64 KiB GET, 8 conns")
        self.assertAlmostEqual(r, 3.0 / (20000 * 64 * KIB / 1e9))
        self.assertTrue(ok, detail)  # 2.29x, p99 400 us <= 500 us
        _, _, _, _, r, _, ok, _ = self.target("1 MiB PUT, 8 conns")
        self.assertAlmostEqual(r, 1.5)
        self.assertFalse(ok)
        _, _, _, _, r, _, ok, _ = self.target("64 KiB PUT, 8 conns")
        self.assertLess(r, 1.0)
        self.assertFalse(ok)
        _, _, _, _, r, _, ok, _ = self.target("32 MiB GET")
        self.assertIsNone(r)
        self.assertIsNone(ok)
        _, _, _, _, r, _, ok, _ = self.target("Python")
        self.assertAlmostEqual(r, 4.0 / 11.0)
        self.assertFalse(ok)

    def test_report(self):
        out = []
        self.run_.write(out.append)
        text = "".join(out)
        self.assertIn("| 1 MiB GET, 1 conn, region ≥ 0.7× memcpy (1 thread) | 8.000 vs 11.000 GB/s | 0.73× | 0.80, 0.67 | PASS |", text)
        self.assertIn("**MISS**", text)
        self.assertIn("NOT_RUN", text)
        self.assertIn("region get 1 MiB conns=1 rep 2: misses 3", text)
        # Region bytes per region run: the growth since the run before it.
        self.assertIn("1 MiB: rep 1 0.00 GB, rep 2 0.00 GB", text)
        self.assertIn("region_1MiB_r2.json: no byte went through a registered region", text)
        self.run_.write_csv(os.path.join(self.dir, "summary.csv"))
        with open(os.path.join(self.dir, "summary.csv")) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], "row,op,size,conns_or_threads,reps,gb_per_s,p50_us,p99_us,gb_per_s_min,gb_per_s_max")
        self.assertIn("region,get,1048576,1,2,8.0000,100.0,200.0,8.0000,8.0000", lines)
        self.assertIn("python_region,batch_get_v1,262144,1,1,4.0000,8000.0,9000.0,4.0000,4.0000", lines)
        self.run_.write_reps_csv(os.path.join(self.dir, "reps.csv"))
        with open(os.path.join(self.dir, "reps.csv")) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], "row,op,size,conns_or_threads,rep,gb_per_s,p50_us,p99_us")
        self.assertIn("memcpy,copy,1048576,2,2,24.0000,5.0,9.0", lines)
        self.assertIn("region,get,1048576,1,2,8.0000,100.0,200.0", lines)


if __name__ == "__main__":
    unittest.main()
