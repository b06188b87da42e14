"""`vitbench doctor`: can this machine's numbers be trusted, and what would make them noisy?

Every check returns a `Check`: a status, what was found, and why it matters (so the output explains itself).
The checks, per device and per backend that can run on it:
- timing honesty: a large matmul timed three ways: the backend's own timer (CUDA events on a GPU, the host clock
  on a CPU), the host wall clock around the same queued steps and their sync, and the host clock around the steps
  alone without the sync (what a timer that forgets to synchronise would report). The first two must agree;
  the third shows whether steps return before the device is done (then a missing sync would flatter).
- matmul precision: the framework's settings as they are in this process, what vitbench sets for fp32 (and tf32
  on a GPU), and what the arithmetic actually is: the relative error of an fp32 matmul against a float64
  reference on the host (fp32 ~1e-7..1e-6; TF32's 10-bit mantissa ~1e-4..1e-3; bf16 ~1e-3..1e-2).
- peak: the datasheet dense peak where the device has one, and the measured matmul peak (the MFU denominator
  elsewhere): which, how much, from which backend, when, and the ratio of the two.
- the machine: threads against usable cores (affinity, cgroup quota), other processes' load, the CPU frequency
  governor and clocks, SMT, temperatures, memory and swap; on an NVIDIA GPU (NVML, optional): clocks against
  their maximum, temperature, power against its limit, slowdown reasons, other processes.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import numpy as np

from vitbench.backends.base import (Backend, Capability, DeviceKind, StopRule, TimerKind, backend_names,
                                   backend_spec)
from vitbench.backends.spec import device_index, device_kind, device_spellings
from vitbench.errors import BackendUnavailable, ConfigError, VitbenchError, clip
from vitbench.doctor.host_checks import (
    Check,
    Status,
    check_cpu_frequency,
    check_load,
    check_memory,
    check_smt,
    check_thermal,
    check_threads,
)
from vitbench.measure.load import LoadMeter

# Relative Frobenius error of an n=512 float32-input matmul against float64, by the arithmetic that ran it:
# fp32 (24-bit significand) stays below ~1e-5, TF32 (10-bit) lands near 1e-4..1e-3, bf16 (8-bit) near 1e-3..1e-2.
FP32_MAX_REL_ERR = 1e-5
TF32_MAX_REL_ERR = 2e-3
TIMER_AGREEMENT = 0.10  # device timer and synced wall clock within 10 % of each other


def parse_device(text: str) -> tuple[DeviceKind, int]:
    """'cpu', 'gpu', 'gpu:1', 'cuda:0', 'tpu' -> (kind, index)."""
    k, index = device_kind(text), device_index(text)
    if k is None:
        raise ConfigError(f"--device {clip(repr(text), 80)}: allowed: {', '.join(device_spellings())}, each "
                          "with an optional :N (the backends' names of a device)")
    if index is None:
        raise ConfigError(f"--device {clip(repr(text), 80)}: the index after ':' is a device number, 0 or more "
                          "(e.g. gpu:1)")
    return k, index


# -----------------------------------------------------------------------------------------------------------------
# Per backend
# -----------------------------------------------------------------------------------------------------------------
def check_timing(be: Backend, precision: str, n: int, steps: int, rounds: int = 5) -> Check:
    """The backend's timer vs the host wall clock vs no sync, on windows of `steps` queued n x n matmuls,
    interleaved round by round (so a load change hits all three alike); medians over `rounds`."""
    work = be.matmul_workload(precision, n)
    timer, walls, dispatch = [], [], []
    try:
        for _ in range(2):
            work.sync(work.step())
        with LoadMeter() as load:
            for _ in range(rounds):
                timer += be.time_windows(work, steps, StopRule(min_steps=steps, min_seconds=0.0, max_seconds=60.0))
                t0 = time.perf_counter()
                outs = [work.step() for _ in range(steps)]
                t1 = time.perf_counter()
                work.sync_window(outs)
                t2 = time.perf_counter()
                dispatch.append(t1 - t0)
                walls.append(t2 - t0)
    finally:
        work.close()
    per_timer, per_wall, per_dispatch = (sorted(x)[len(x) // 2] / steps for x in (timer, walls, dispatch))
    agree = abs(per_timer / per_wall - 1) <= TIMER_AGREEMENT
    tflops = 2 * n**3 / per_timer / 1e12
    found = (
        f"{n}x{n} {precision} matmul, {steps} queued per window, median of {rounds}: {be.timer.value} "
        f"{per_timer * 1e3:.3f} ms, wall clock with sync {per_wall * 1e3:.3f} ms, without sync "
        f"{per_dispatch * 1e3:.3f} ms ({tflops:.3g} TFLOP/s)"
    )
    how = (
        "the host clock is the timer here"
        if be.timer is TimerKind.HOST_CLOCK
        else "device events time the device's own work"
    )
    why = (
        f"{how}; it must agree with the wall clock around the same steps and their sync (within "
        f"{TIMER_AGREEMENT:.0%}). "
    )
    if per_dispatch < 0.5 * per_wall:
        why += (
            f"Steps return before the device is done ({per_wall / per_dispatch:.0f}x faster without the sync): "
            "a timer without sync would flatter that much; vitbench always syncs."
        )
    else:
        why += "Steps return when the work is done (synchronous execution): the sync costs nothing here."
    if agree:
        status = Status.OK
    elif load.busy:  # the disagreement may be the other processes': not proof of a broken timer
        status = Status.WARN
        why += f" Other processes used {load.other_cores:.1f} cores meanwhile: re-run on a quiet machine."
    else:
        status = Status.FAIL
    return Check(
        f"timing [{be.name}]",
        status,
        found,
        why,
        {
            "timer": be.timer.value,
            "timer_s": per_timer,
            "wall_s": per_wall,
            "no_sync_s": per_dispatch,
            "tflops": tflops,
            "other_cores": load.other_cores,
        },
    )


def matmul_rel_error(be: Backend, precision: str, n: int = 512) -> tuple[float, dict]:
    """Relative Frobenius error of the backend's `precision` matmul against float64 on the host."""
    work = be.matmul_workload(precision, n)
    try:
        out = work.step()
        work.sync(out)
        a, b = work.operands_host()
        got = work.result_host(out).astype(np.float64)
        settings = dict(work.settings)
    finally:
        work.close()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), settings


