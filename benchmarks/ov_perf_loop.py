"""OpenVINO's own timing loop on an IR, made as its tool `benchmark_app -d CPU -api sync -nstreams 1 -nthreads T
-infer_precision f32 -hint none -shape [B,3,R,R] -niter N` makes it, in a process that can take turns on one CPU
with vitbench's (benchmarks/bench_runtimes_parity.py); benchmark_app itself cannot. Imports openvino and numpy
(and vitbench.turns, only where VITBENCH_TURNS is set).

What benchmark_app does with those options (its source in the openvino wheel, openvino/tools/benchmark/: main.py
for the configuration and the order of steps, utils/utils.py for the input's precision and fill, benchmark.py for
the loop and the statistic), and what this loop does the same way:

- the device configuration (main.py, step 3): INFERENCE_NUM_THREADS = -nthreads, NUM_STREAMS = -nstreams,
  INFERENCE_PRECISION_HINT = -infer_precision, PERF_COUNT off; with `-hint none` no PERFORMANCE_HINT at all (the
  plug-in's own default applies), no pinning, hyper-threading or execution mode set: `CONFIG` below, which
  `benchmark_app -dump_config` writes out the same (tests/test_runtimes_turns.py holds the two equal, and the
  compiled models' properties as read back);
- the model (steps 4-7): `read_model`, reshaped to the static shape (-shape), then its pre-/post-processing: an
  input whose layout is [N,C,H,W] with 3 channels is an image and is fed as u8, the model converting it to f32
  (utils.pre_post_processing; the compiled model takes u8), the model's layout set to NCHW, then `compile_model`
  on the CPU device;
- one infer request (-api sync), its input tensor filled once before the loop with random values (u8 here: a
  seeded draw of 0-255) and fed to every run (static shapes: its "inference only" mode);
- one untimed first inference (`first_infer`; `--warmup`, default 1), then `--runs` synchronous `infer()` calls
  (benchmark.sync_inference), each timed by OpenVINO itself (`request.latency`, ms);
- the statistic: the latencies sorted, `percentile(times, 50)` = `times[ceil(n * 50 / 100) - 1]` (benchmark.py;
  the lower middle value when n is even), reported as "Median", and the mean as "Average".

This loop prints every run's latency and also its wall time (perf_counter around `infer`) and process CPU time.
With VITBENCH_TURNS set (vitbench.turns), it holds the turn from before compiling, hands it over once after the
untimed runs and once after every timed run (vitbench's latency loop does the same after each step), so that the
two processes' timed runs alternate on the same CPU; a wait for the turn is never inside a time.

    python benchmarks/ov_perf_loop.py MODEL.xml --batch 8 --resolution 224 --threads 1 --runs 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import time

import numpy as np
import openvino as ov

DEVICE = "CPU"
IMAGE_LAYOUT = "NCHW"  # benchmark_app's guess for a [B,3,R,R] input (utils.AppInputInfo.is_image: 3 channels)


def config(threads: int) -> dict[str, str]:
    """The properties benchmark_app passes to compile_model with `-nstreams 1 -nthreads T -infer_precision f32
    -hint none` (main.py, step 3), as `-dump_config` writes them."""
    return {"PERF_COUNT": "NO", "INFERENCE_NUM_THREADS": str(threads), "NUM_STREAMS": "1",
            "INFERENCE_PRECISION_HINT": "f32"}


def compiled_model(core: ov.Core, path: str, batch: int, resolution: int, threads: int) -> ov.CompiledModel:
    """benchmark_app's steps 4-7 on the IR at `path`: reshape, the image input fed as u8, compile."""
    model = core.read_model(path)
    model.reshape({0: [batch, 3, resolution, resolution]})
    ppp = ov.preprocess.PrePostProcessor(model)
    ppp.input(0).tensor().set_element_type(ov.Type.u8)
    ppp.input(0).model().set_layout(ov.Layout(IMAGE_LAYOUT))
    return core.compile_model(ppp.build(), DEVICE, config(threads))


def percentile(values: list[float], percent: int) -> float:
    """benchmark_app's statistic (benchmark.py) over sorted values."""
    return values[math.ceil(len(values) * percent / 100) - 1]


def _turns():
    """vitbench.turns where VITBENCH_TURNS is set (imported only then), else None."""
    if not os.environ.get("VITBENCH_TURNS"):
        return None
    from vitbench import turns
    return turns


def run(path: str, batch: int, resolution: int, threads: int, warmup: int, runs: int, seed: int) -> dict:
    turns = _turns()
    with turns.held() if turns else contextlib.nullcontext():
        compile0 = time.perf_counter()
        compiled = compiled_model(ov.Core(), path, batch, resolution, threads)
        compile_s = time.perf_counter() - compile0
        request = compiled.create_infer_request()
        request.get_input_tensor(0).data[:] = np.random.default_rng(seed).integers(
            0, 256, (batch, 3, resolution, resolution), dtype=np.uint8)
        warmup_ms = []
        for _ in range(warmup):
            request.infer()
            warmup_ms.append(request.latency)
        waited_s = turns.between_windows() if turns else 0.0  # the first timed run follows the other side's turn
        latency_ms, wall_s, cpu_s = [], [], []
        for _ in range(runs):
            c0, t0 = time.process_time(), time.perf_counter()
            request.infer()
            wall_s.append(time.perf_counter() - t0)
            cpu_s.append(time.process_time() - c0)
            latency_ms.append(request.latency)
            if turns:  # after every timed run, the last too: this process never runs beside the other's window
                waited_s += turns.between_windows()
    ordered = sorted(latency_ms)
    return {"step_ms": latency_ms, "step_s": wall_s, "cpu_s": cpu_s, "warmup_ms": warmup_ms,
            "step_ms_median": percentile(ordered, 50), "step_ms_mean": statistics.fmean(latency_ms),
            "compile_s": compile_s, "turn_wait_s": waited_s, "openvino": ov.get_version(),
            "config": config(threads)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the IR's .xml file")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--threads", type=int, default=1, help="INFERENCE_NUM_THREADS (benchmark_app's -nthreads)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs first (benchmark_app: 1)")
    ap.add_argument("--runs", type=int, default=10, help="timed runs (benchmark_app's -niter)")
    ap.add_argument("--seed", type=int, default=0, help="the input's seed")
    a = ap.parse_args()
    for name in ("batch", "resolution", "runs", "threads"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    print(json.dumps(run(a.model, a.batch, a.resolution, a.threads, a.warmup, a.runs, a.seed)))


if __name__ == "__main__":
    main()
