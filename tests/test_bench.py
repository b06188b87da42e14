"""Throughput measurement on tiny models: method, units, raw times, OOM rows, thread recording."""

from __future__ import annotations

import time

import pytest
import torch

from vitbench.backends.base import Step, Workload
from vitbench.backends.torch.backend import TorchBackend
from vitbench.measure.throughput import bench
from vitbench.measure.timing import summarize

FAST = dict(warmup_steps=2, min_steps=5, min_seconds=0.05, max_seconds=120.0)


@pytest.mark.parametrize("task", ["infer", "train"])
@pytest.mark.parametrize("model", ["ViT-Nano/4", "R-Nano", "R-Nano+ViT-Micro/8"])
def test_bench_record(model, task):
    rec = bench(Step(model, mode=task, batch_size=3), **FAST)
    assert rec.kind == "bench" and rec.status == "ok"
    m, raw = rec.metrics, rec.raw
    assert len(raw["step_s"]) == m["steps"] >= 5 and len(raw["warmup_s"]) == 2
    assert m["img_per_s"] == pytest.approx(3 / (m["step_ms_median"] / 1000))
    assert m["batch_size_requested"] == m["batch_size_achieved"] == 3
    assert m["step_ms_p10"] <= m["step_ms_median"] <= m["step_ms_p90"] <= m["step_ms_p99"]
    assert m["peak_mem_mib"] >= 0 and m["first_step_s"] > 0 and m["compile_s"] is None
    assert 0 < m["mfu"] < 1.5 and m["model_tflops_per_s"] > 0
    for key in ("python", "torch", "timm", "numpy", "cpu_model", "threads", "device", "git_sha"):
        assert key in rec.env
    assert rec.config["resolution"] == 32 and rec.config["backend"] == "torch"


def test_training_steps_change_the_weights():
    be = TorchBackend()
    be.setup("cpu")
    work = be.prepare(Step("ViT-Nano/4", mode="train", batch_size=4, optimizer="sgd"))
    before = [p.detach().clone() for p in work.model.parameters()]
    losses = [float(work.step().detach()) for _ in range(5)]
    assert all(not torch.equal(a, b) for a, b in zip(before, work.model.parameters()))
    assert losses[-1] < losses[0]  # same batch 5 times: SGD must fit it


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_runs_under_autocast(precision):
    rec = bench(Step("R-Nano", mode="train", batch_size=2, precision=precision), **FAST)
    assert rec.status == "ok" and rec.config["precision"] == precision


def test_threads_are_set_and_recorded():
    before = torch.get_num_threads()
    try:
        rec = bench(Step("ViT-Nano/4", batch_size=2), threads=1, **FAST)
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
    times = be.time_steps(_Sleepy(0.001), min_steps=3, min_seconds=0.05, max_seconds=5)
    assert len(times) > 3 and sum(times) >= 0.04  # seconds were the binding constraint
    times = be.time_steps(_Sleepy(0.01), min_steps=8, min_seconds=0.0, max_seconds=5)
    assert len(times) == 8  # steps were
    times = be.time_steps(_Sleepy(0.02), min_steps=1000, min_seconds=0.0, max_seconds=0.1)
    assert len(times) < 10  # max_seconds caps a slow model


def test_summary_statistics():
    s = summarize([0.001, 0.002, 0.003, 0.004, 0.100])
    assert s["step_ms_median"] == pytest.approx(3.0)
    assert s["step_ms_iqr"] == pytest.approx(2.0)
    assert s["step_ms_min"] == pytest.approx(1.0) and s["steps"] == 5
    assert s["step_cv"] > 1  # one outlier dominates the spread
    with pytest.raises(ValueError):
        summarize([])


@pytest.mark.slow
def test_torch_compile_time_is_kept_apart():
    rec = bench(Step("ViT-Nano/4", batch_size=2, compile=True), **FAST)
    m = rec.metrics
    assert m["compile_s"] > 10 * m["step_ms_median"] / 1000
