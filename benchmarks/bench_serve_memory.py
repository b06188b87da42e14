"""Peak resident memory per scheduled sample of one LoadGen run through vitbench's SUT (docs/serving.md,
"Memory"; measure/loadgen.py BYTES_PER_SCHEDULED_SAMPLE).

    python benchmarks/bench_serve_memory.py Offline 1000000 2000000 4000000
    python benchmarks/bench_serve_memory.py Server 500000 1000000

Each count runs in a fresh process: LoadGen (its real library) at target_qps = count / 1.1 for 1 s, so that it
generates `count` samples (SCHEDULE_SLACK x rate x duration), against `measure.loadgen.run` with a step that
answers at once: in Offline it holds the first batch until LoadGen's issue call has returned (as a real model
does, far slower than issuing), in Server the SUT falls behind LoadGen's issuing by itself (every query waits in
its queue, a saturated server). Printed: VmRSS before the run, VmHWM after it (/proc/self/status) and their
difference per sample; then the least-squares slope over the counts, which leaves out what does not grow with
them. Add --tracemalloc for the Python allocations' peak per sample (slower; RSS figures then include its own).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def one(scenario: str, n: int, trace: bool) -> dict:
    import numpy as np

    from vitbench.measure import loadgen

    issued = threading.Event()
    issue = loadgen.BatchingSUT.issue

    def issue_then_say(self, samples):
        issue(self, samples)
        issued.set()

    loadgen.BatchingSUT.issue = issue_then_say

    def step(batch):
        if scenario == "Offline":
            issued.wait()
        return np.zeros((len(batch), 10), np.float32)

    settings = loadgen.Settings(scenario, target_qps=n / loadgen.SCHEDULE_SLACK, latency_bound_ms=15.0,
                                percentile=90.0, min_duration_s=1.0, min_query_count=1, samples_per_query=8,
                                expected_latency_ms=None)
    loadgen.check_schedule_fits = lambda s: None  # measured, not estimated
    if trace:
        import tracemalloc

        tracemalloc.start()
    base = _status_kib("VmRSS")
    with ThreadPoolExecutor(1) as worker:
        served = loadgen.run(np.zeros((64, 4, 4, 3), np.float32), {s: step for s in (1, 2, 4, 8)}, settings, 8,
                             0.0, True, worker)
    peak = _status_kib("VmHWM")
    out = {"scenario": scenario, "samples": n, "rss_before_mib": base / 1024, "peak_mib": peak / 1024,
           "bytes_per_sample": (peak - base) * 1024 / n, "samples_run": sum(served.batches)}
    if trace:
        out["python_peak_bytes_per_sample"] = tracemalloc.get_traced_memory()[1] / n
    return out


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--one":
        print(json.dumps(one(argv[1], int(argv[2]), argv[3:] == ["--tracemalloc"])))
        return
    trace = "--tracemalloc" in argv
    scenario, *counts = [a for a in argv if a != "--tracemalloc"]
    rows = []
    for n in counts:
        cmd = [sys.executable, __file__, "--one", scenario, n] + (["--tracemalloc"] if trace else [])
        rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        print(json.dumps(rows[-1]))
    if len(rows) > 1:
        xs = [r["samples"] for r in rows]
        ys = [r["peak_mib"] * 2**20 for r in rows]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        print(f"{scenario}: {slope:.1f} bytes a sample (least squares over {', '.join(counts)})")


if __name__ == "__main__":
    main(sys.argv[1:])