def arithmetic_of(rel_err: float) -> str:
    if rel_err < FP32_MAX_REL_ERR:
        return "fp32"
    return "tf32-like" if rel_err < TF32_MAX_REL_ERR else "bf16-like"


def check_precision(be: Backend, before: str | None, precisions: tuple[str, ...]) -> Check:
    parts, data, status = [], {"framework_before": before}, Status.OK
    for p in precisions:
        err, settings = matmul_rel_error(be, p)
        got = arithmetic_of(err)
        data[p] = {"rel_err": err, "arithmetic": got, "settings": settings}
        parts.append(f"{p}: {settings.get('framework')} -> rel. error {err:.1e} vs float64 ({got})")
        if p == "fp32" and got != "fp32":
            status = Status.FAIL
    found = f"in force before vitbench: {before or 'n/a'}; " + "; ".join(parts)
    why = (
        "'fp32' must be full fp32 on every backend, or comparing two backends compares different arithmetic "
        "(frameworks' defaults differ: TF32 matmuls or convolutions on NVIDIA GPUs, bf16 passes on TPUs; see "
        "each backend's 'in force before vitbench'). vitbench sets the precision for every step and records "
        "it; the error against float64 shows what the hardware actually did."
    )
    return Check(f"matmul precision [{be.name}]", status, found, why, data)


# The least share of the peak this run's matmul may reach before the peak check warns: the datasheet branch's
# (a large matmul usually reaches 60-90 % of a datasheet peak); a measured peak is the best this machine showed,
# so a run at under half of it says the machine, or the peak, is not what it was (the measured branch rated a
# peak 200 times this run's matmul ok: a cache shared between machines of one name)
MIN_PEAK_SHARE = 0.5


