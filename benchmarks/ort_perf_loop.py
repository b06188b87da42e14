"""ONNX Runtime's own timing loop on an ONNX file, made as its perf tool `onnxruntime_perf_test` makes it; imports
onnxruntime and numpy only (and vitbench.turns where VITBENCH_TURNS is set). The pip wheel has no
onnxruntime_perf_test (it is built from ONNX Runtime's source with `--build_perf_test`), so
benchmarks/bench_runtimes.py and benchmarks/bench_runtimes_parity.py run this instead, each in a process of its
own.

What the perf tool does (onnxruntime/test/perftest/: test_configuration.h for the defaults, ort_test_session.cc
for the session and the timed call, performance_runner.cc for the loop), and what this loop does the same way:

- session options: CPU memory arena on, memory pattern on (the tool turns it on in sequential mode), sequential
  execution, graph optimisation level ORT_ENABLE_ALL (its default `-o 99`), `intra_op_num_threads` = `-x`
  (here `--threads`), inter-op threads left alone (the tool sets them only in parallel mode, where a pool of
  them exists), no session config entries (spinning, denormals, GELU approximation: ONNX Runtime's defaults),
  the CPU execution provider;
- one warm-up run (`RunOneIteration<true>()` before the loop; `--warmup`, default 1), then `--runs` runs
  (its repeated-times mode, `-r`), one input made before the loop and fed to every run, outputs allocated by
  ONNX Runtime on each run (no IO binding);
- each run timed alone around `Session::Run` (its `std::chrono::high_resolution_clock`; here perf_counter);
  it reports the mean ("Average inference time cost"), runs over the whole loop's wall time ("Number of
  inferences per second") and, with `-s`, percentiles; this loop prints all the raw times.

One difference, so that both sides run the same numbers: the input is the seeded standard normal draw that
vitbench's runtime backends feed (vitbench.backends.runtime.images: numpy's default_rng(seed), NCHW float32),
written out here; the tool feeds its test data files or, with `-I`, zeros. The free batch axis is set by
`--batch` (the tool's `-f`). The process CPU time of each run is printed beside its wall time: on a CPU that
others share, it leaves out the time this process waited for the CPU. `--import MODULE` (repeatable) loads a
module before onnxruntime, to tell whether what vitbench's process has loaded (torch, vitbench) changes the loop.

With VITBENCH_TURNS set (vitbench.turns; benchmarks/bench_runtimes_parity.py's default schedule), the loop takes
turns on one CPU with vitbench's process: it holds the turn from before the session is made, hands it over once
after the untimed runs and once after every timed run (vitbench's latency loop does the same after each step), so
the two processes' timed runs alternate; a wait for the turn is never inside a time, nor in `runs_per_s`. Then it
imports vitbench.turns too (the client of the protocol, which imports nothing else of vitbench).

    python benchmarks/ort_perf_loop.py MODEL.onnx --batch 8 --resolution 224 --threads 1 --runs 10
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import sys
import time

if __name__ == "__main__":  # --import MODULE: loaded before onnxruntime (does what vitbench loads matter?)
    for i, arg in enumerate(sys.argv[:-1]):
        if arg == "--import":
            importlib.import_module(sys.argv[i + 1])

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402


def session_options(threads: int) -> ort.SessionOptions:
    """The options onnxruntime_perf_test sets for the CPU execution provider with `-x threads -e cpu`."""
    so = ort.SessionOptions()
    so.enable_cpu_mem_arena = True
    so.enable_mem_pattern = True
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if threads > 0:  # 0: ONNX Runtime's own count, as the tool leaves it without -x
        so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return so


def images(batch: int, resolution: int, seed: int) -> np.ndarray:
    """vitbench's runtime input, written out (vitbench.backends.runtime.images; tests/test_runtimes.py holds the
    two equal): seeded standard normal images, NCHW float32."""
    return np.random.default_rng(seed).standard_normal((batch, 3, resolution, resolution), dtype=np.float32)


def _turns():
    """vitbench.turns where VITBENCH_TURNS is set (imported only then), else None."""
    if not os.environ.get("VITBENCH_TURNS"):
        return None
    from vitbench import turns
    return turns


def run(path: str, batch: int, resolution: int, threads: int, warmup: int, runs: int, seed: int) -> dict:
    turns = _turns()
    with turns.held() if turns else contextlib.nullcontext():
        s = ort.InferenceSession(path, session_options(threads), providers=["CPUExecutionProvider"])
        feed = {s.get_inputs()[0].name: images(batch, resolution, seed)}
        outputs = [o.name for o in s.get_outputs()]
        warmup_s = []
        for _ in range(warmup):
            t0 = time.perf_counter()
            s.run(outputs, feed)
            warmup_s.append(time.perf_counter() - t0)
        first_wait_s = turns.between_windows() if turns else 0.0  # the first timed run follows the other's turn
        step_s, cpu_s, waited_s = [], [], 0.0
        loop0 = time.perf_counter()
        for _ in range(runs):
            c0, t0 = time.process_time(), time.perf_counter()
            s.run(outputs, feed)
            step_s.append(time.perf_counter() - t0)
            cpu_s.append(time.process_time() - c0)
            if turns:  # after every timed run, the last too: this process never runs beside the other's window
                waited_s += turns.between_windows()
        loop_s = time.perf_counter() - loop0 - waited_s
    return {"step_s": step_s, "cpu_s": cpu_s, "warmup_s": warmup_s,
            "step_ms_median": statistics.median(step_s) * 1e3, "step_ms_mean": statistics.fmean(step_s) * 1e3,
            "runs_per_s": runs / loop_s, "turn_wait_s": first_wait_s + waited_s, "onnxruntime": ort.__version__,
            "intra_op_threads": threads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the .onnx file")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (the tool's -x; 0: ONNX Runtime's)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs first (the tool: 1)")
    ap.add_argument("--runs", type=int, default=10, help="timed runs (the tool's -r)")
    ap.add_argument("--seed", type=int, default=0, help="the input's seed (vitbench's --seed)")
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                    help="a module imported before onnxruntime, repeatable (a diagnosis: e.g. torch, "
                         "vitbench.backends.onnxruntime.backend, as in vitbench's process)")
    a = ap.parse_args()
    for name in ("batch", "resolution", "runs"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.threads < 0 or a.warmup < 0:
        ap.error("--threads and --warmup must be >= 0")
    print(json.dumps({**run(a.model, a.batch, a.resolution, a.threads, a.warmup, a.runs, a.seed),
                      "imported_first": a.imports}))


if __name__ == "__main__":
    main()
