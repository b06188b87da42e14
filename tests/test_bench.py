"""Throughput measurement on tiny models: both timing modes, units, raw times, memory phases, MFU, OOM rows,
thread recording."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from vitbench.backends.base import Step, StopRule, Workload
from vitbench.backends.torch.backend import TorchBackend
from vitbench.measure.throughput import bench
from vitbench.measure.timing import summarize
from tolerances_stat import f64

FAST = dict(warmup_steps=2, stop=StopRule(min_steps=5, min_seconds=0.05, max_seconds=120.0), threads=1)
ATTENTION = {"vit": "flash", "bit": "none", "hybrid": "flash"}  # torch's CPU SDPA kernel for fp32 is flash


@pytest.mark.parametrize("task", ["infer", "train"])
@pytest.mark.parametrize("model,family", [("ViT-Nano/4", "vit"), ("R-Nano", "bit"),
                                          ("R-Nano+ViT-Micro/8", "hybrid")])
def test_bench_record(model, family, task, one_torch_thread):
    rec = bench(Step(model, mode=task, batch_size=3), **FAST)  # default timing: throughput
    assert rec.kind == "bench" and rec.status == "ok" and rec.config["timing"] == "throughput"
    m, raw = rec.metrics, rec.raw
    assert len(raw["window_s"]) == len(raw["step_s"]) == m["windows"] >= 5 and len(raw["warmup_s"]) == 2
    assert m["steps"] == m["windows"] * m["window_steps"] >= 5
    # exact: bench computes step_s and img_per_s by these very operations (the same roundings)
    assert raw["step_s"] == [w / m["window_steps"] for w in raw["window_s"]]
    assert m["img_per_s"] == 3 / (m["step_ms_median"] / 1000)
    # the same sum, then / steps * 1000 there and * 1000 / steps here: 2 roundings each
    assert m["step_ms_mean"] == f64(1000 * sum(raw["window_s"]) / m["steps"], roundings=2)
    assert "step_ms_p99" not in m  # per-step latency percentiles do not exist when steps overlap
    assert m["batch_size_requested"] == m["batch_size_achieved"] == 3
    assert m["first_step_s"] > 0 and m["compile_s"] is None
    assert m["memory_kind"] == "host_rss" and m["peak_mem_mib"] >= m["state_mib"] > 0
    assert m["compile_peak_mem_mib"] >= 0 and m["reserved_peak_mib"] is None
    assert m["matmul_precision"] == "fp32" and m["autocast"] is None and "allow_tf32=False" in m["matmul_settings"]
    assert m["attention_kernel"] == ATTENTION[family]
    assert 0 < m["mfu"] <= 1 and m["model_tflops_per_s"] > 0 and m["peak_source"] == "measured"
    assert m["timer"] == "host_clock" and isinstance(m["unstable"], bool)
    for key in ("python", "torch", "timm", "numpy", "cpu_model", "threads", "device", "git_sha"):
        assert key in rec.env
    assert rec.config["resolution"] == 32 and rec.config["backend"] == "torch"


def test_latency_timing_keeps_every_step(one_torch_thread):
    rec = bench(Step("ViT-Nano/4", batch_size=2), timing="latency", **FAST)
    m, raw = rec.metrics, rec.raw
    assert rec.config["timing"] == "latency" and "window_s" not in raw and "windows" not in m
    assert len(raw["step_s"]) == m["steps"] >= 5
    assert m["step_ms_p10"] <= m["step_ms_median"] <= m["step_ms_p90"] <= m["step_ms_p99"]
    assert m["img_per_s"] == 2 / (m["step_ms_median"] / 1000)  # exact: bench's own operations


def test_a_window_size_with_latency_timing_is_refused(cli):
    """Latency timing times every step alone: --window-steps with it was kept in the row and its trial key and
    applied nowhere (found by a review). Refused, naming both options; with throughput timing it applies."""
    r = cli("bench", "ViT-Nano/4", "--timing", "latency", "--window-steps", "7", "--threads", "1")
    assert r.exit_code == 2, r.output
    said = " ".join(r.output.split())
    assert "--window-steps applies only with --timing throughput (here latency" in said, said
    from vitbench.tasks import get_task

    p = get_task("infer").Params(model="ViT-Nano/4", task="infer", window_steps=7)
    assert p.config()["window_steps"] == 7
    assert "window_steps" in get_task("infer").Params(model="ViT-Nano/4", task="infer", timing="latency").config()


def test_a_window_that_cannot_stop_within_max_seconds_is_refused(cli):
    """The timer stops only between windows: --window-steps 3000 under --max-seconds 0.01 timed 4 s (100,000 steps:
    101 s), an ok row of one window. Such a window is refused after the warm-up, saying how many steps fit; one
    that fits runs; a window or min_steps past MAX_STEPS (what a timer runs at most) is refused as typed."""
    from vitbench.backends.workload import MAX_STEPS
    from vitbench.errors import ConfigError
    from vitbench.measure.timing import check_window

    check_window(10, 0.001, 0.011)  # 10 ms of a window in 11 ms: fits
    with pytest.raises(ConfigError, match=r"window_steps 3000: one window takes about 3 s here .* give at most 10 "):
        check_window(3000, 0.001, 0.0101)
    base = ("bench", "ViT-Nano/4", "-r", "16", "-b", "2", "--threads", "1", "--warmup", "2", "--min-seconds", "0")
    r = cli(*base, "--window-steps", "100000", "--max-seconds", "0.05")
    assert r.exit_code == 2 and "timing stops only between windows" in " ".join(r.output.split()), r.output
    r = cli(*base, "--window-steps", "2", "--max-seconds", "5", "--json")
    assert r.exit_code == 0, r.output
    for option in ("--window-steps", "--min-steps"):
        r = cli(*base, option, str(MAX_STEPS + 1))
        assert r.exit_code == 2 and str(MAX_STEPS) in r.output, r.output


def test_steady_memory_excludes_what_the_build_used(one_torch_thread):
    """Steady steps keep the state (weights, grads, Adam's moments, inputs) and add activations: never less than
    the state; the build phase is measured apart."""
    rec = bench(Step("ViT-Nano/4", mode="train", batch_size=4), **FAST)
    m = rec.metrics
    from vitbench.models.analytic import analytic_counts
    from vitbench.models.specs import get_spec

    n_params = analytic_counts(get_spec("ViT-Nano/4"), 32, 10).params
    assert m["state_mib"] >= 4 * n_params * 4 / 2**20  # fp32 weights + grads + 2 Adam moments, at least
    assert m["peak_mem_mib"] >= m["state_mib"]


def test_training_steps_change_the_weights():
    be = TorchBackend()
    be.setup("cpu")
    work = be.prepare(Step("ViT-Nano/4", mode="train", batch_size=4, optimizer="sgd"))
    before = [p.detach().clone() for p in work.model.parameters()]
    losses = [float(work.step().detach()) for _ in range(5)]
    assert all(not torch.equal(a, b) for a, b in zip(before, work.model.parameters()))
    assert losses[-1] < losses[0]  # same batch 5 times: SGD must fit it


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_runs_under_autocast(precision, one_torch_thread):
    rec = bench(Step("R-Nano", mode="train", batch_size=2, precision=precision), **FAST)
    assert rec.status == "ok" and rec.config["precision"] == precision
    dtype = {"bf16": "bfloat16", "fp16": "float16"}[precision]
    assert rec.metrics["autocast"] == dtype and rec.metrics["matmul_precision"] == "fp32"  # fp32 leftovers: fp32


def test_threads_are_set_and_recorded():
    before = torch.get_num_threads()
    try:
        rec = bench(Step("ViT-Nano/4", batch_size=2), **FAST)
        assert rec.env["threads"] == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_channels_last_default_for_conv_families():
    be = TorchBackend()
    be.setup("cpu")
    bit = be.prepare(Step("R-Nano", batch_size=2))
    vit = be.prepare(Step("ViT-Nano/4", batch_size=2))
    assert bit.x.is_contiguous(memory_format=torch.channels_last)
    assert vit.x.is_contiguous() and not vit.x.is_contiguous(memory_format=torch.channels_last)


def test_oom_becomes_a_row_and_memory_is_cleaned():
    class OOMBackend(TorchBackend):
        cleaned = False

        def prepare(self, settings):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

        def cleanup(self):
            OOMBackend.cleaned = True

    rec = bench(Step("ViT-Nano/4", batch_size=4096), backend=OOMBackend(), **FAST)
    assert rec.status == "oom" and "out of memory" in rec.error.message and OOMBackend.cleaned
    assert rec.metrics == {}


def test_other_errors_propagate():
    class Broken(TorchBackend):
        def prepare(self, settings):
            raise ValueError("bug")

    with pytest.raises(ValueError):
        bench(Step("ViT-Nano/4"), backend=Broken(), **FAST)


class _Sleepy(Workload):
    batch_size = 1

    def __init__(self, dt):
        self.dt, self.calls = dt, 0

    def step(self):
        self.calls += 1
        time.sleep(self.dt)

    def sync(self, out):
        pass


def test_timed_loop_needs_both_min_steps_and_min_seconds():
    be = TorchBackend()
    times = be.time_steps(_Sleepy(0.001), StopRule(min_steps=3, min_seconds=0.05, max_seconds=5))
    assert len(times) > 3 and sum(times) >= 0.04  # seconds were the binding constraint
    times = be.time_steps(_Sleepy(0.01), StopRule(min_steps=8, min_seconds=0.0, max_seconds=5))
    assert len(times) == 8  # steps were
    times = be.time_steps(_Sleepy(0.02), StopRule(min_steps=1000, min_seconds=0.0, max_seconds=0.1))
    assert len(times) < 10  # max_seconds caps a slow model


def test_summary_statistics():
    s = summarize([0.001, 0.002, 0.003, 0.004, 0.100])
    # the literal read (1 rounding) and * 1000 (1); the IQR also subtracts two literals' values (4, of 4 ms)
    assert s["step_ms_median"] == f64(3.0, roundings=2)
    assert s["step_ms_iqr"] == f64(2.0, roundings=4, scale=4.0)
    assert s["step_ms_min"] == f64(1.0, roundings=2) and s["steps"] == 5
    assert s["step_cv"] > 1  # one outlier dominates the spread
    with pytest.raises(ValueError):
        summarize([])


@pytest.mark.slow
def test_torch_compile_time_is_kept_apart():
    rec = bench(Step("ViT-Nano/4", batch_size=2, compile=True), **FAST)
    m = rec.metrics
    assert m["compile_s"] > 10 * m["step_ms_median"] / 1000


class _AsyncDevice(Workload):
    """A fake device: each step costs `host_s` on the host (launch) and then `device_s` on the device, which runs
    the steps one after another; step() returns at once, sync() waits until the device is done."""

    batch_size = 1

    def __init__(self, host_s: float, device_s: float):
        self.host_s, self.device_s, self.free_at = host_s, device_s, 0.0

    def step(self):
        time.sleep(self.host_s)
        self.free_at = max(time.perf_counter(), self.free_at) + self.device_s

    def sync(self, out):
        time.sleep(max(0.0, self.free_at - time.perf_counter()))


def test_latency_adds_launch_and_device_time_throughput_overlaps_them():
    """Known answers of the two timing modes: per-step sync puts a 10 ms launch and 20 ms of device work in
    series (30 ms per step); a queued window lets launches overlap the device (20 ms per step + one launch)."""
    be = TorchBackend()
    work = _AsyncDevice(host_s=0.010, device_s=0.020)
    latency = be.time_steps(work, StopRule(min_steps=8, min_seconds=0, max_seconds=30))
    windows = be.time_windows(work, 8, StopRule(min_steps=32, min_seconds=0, max_seconds=30, min_windows=4))
    assert len(latency) == 8 and len(windows) == 4
    per_step_latency = statistics.median(latency)
    per_step_throughput = statistics.median(windows) / 8
    assert per_step_latency >= 0.029
    assert 0.019 <= per_step_throughput <= 0.85 * per_step_latency


def test_window_sizing_and_stopping():
    from vitbench.measure.timing import summarize_windows, window_steps_for

    # 50 windows cover min_steps=500 (10 each) and min_seconds=1 at 10 ms a step (2 each): the larger wins
    assert window_steps_for(0.01, min_steps=500, min_seconds=1.0, max_seconds=60) == 10
    assert window_steps_for(0.001, min_steps=100, min_seconds=1.0, max_seconds=60) == 20  # seconds bind
    assert window_steps_for(0.5, min_steps=10, min_seconds=1.0, max_seconds=60) == 2  # never one step (latency)
    assert window_steps_for(0.01, min_steps=10, min_seconds=100, max_seconds=1.0) == 20  # 5 windows fit in 1 s
    rule = StopRule(min_steps=10, min_seconds=1.0, max_seconds=60.0, min_windows=5, max_steps=10**5)
    assert not rule.done(4, 40, 10.0)  # too few windows
    assert rule.done(5, 40, 10.0)
    assert rule.done(1, 4, 61.0)  # max_seconds caps
    assert not rule.done(5, 9, 10.0) and rule.done(1, 10**5, 0.0)  # too few steps; max_steps caps
    s = summarize_windows([0.4, 0.2, 0.3], window_steps=10)
    # a window's literal, / 10, * 1000: 3 roundings; the mean: 3 literals, 2 sums, / 30, * 1000: 7
    assert s["steps"] == 30 and s["windows"] == 3 and s["step_ms_median"] == f64(30.0, roundings=3)
    assert s["step_ms_mean"] == f64(30.0, roundings=7) and s["step_ms_min"] == f64(20.0, roundings=3)
    assert "step_ms_p99" not in s