def check_peak(be: Backend, precision: str, threads: int | None, measured: dict[str, float]) -> Check:
    from vitbench.measure.datasheet import lookup
    from vitbench.measure.peak import PeakSource, device_peak

    device = be.device_info()
    peak = device_peak(be, precision, threads, remeasure_provisional=True)
    row = lookup(device.name)
    shown = max(measured.values()) if measured else None
    if peak is None:
        return Check(
            "peak",
            Status.WARN,
            f"no peak for {device.name} {precision}",
            "Without a peak there is no MFU; no backend here can measure one.",
        )
    if peak.source is PeakSource.DATASHEET:
        ratio = shown / peak.tflops if shown else None
        found = (
            f"{device.name}: datasheet {peak.tflops:g} TFLOP/s {precision} dense ({peak.by}); the timing "
            f"check's matmul reached {shown:.3g} TFLOP/s" + (f" = {ratio:.0%} of it" if ratio else "")
            if shown
            else f"{device.name}: datasheet {peak.tflops:g} TFLOP/s {precision} dense ({peak.by})"
        )
        status = Status.WARN if ratio is not None and (ratio > 1.0 or ratio < MIN_PEAK_SHARE) else Status.OK
        why = (
            "MFU divides by the datasheet's dense peak at boost clock: one number for every framework. A large "
            "matmul usually reaches 60-90 % of it; far less means clocks held down (power, heat) or a "
            "mismatched precision; more than 100 % means the wrong datasheet row or a faster precision in force."
        )
        return Check(
            "peak",
            status,
            found,
            why,
            {**peak.metrics(), "matmul_tflops": measured, "datasheet_row": row.device if row else None},
        )
    ratio = shown / peak.tflops if shown else None
    below = ratio is not None and ratio < MIN_PEAK_SHARE
    found = (
        f"{device.name}: no datasheet figure for {precision}; measured peak {peak.tflops:.3g} TFLOP/s, the "
        f"best matmul any backend showed here (by {peak.by} at {peak.at})"
        + ("; provisional: measured while the machine was busy" if peak.provisional else "")
        + ("; this run's matmuls: " + ", ".join(f"{b} {v:.3g}" for b, v in measured.items()) if measured else "")
        + (f" = {ratio:.0%} of the peak: this machine is slower now than when the peak was measured (busy, "
           "throttled), or the peak is another machine's (a cache directory shared between machines of one "
           "name); `vitbench env --refresh` re-measures it" if below else "")
    )
    why = (
        "Without a datasheet the MFU denominator is the best dense matmul any backend has shown on this device, "
        "precision and thread count (several sizes, cached per machine): one number for every framework, "
        "raised whenever a backend, a calibration or a model step shows more. `vitbench env --refresh` "
        "re-measures."
    )
    return Check(
        "peak",
        Status.WARN if peak.provisional or below else Status.OK,
        found,
        why,
        {**peak.metrics(), "matmul_tflops": measured},
    )


def check_gpu(be: Backend) -> Check:
    from vitbench.measure.nvml import Nvml, NvmlUnavailable

    device = be.device_info()
    if device.kind is not DeviceKind.GPU:
        return Check(
            "gpu",
            Status.SKIP,
            f"no GPU ({device.kind.value} device)",
            "GPU clocks, power, temperature and energy come from NVML on an NVIDIA GPU.",
        )
    try:
        nv = Nvml.open(device)
    except NvmlUnavailable as e:
        return Check(
            "gpu",
            Status.WARN,
            f"{device.name}: {e}",
            "Without NVML vitbench cannot see the GPU's clocks, "
            "temperature, slowdowns, device-used memory or energy (pip install nvidia-ml-py).",
        )
    try:
        s = nv.snapshot()
    finally:
        nv.close()
    found = (
        f"{device.name}: SM clock {s.sm_clock_mhz} of max {s.sm_clock_max_mhz} MHz, {s.temperature_c} C, "
        f"power {s.power_w} W of limit {s.power_limit_w} W, used {s.used_mib} MiB"
        + (f", slowdown: {', '.join(s.slowdown)}" if s.slowdown else "")
        + (f", {s.other_processes} other process(es)" if s.other_processes else "")
    )
    status = Status.WARN if s.slowdown or s.other_processes else Status.OK
    why = (
        "A GPU held below its maximum clock by heat or a hardware signal runs slower than its datasheet; other "
        "processes share its SMs and memory. An idle GPU shows low clocks: that is not a problem."
    )
    return Check("gpu", status, found, why, asdict(s))


