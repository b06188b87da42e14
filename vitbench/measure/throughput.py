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

from vitbench.backends.base import Backend, RunSettings, get_backend
from vitbench.env import environment
from vitbench.errors import ConfigError
from vitbench.measure.timing import summarize
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import get_spec
from vitbench.record import error_info, make_record, now


def resolve_settings(settings: RunSettings) -> RunSettings:
    """Fill defaults from the variant (resolution, classes) and validate, before anything is built."""
    spec = get_spec(settings.model)
    res = settings.resolution or spec.resolution
    spec.check_resolution(res)
    if settings.task not in ("infer", "train"):
        raise ConfigError(f"unknown task {settings.task!r}; allowed: infer, train")
    if settings.batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {settings.batch_size}")
    return replace(settings, model=spec.name, resolution=res, num_classes=settings.num_classes or spec.num_classes)


def bench(settings: RunSettings, backend: str | Backend = "torch", warmup_steps: int = 3, min_steps: int = 10,
          min_seconds: float = 1.0, max_seconds: float = 60.0, with_mfu: bool = True) -> dict:
    """Measure steps/s of `settings` and return a record of kind 'bench' (status 'oom' if it does not fit)."""
    started = now()
    settings = resolve_settings(settings)
    be = get_backend(backend) if isinstance(backend, str) else backend
    info = be.setup(settings.device, settings.threads)
    config = {"backend": be.name, **settings.to_dict(), "warmup_steps": warmup_steps, "min_steps": min_steps,
              "min_seconds": min_seconds}
    env = environment(info)
    work = None
    oom = None
    try:
        be.reset_peak_memory()
        t0 = time.perf_counter()
        work = be.prepare(settings)
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
        oom = error_info(e)
    finally:
        if work is not None:
            work.close()
    if oom is not None:
        # Free memory only here, outside the except block: while the exception (and its traceback's frames,
        # which hold the model and activations) is alive, the allocator could not release anything.
        work = None
        be.cleanup()
        return make_record("bench", config, status="oom", env=env, error=oom, started_at=started)
    stats = summarize(step_s)
    batch = work.batch_size
    median_s = stats["step_ms_median"] / 1000
    metrics = {
        "img_per_s": batch / median_s,
        "img_per_s_mean": batch / (stats["step_ms_mean"] / 1000),
        **stats,
        "batch_size_requested": settings.batch_size,
        "batch_size_achieved": batch,
        "build_s": build_s,
        "first_step_s": first_step_s,
        # compile/jit time: explicit where the backend separates it (JAX AOT); for torch.compile the first
        # step minus a steady one (compilation is lazy there); None for eager execution
        "compile_s": work.compile_s if work.compile_s is not None
        else (max(0.0, first_step_s - median_s) if settings.compile else None),
        "peak_mem_mib": peak_mem,
    }
    spec = get_spec(settings.model)
    fwd_gflops = analytic_counts(spec, settings.resolution, settings.num_classes).gflops
    step_gflops = fwd_gflops * batch * (3 if settings.task == "train" else 1)
    metrics["gflops_per_img_fwd"] = fwd_gflops
    metrics["model_tflops_per_s"] = step_gflops / median_s / 1e3
    if with_mfu:
        from vitbench.measure.peak import matmul_peak

        peak = matmul_peak(be, settings.precision, settings.device, info.get("threads"))
        metrics["peak_tflops"] = peak["peak_tflops"]
        metrics["mfu"] = metrics["model_tflops_per_s"] / peak["peak_tflops"] if peak["peak_tflops"] else None
    raw = {"step_s": step_s, "warmup_s": warmup_s}
    return make_record("bench", config, metrics=metrics, raw=raw, env=env, started_at=started)
