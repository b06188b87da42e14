"""Inference and training-step throughput of one (model, backend, settings).

Method (METHOD_VERSION in vitbench.record): build -> one first step (timed apart: includes compile/jit and
allocator warm-up) -> `warmup_steps` untimed-for-throughput steps (kept raw) -> timed steps until both
`min_steps` and `min_seconds` are reached (or `max_seconds`). Every step is synchronised by the backend.
img_per_s = achieved batch / median step time. Model FLOP/s use the analytic forward count (x3 for a training
step: forward + backward ~ 3 forwards), MFU = model FLOP/s / the device's measured matmul peak.
"""

from __future__ import annotations

import time
from dataclasses import replace

from vitbench.backends.base import Backend, Step, default_backend, get_backend
from vitbench.env import environment
from vitbench.errors import ConfigError
from vitbench.measure.timing import summarize
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import get_spec
from vitbench.record import ErrorInfo, Record, Status, now

KIND = "bench"


def resolve_step(step: Step) -> Step:
    """Fill defaults from the variant (resolution, classes) and validate, before anything is built."""
    spec = get_spec(step.model)
    res = spec.resolution if step.resolution is None else step.resolution
    spec.check_resolution(res)
    if step.mode not in ("infer", "train"):
        raise ConfigError(f"unknown task {step.mode!r}; allowed: infer, train")
    if step.batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {step.batch_size}")
    return replace(step, model=spec.name, resolution=res, num_classes=step.num_classes or spec.num_classes)


def step_config(backend: str, step: Step, device: str, threads: int | None) -> dict:
    """What a step measurement records as its config (the trial fields it depends on)."""
    d = step.to_dict()
    return {"backend": backend, "model": d.pop("model"), "task": d.pop("mode"), **d, "device": device,
            "threads": threads}


def bench(step: Step, backend: str | Backend | None = None, device: str = "cpu", threads: int | None = None,
          warmup_steps: int = 3, min_steps: int = 10, min_seconds: float = 1.0, max_seconds: float = 60.0,
          with_mfu: bool = True) -> Record:
    """Measure steps/s of `step` and return a record of kind 'bench' (status 'oom' if it does not fit)."""
    started = now()
    step = resolve_step(step)
    be = get_backend(backend or default_backend()) if not isinstance(backend, Backend) else backend
    info = be.setup(device, threads)
    config = {**step_config(be.name, step, device, threads), "warmup_steps": warmup_steps,
              "min_steps": min_steps, "min_seconds": min_seconds}
    env = environment(info)
    work = None
    oom = None
    try:
        be.reset_peak_memory()
        t0 = time.perf_counter()
        work = be.prepare(step)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        work.sync(work.step())
        first_step_s = time.perf_counter() - t0
        warmup_s = []
        for _ in range(warmup_steps):
            t0 = time.perf_counter()
            work.sync(work.step())
            warmup_s.append(time.perf_counter() - t0)
        step_s = be.time_steps(work, min_steps, min_seconds, max_seconds)
        peak_mem = be.peak_memory_mib()
    except Exception as e:  # noqa: BLE001 - OOM is a result, anything else propagates
        if not be.is_oom(e):
            raise
        oom = ErrorInfo.of(e)
    finally:
        if work is not None:
            work.close()
    if oom is not None:
        # Free memory only here, outside the except block: while the exception (and its traceback's frames,
        # which hold the model and activations) is alive, the allocator could not release anything.
        work = None
        be.cleanup()
        return Record.failed(KIND, config, Status.OOM, oom, started_at=started, env=env)
    stats = summarize(step_s)
    batch = work.batch_size
    median_s = stats["step_ms_median"] / 1000
    metrics = {
        "img_per_s": batch / median_s,
        "img_per_s_mean": batch / (stats["step_ms_mean"] / 1000),
        **stats,
        "batch_size_requested": step.batch_size,
        "batch_size_achieved": batch,
        "build_s": build_s,
        "first_step_s": first_step_s,
        # compile/jit time: explicit where the backend separates it (JAX AOT); for torch.compile the first
        # step minus a steady one (compilation is lazy there); None for eager execution
        "compile_s": work.compile_s if work.compile_s is not None
        else (max(0.0, first_step_s - median_s) if step.compile else None),
        "peak_mem_mib": peak_mem,
    }
    spec = get_spec(step.model)
    fwd_gflops = analytic_counts(spec, step.resolution, step.num_classes).gflops
    step_gflops = fwd_gflops * batch * (3 if step.mode == "train" else 1)
    metrics["gflops_per_img_fwd"] = fwd_gflops
    metrics["model_tflops_per_s"] = step_gflops / median_s / 1e3
    if with_mfu:
        from vitbench.measure.peak import matmul_peak

        peak = matmul_peak(be, step.precision, device, info.get("threads"))
        metrics["peak_tflops"] = peak["peak_tflops"]
        metrics["mfu"] = metrics["model_tflops_per_s"] / peak["peak_tflops"] if peak["peak_tflops"] else None
    raw = {"step_s": step_s, "warmup_s": warmup_s}
    return Record.measured(KIND, config, metrics=metrics, raw=raw, env=env, started_at=started)
