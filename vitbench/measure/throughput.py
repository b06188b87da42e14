"""Inference and training-step throughput of one (model, backend, settings).

Method (METHOD_VERSION in vitbench.record):
  build -> one first step (timed apart: compile/jit and allocator warm-up) -> `warmup_steps` steps (kept raw, not
  counted) -> [memory phase restarts] -> timed steps in the chosen timing mode (vitbench.measure.timing):
  - latency: one step at a time, synchronised, until the stop rule is done (`stop`: min_steps and min_seconds,
    or max_seconds; vitbench.backends.workload.StopRule);
    step_ms_median/p90/p99 are per-step latencies;
  - throughput (default): windows of `window_steps` steps queued between two device-idle points (CUDA events
    on GPU), at least MIN_WINDOWS of them; step_ms_* are per-step times of whole windows (a window is one sample).
  img_per_s = achieved batch / median step time (per-step time of the median window in throughput mode).
Memory: `compile_peak_mem_mib` covers build, compilation, the first and the warm-up steps; `peak_mem_mib` only the
steady timed steps (weights and optimizer state included, compiler scratch not), of the kind `memory_kind` names;
on CUDA the reserved peak and NVML's device-used memory apart, and energy per image from NVML's counter.
Model FLOP/s use the analytic forward count (x3 for a training step: forward + backward ~ 3 forwards);
MFU = model FLOP/s / the device's peak for the precision (vitbench.measure.peak: datasheet, or the best measured
matmul of any backend), never above 1: a step faster than a measured peak raises the peak.
Compile caches: `compile_cached` says whether the step's compiled code came from the persistent compile cache
(`from_cache`, on the backend's own hit/miss counters); `raw.budget_s` splits the measurement's time into set-up,
compile, warm-up and timed parts (`budget`; the report's time budget adds the trial's process start-up).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from vitbench import phases
from vitbench.backends.base import Backend, Step, StopRule, default_backend, get_backend
from vitbench.env import environment
from vitbench.errors import ConfigError, NonFiniteResult, clip
from vitbench.measure import extra_work, group, ranks
from vitbench.measure.load import OTHER_LOAD, LoadMeter
from vitbench.measure.noise import UNSTABLE, assess, summary
from vitbench.measure.nvml import EnergyMeter
from vitbench.measure.timing import (
    DEFAULT_TIMING,
    MIN_WINDOWS,
    TimingMode,
    check_window,
    compile_seconds,
    summarize,
    summarize_windows,
    window_steps_for,
)
from vitbench.models.analytic import TRAIN_FLOPS_PER_FORWARD, analytic_counts
from vitbench.record import ErrorInfo, Record, Status, finite_number, now

KIND = "bench"


def resolve_step(step: Step) -> Step:
    """Fill defaults from the variant (resolution, classes) and check the resolution, before anything is built
    (the step checked its own fields and resolved its model when it was made)."""
    spec = step.spec
    res = spec.resolution if step.resolution is None else step.resolution
    spec.check_resolution(res)
    return replace(step, resolution=res, num_classes=step.num_classes or spec.num_classes)


def step_config(backend: str, step: Step, device: str, threads: int | None) -> dict:
    """What a step measurement records as its config (the trial fields it depends on). The step's mode is
    recorded as `task`: for bench it is the task's name (infer, train); a max_batch record's `task` is the mode it
    probed (its trial's `mode`). Kept so: rows stored by every earlier version say so, and compare matches
    rows without a trial (a command's) by this config."""
    d = step.to_dict()
    return {"backend": backend, "model": d.pop("model"), "task": d.pop("mode"), **d, "device": device,
            "threads": threads}


def bench(step: Step, backend: str | Backend | None = None, device: str = "cpu", threads: int | None = None, *,
          warmup_steps: int, stop: StopRule, timing: TimingMode | str = DEFAULT_TIMING,
          window_steps: int | None = None, with_mfu: bool = True) -> Record:
    """Measure steps/s of `step` and return a record of kind 'bench' (status 'oom' if it does not fit): timed
    until `stop` is done (its min_windows and max_steps this function's: 1 for latency, MIN_WINDOWS for
    throughput). The defaults of `warmup_steps` and `stop` are the task's (vitbench.tasks.bench.Timing)."""
    started = now()
    t_start = time.perf_counter()
    step = resolve_step(step)
    timing = TimingMode.parse(timing, "timing")
    if window_steps is not None and window_steps < 1:
        raise ConfigError(f"window_steps must be >= 1, got {window_steps}")
    name = backend.name if isinstance(backend, Backend) else (backend or default_backend())
    if group.launches_ranks(step, name):  # one rank per device, each running this function (measure/group.py)
        return group.bench_group(step, name, device=device, threads=threads, warmup_steps=warmup_steps,
                                 stop=stop, timing=timing.value, window_steps=window_steps, with_mfu=with_mfu)
    be = get_backend(name) if not isinstance(backend, Backend) else backend
    info = group.setup(be, device, threads, step)
    config = {**step_config(be.name, step, device, threads), "warmup_steps": warmup_steps,
              "min_steps": stop.min_steps, "min_seconds": stop.min_seconds, "timing": timing.value,
              "window_steps": window_steps}
    if ranks.in_group():  # ranks run the same fixed number of steps (measure/group.py)
        window_steps, stop = group.agreed_timing(stop, window_steps)
    env = environment(info)
    dev = be.device_info()
    extra = extra_work.requested()  # test-only known slowdown (vitbench.measure.extra_work)
    if extra and ranks.in_group():  # sized by timing each rank apart: ranks would run different step counts
        raise ConfigError(f"${extra_work.ENV} does not apply to a group of ranks (devices > 1)")
    work = timed = None
    oom = None
    try:
        be.reset_peak_memory()
        cache_before = be.compile_cache_counts()
        t0 = time.perf_counter()
        work = be.prepare(step)
        build_s = time.perf_counter() - t0
        phases.first_step()
        t0 = time.perf_counter()
        to_first_step_s = t0 - t_start
        work.sync(work.step())
        first_step_s = time.perf_counter() - t0
        compile_cached = from_cache(cache_before, be.compile_cache_counts())
        warmup_s = []
        for _ in range(warmup_steps):
            t0 = time.perf_counter()
            work.sync(work.step())
            warmup_s.append(time.perf_counter() - t0)
        compile_mem = (be.peak_memory_mib(), be.reserved_peak_mib())
        state = work.state_bytes()
        be.restart_peak_memory(work)  # the steady phase: what compilation used and freed no longer counts
        estimate = statistics.median(warmup_s) if warmup_s else first_step_s
        if window_steps and timing is not TimingMode.LATENCY and warmup_s:  # the first step compiles: no estimate
            check_window(window_steps, estimate, stop.max_seconds)
        timed = extra_work.ExtraWork(work, extra) if extra else work
        if ranks.in_group():
            be.group_barrier()  # the ranks' timed windows start together
        with LoadMeter(ranks.group_processes()) as load, EnergyMeter(dev) as energy:
            if timing is TimingMode.LATENCY:
                per_window = 1
                samples = be.time_steps(timed, replace(stop, min_windows=1))
            else:
                per_window = window_steps or window_steps_for(estimate, stop.min_steps, stop.min_seconds,
                                                              stop.max_seconds)
                samples = be.time_windows(timed, per_window, replace(stop, min_windows=MIN_WINDOWS))
        peak_mem, memory_kind, reserved = be.peak_memory_mib(), be.memory_kind(), be.reserved_peak_mib()
        attention = be.attention_kernel(work)  # one more step, after everything above was measured
    except Exception as e:  # noqa: BLE001 - OOM is a result, anything else propagates
        if not be.is_oom(e) or ranks.in_group():  # a rank that returned would leave its peers waiting in a
            raise  # collective: it fails, they are stopped at once (run_group), and the trial's row says OOM
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
    bad = [s for s in samples if not (finite_number(s) and s > 0)]
    if bad or not samples:  # a throughput of them would be a division by zero, inf or NaN (a plug-in's timer)
        got = clip(repr(bad[0]), 40) if bad else "no"
        raise NonFiniteResult(f"backend {be.name!r}'s timer gave {got} seconds "
                              f"for a timed {'step' if timing is TimingMode.LATENCY else 'window'} ({len(bad)} of "
                              f"{len(samples)}); each must be a finite number > 0: no throughput from them")
    if timing is TimingMode.LATENCY:
        stats, step_s = summarize(samples), samples
    else:
        stats, step_s = summarize_windows(samples, per_window), [w / per_window for w in samples]
    batch = work.batch_size
    median_s = stats["step_ms_median"] / 1000
    end = energy.end
    noise = assess(samples, be.timer, load.other_cores, gpu_slowdown=energy.slowdown,
                   other_gpu_processes=end.other_processes if end else None)
    settings = dict(work.settings)
    # compile/jit time: explicit where the backend separates it (JAX AOT, in `prepare`); for torch.compile the
    # first step minus a steady one (compilation is lazy there); None for eager execution
    aot = work.compile_s is not None
    compile_s = compile_seconds(work.compile_s, step.compile, first_step_s, median_s)
    metrics = {
        "img_per_s": batch / median_s,
        "img_per_s_mean": batch / (stats["step_ms_mean"] / 1000),
        **stats,
        "timer": be.timer.value,  # the timing mode is the config's `timing`
        "batch_size_requested": step.batch_size,
        "batch_size_achieved": batch,
        "build_s": build_s,
        "first_step_s": first_step_s,
        "compile_s": compile_s,
        "compile_cached": compile_cached,
        "peak_mem_mib": peak_mem,
        "memory_kind": memory_kind.value,
        "state_mib": state / 2**20 if state is not None else None,  # weights, grads, optimizer state, inputs
        "compile_peak_mem_mib": compile_mem[0],
        "reserved_peak_mib": reserved,
        "compile_reserved_peak_mib": compile_mem[1],
        "device_used_mib": end.used_mib if end else None,
        # the meter reads one device (this process's): over that device's share of the group's images
        "energy_j_per_img": (energy.energy_j / (stats["steps"] * batch / step.devices)
                             if energy.energy_j is not None else None),
        "power_w_mean": energy.energy_j / energy.wall_s if energy.energy_j is not None and energy.wall_s else None,
        **dict(zip(("sm_clock_mhz_min", "sm_clock_mhz_max"), energy.samples.clock_range())),
        "nvml": energy.why,
        "matmul_precision": settings.get("matmul_precision"),
        "autocast": settings.get("autocast"),
        "matmul_settings": settings.get("framework"),
        "compile_mode": settings.get("compile_mode"),
        "attention_kernel": attention.value if attention is not None else None,
        **group.group_metrics(step, info, batch / median_s),
        OTHER_LOAD: load.other_cores,
        UNSTABLE: bool(noise),
        "noise": summary(noise),
    }
    fwd_gflops = analytic_counts(step.spec, step.resolution, step.num_classes).gflops
    step_gflops = fwd_gflops * batch * (TRAIN_FLOPS_PER_FORWARD if step.mode == "train" else 1)
    metrics["gflops_per_img_fwd"] = fwd_gflops
    metrics["model_tflops_per_s"] = step_gflops / median_s / 1e3
    if with_mfu:  # per device: the group's FLOP/s over (peak x devices)
        metrics.update(mfu_metrics(be, step, info.get("threads"), metrics["model_tflops_per_s"] / step.devices,
                                   load))
    raw = {"step_s": step_s, "warmup_s": warmup_s,
           "budget_s": budget(to_first_step_s, compile_s or 0.0, aot, first_step_s, warmup_s, samples),
           "noise": [{"flag": n.flag.value, "detail": n.detail} for n in noise], "settings": settings}
    if timing is TimingMode.THROUGHPUT:
        raw["window_s"] = samples
    if energy.samples.raw() is not None:  # NVML's clock and power every SAMPLE_S of the timed steps
        raw["nvml_samples"] = energy.samples.raw()
    if isinstance(timed, extra_work.ExtraWork):
        raw["test_extra_work"] = timed.info
    return Record.measured(KIND, config, metrics=metrics, raw=raw, env=env, started_at=started)


def from_cache(before: tuple[int, int] | None, after: tuple[int, int] | None) -> bool | None:
    """Did the step's compiled code come from the persistent compile cache? True: every compile between the two
    readings of the backend's counters (Backend.compile_cache_counts) was read from the cache; False: at least
    one was compiled (and written); None: nothing went through the cache (eager execution, the cache off, a
    backend without one)."""
    if before is None or after is None:
        return None
    hits, misses = after[0] - before[0], after[1] - before[1]
    if misses > 0:
        return False
    return True if hits > 0 else None


def budget(to_first_step_s: float, compile_s: float, aot: bool, first_step_s: float, warmup_s: list[float],
           samples: list[float]) -> dict[str, float]:
    """The measurement's own time in disjoint parts, seconds: `setup` (from its start to the first step:
    framework import, device set-up, model build; an ahead-of-time compile excluded), `compile`, `warmup` (the
    first step and the warm-up steps; a lazy compile excluded) and `timed` (the timed steps or windows). What a
    trial spends outside them (process start, memory and kernel read-outs, MFU) is the report's 'other'."""
    return {"setup": max(0.0, to_first_step_s - (compile_s if aot else 0.0)), "compile": compile_s,
            "warmup": max(0.0, first_step_s + sum(warmup_s) - (0.0 if aot else compile_s)),
            "timed": float(sum(samples))}


def mfu_metrics(be: Backend, step: Step, threads: int | None, model_tflops: float, load: LoadMeter) -> dict:
    """mfu, the peak it divides by and where that came from. A step faster than a measured peak showed the
    device can do more: the peak rises to the step's rate (mfu 1). Faster than a datasheet peak cannot be (a
    wrong precision, a wrong row): mfu is capped at 1 and `mfu_over_peak` keeps the quotient."""
    from vitbench.measure.peak import PeakSource, device_peak, offer_observation

    # a provisional peak (measured while busy) is measured again here when this row's timed steps were quiet
    peak = device_peak(be, step.precision, threads, quiet_now=load.other_cores is not None and not load.busy)
    if peak is None or not peak.tflops:
        return {"peak_tflops": None, "mfu": None}
    ratio = model_tflops / peak.tflops
    over = None
    if ratio > 1:
        over = ratio
        if peak.source is PeakSource.MEASURED:
            peak = offer_observation(be, step.precision, threads, model_tflops,
                                     by=f"{step.model} {step.mode} step ({be.name})",
                                     how="model FLOP/s of a timed step (analytic matmul FLOPs / median step)",
                                     other_cores=load.other_cores, busy=load.busy)
        ratio = min(1.0, model_tflops / peak.tflops)
    return {**peak.metrics(), "mfu": ratio, "mfu_over_peak": over}


def rank_bench(step: dict, stop: dict, **kwargs) -> dict:
    """One rank of a group's `bench` (measure/group.py's bench_group; run by vitbench.measure.ranks in the
    rank's process)."""
    return bench(Step(**step), stop=StopRule(**stop), **kwargs).to_dict()