# -----------------------------------------------------------------------------------------------------------------
# All of it
# -----------------------------------------------------------------------------------------------------------------
def run(
    device: str = "cpu",
    threads: int | None = None,
    precision: str = "fp32",
    backends: list[str] | None = None,
    quick: bool = False,
) -> list[Check]:
    """Every check for `device` on every backend that can run there (or those named)."""
    from vitbench.backends.base import get_backend
    from vitbench.registry import Kind, entry

    kind, index = parse_device(device)
    names = backends or [n for n in backend_names() if not entry(Kind.BACKEND, n).missing()]
    unknown = [n for n in names if n not in backend_names()]
    if unknown:
        raise ConfigError(f"--backend {unknown[0]!r}: allowed: {', '.join(backend_names())}")
    matmul = [n for n in names if Capability.MATMUL_PEAK in backend_spec(n).capabilities]
    allowed = tuple(dict.fromkeys(p for n in matmul for p in backend_spec(n).precisions))
    if matmul and precision not in allowed:  # int8: a runtime's quantised inference, not a matmul timed here
        raise ConfigError(f"--precision {precision!r}: allowed: {', '.join(allowed)} (the precisions of "
                          f"{', '.join(matmul) or 'no backend'} that time a matmul)")
    from vitbench.measure.peak import current_policy

    # the size the sweep's calibration times (PeakPolicy.calibration_n: a GPU needs a large matmul to fill it and
    # to outlast the timer's resolution), so doctor's figure is the one compare --normalize divides by
    n = current_policy().calibration_n(kind)
    checks = [check_load(0.5 if quick else 1.0)]
    threads_used: dict[str, int | None] = {}
    threads_chosen: dict[str, str | None] = {}
    measured: dict[str, float] = {}
    first: tuple[Backend, int | None] | None = None
    failed: list[str] = []  # backends that could not start on the device, and why
    models_only: list[str] = []  # backends that run there but time no matmul of their own (runtimes)
    for name in names:
        spec = backend_spec(name)
        dev = spec.device_string(kind, index)
        if dev is None or Capability.MATMUL_PEAK not in spec.capabilities:
            checks.append(
                Check(
                    f"backend [{name}]",
                    Status.SKIP,
                    f"times no matmul of its own on a {kind.value}" if dev is not None
                    else f"does not run on a {kind.value}",
                    "The checks time each backend's own matrix multiply; a backend that runs models only (a "
                    "deployment runtime) is checked by `vitbench bench --backend`." if dev is not None
                    else "Only backends that run on the device are checked.",
                )
            )
            failed.append(f"{name}: times no matmul of its own on a {kind.value}" if dev is not None
                          else f"{name}: does not run on a {kind.value}")
            models_only += [name] if dev is not None else []
            continue
        problems = spec.problems({"precision": precision, "device": dev})
        if problems:  # tf32 on a CPU, a precision this backend does not run
            why = "; ".join(msg for _, msg in problems)
            checks.append(Check(f"backend [{name}]", Status.SKIP, f"cannot run {precision} on {dev}: {why}",
                                "Only backends that run the precision asked for on the device are checked."))
            failed.append(f"{name}: {clip(why, 300)}")
            continue
        try:
            be = get_backend(name)
            before = be.numerics_in_force()  # nothing set yet in this process: the framework's own defaults
            info = be.setup(dev, threads)
        except VitbenchError as e:  # not installed, no such device, thread pools fixed already, ...
            checks.append(Check(f"backend [{name}]", Status.WARN, f"cannot run on {dev}: {e}",
                                "Only backends that can start on the device are checked."))
            failed.append(f"{name}: {clip(str(e), 300)}")
            continue
        threads_used[name], threads_chosen[name] = info.get("threads"), info.get("threads_chosen")
        first = first or (be, info.get("threads"))
        try:
            t = check_timing(be, precision, n, steps=3 if quick else 5)
            measured[name] = t.data["tflops"]
            checks.append(t)
            precs = tuple(
                p
                for p in ("fp32", "tf32")
                if p in spec.precisions and not spec.problems({"precision": p, "device": dev})
            )
            checks.append(check_precision(be, before, precs))
        except NotImplementedError:
            checks.append(
                Check(
                    f"timing [{name}]",
                    Status.SKIP,
                    "no matmul workload",
                    "The backend does not offer one; its steps are timed by its own timer.",
                )
            )
    if first is None and models_only == list(names):  # the device is fine: these backends have nothing to time
        raise BackendUnavailable(f"--backend {', '.join(names)}: doctor checks a device by timing each backend's "
                                 f"own matrix multiply, and {'it times' if len(names) == 1 else 'they time'} none "
                                 f"(a deployment runtime runs models only: `vitbench bench MODEL --backend "
                                 f"{names[0]}` times its steps; doctor the device with a backend that times one)")
    if first is None:  # nothing could be checked there: not a finding about the device, a device not here
        raise BackendUnavailable(f"--device {device}: no backend can run there"
                                 + (f" ({'; '.join(failed)})" if failed else
                                    f" (none of {', '.join(names)} runs on a {kind.value})"))
    checks.insert(1, check_threads(threads_used, checks[0].data.get("other_cores"), threads_chosen))
    if first is not None:
        checks.append(check_peak(first[0], precision, first[1], measured))
        checks.append(check_gpu(first[0]))
    checks += [check_cpu_frequency(), check_smt(), check_thermal(), check_memory()]
    return checks
