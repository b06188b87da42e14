"""The largest batch that fits: exponential probe, then bisection to an exact boundary.

Each probe runs in a fresh Python process (`python -m vitbench.measure.probe`), so allocator state, caches and
fragmentation never leak from one probe into the next. A probe fits when its steps complete without an
out-of-memory error (CUDA: torch.cuda.OutOfMemoryError / XLA RESOURCE_EXHAUSTED) and, when a memory budget is
set, its peak stays within it. On CPU there is no OOM before the kernel kills the process, so a budget is always
in force there (default: half of the memory available when the search starts) and the parent watches the probe's
resident memory, killing it the moment it passes the budget: a search never takes the machine down.
"""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import psutil

from vitbench import memory_budget
from vitbench.backends.base import Step, default_backend
from vitbench.env import environment
from vitbench.errors import ConfigError
from vitbench.measure.throughput import resolve_step, step_config
from vitbench.procmem import last_marked
from vitbench.record import ErrorInfo, Record, Status, now

KIND = "max_batch"

PROBE_MARK = "VITBENCH_PROBE "


class ProbeStatus(str, enum.Enum):
    """How a probe ended; only OK fits."""

    OK = "ok"
    OVER_BUDGET = "over_budget"  # finished, but its process peak passed the budget
    KILLED_OVER_BUDGET = "killed_over_budget"  # killed the moment its resident memory passed the budget
    OOM = "oom"  # the framework's out-of-memory error, or the kernel's kill
    TIMEOUT = "timeout"
    ERROR = "error"  # crashed for another reason
    UNAVAILABLE = "unavailable"  # the backend or device is not here: no probe can fit, the search is refused

    def __str__(self) -> str:
        return self.value

    @property
    def over_budget(self) -> bool:
        return self in (ProbeStatus.OVER_BUDGET, ProbeStatus.KILLED_OVER_BUDGET)


@dataclass
class Probe:
    """One probe: did `batch` fit, and how do we know."""

    batch: int
    fits: bool
    status: ProbeStatus
    peak_mem_mib: float | None = None  # measurement's own peak (allocator peak, or RSS growth on CPU)
    process_peak_mib: float | None = None  # whole-process peak the budget is compared to
    seconds: float = 0.0
    error: str | None = None


def search(fits: Callable[[int], Probe], start: int = 1, limit: int = 4096,
           granularity: int = 1) -> tuple[int, list[Probe]]:
    """Largest b in [0, limit] with fits(b), assuming fitting is monotone in b.

    Doubles from `start` until a probe fails (or `limit` fits), then bisects until the fitting and failing
    batches are `granularity` apart. Returns (largest fitting batch or 0, every probe in order).
    """
    if start < 1 or limit < start or granularity < 1:
        raise ConfigError(f"need 1 <= start ({start}) <= limit ({limit}) and granularity >= 1 ({granularity})")
    probes: list[Probe] = []

    def attempt(b: int) -> bool:
        p = fits(b)
        probes.append(p)
        return p.fits

    lo, b = 0, start
    while True:
        if attempt(b):
            lo = b
            if b >= limit:
                return lo, probes  # capped: even the limit fits
            b = min(2 * b, limit)
        else:
            hi = b
            break
    while hi - lo > granularity:
        mid = lo + max(granularity, ((hi - lo) // 2) // granularity * granularity)
        if mid >= hi:
            break
        if attempt(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes


def _tree_rss_mib(proc: psutil.Process) -> float:
    try:
        procs = [proc, *proc.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs) / 2**20
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def run_probe(step: Step, batch: int, backend: str | None = None, device: str = "cpu", threads: int | None = None,
              budget_mib: float | None = None, timeout_s: float = 600.0, steps: int = 2,
              poll_s: float = 0.02) -> Probe:
    """Run one probe in a fresh process; kill it if its resident memory passes `budget_mib`."""
    # `batch` is per device: a probe of an N-device step runs the global batch N x batch
    payload = json.dumps({"step": {**step.to_dict(), "batch_size": batch * step.devices}, "backend": backend or default_backend(),
                          "device": device,
                          "threads": threads, "steps": steps, "parent_pid": os.getpid()})
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    killed = None
    # Output goes to files, not pipes: a chatty child can never block on a full pipe while we poll it.
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        proc = subprocess.Popen([sys.executable, "-m", "vitbench.measure.probe", payload],
                                stdin=subprocess.DEVNULL, stdout=fout, stderr=ferr, text=True, env=env)
        try:
            ps = psutil.Process(proc.pid)
            while proc.poll() is None:
                if budget_mib is not None and device == "cpu" and _tree_rss_mib(ps) > budget_mib:
                    killed = ProbeStatus.KILLED_OVER_BUDGET
                elif time.perf_counter() - t0 > timeout_s:
                    killed = ProbeStatus.TIMEOUT
                if killed:
                    break
                time.sleep(poll_s)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read(), ferr.read()
    seconds = time.perf_counter() - t0
    if killed:
        return Probe(batch, False, killed, seconds=seconds,
                     error=f"probe passed the {budget_mib:.0f} MiB budget" if killed.over_budget else
                     f"probe took longer than {timeout_s:.0f} s")
    result = last_marked(out, PROBE_MARK)
    if result is None:
        tail = "\n".join(err.strip().splitlines()[-5:])
        oom = "out of memory" in err.lower() or proc.returncode in (-9, 137)
        return Probe(batch, False, ProbeStatus.OOM if oom else ProbeStatus.ERROR, seconds=seconds,
                     error=tail or f"probe exited with code {proc.returncode}")
    status = ProbeStatus(result["status"])
    fits = status is ProbeStatus.OK
    if fits and budget_mib is not None and result["process_peak_mib"] > budget_mib:
        fits, status = False, ProbeStatus.OVER_BUDGET
    return Probe(batch, fits, status, result.get("peak_mem_mib"), result.get("process_peak_mib"), seconds,
                 result.get("error"))


def default_budget_mib(device: str) -> float | None:
    """CPU: the host-memory budget of every vitbench process (vitbench.memory_budget: $VITBENCH_MEMORY_LIMIT_GIB,
    else half the memory available now; the OS kills, it does not raise); accelerators: the real OOM."""
    return memory_budget.budget_mib() if device == "cpu" else None


def _refuse_unavailable(probe: Probe) -> Probe:
    if probe.status is ProbeStatus.UNAVAILABLE:  # e.g. --device cuda on a machine without one: bad input
        raise ConfigError(probe.error or "the backend or device is not available here")
    return probe


def nothing_fits_hint(probes: list[Probe], budget_mib: float | None) -> str | None:
    """Why the answer is 0 when the first probe already passed the budget: a budget below what the framework and
    the model take at the smallest batch answers 0 for every model (say so, and how to change it)."""
    if not probes or not probes[0].status.over_budget or budget_mib is None:
        return None
    p = probes[0]
    reached = f" (its process reached {p.process_peak_mib:.0f} MiB)" if p.process_peak_mib else ""
    return (f"batch {p.batch} already passed the {budget_mib:.0f} MiB budget{reached}: the budget is below what "
            f"the framework and this model take at the smallest batch; raise --memory-limit-gib "
            f"(or ${memory_budget.ENV})")


def max_batch(step: Step, backend: str | None = None, device: str = "cpu", threads: int | None = None,
              memory_limit_gib: float | None = None, max_batch_size: int = 4096, start: int = 1,
              granularity: int = 1, probe_timeout_s: float = 600.0) -> Record:
    """Record of kind 'max_batch': the largest batch for `step` (its batch_size is ignored) and every probe; with
    `step.devices` > 1 the batch searched (and reported) is per device, each probe running the N-device step."""
    started = now()
    step = resolve_step(step)
    backend = backend or default_backend()
    if memory_limit_gib is not None and memory_limit_gib <= 0:
        raise ConfigError(f"--memory-limit-gib must be positive, got {memory_limit_gib}")
    budget = memory_limit_gib * 1024 if memory_limit_gib is not None else default_budget_mib(device)
    best, probes = search(
        lambda b: _refuse_unavailable(run_probe(step, b, backend, device, threads, budget, probe_timeout_s)),
        start=start, limit=max_batch_size, granularity=granularity)
    at_best = next((p for p in reversed(probes) if p.batch == best and p.fits), None)
    errors = [p for p in probes if p.status is ProbeStatus.ERROR]
    config = {**step_config(backend, step, device, threads), "memory_limit_mib": budget,
              "granularity": granularity, "max_batch_size_cap": max_batch_size}
    config.pop("batch_size")
    metrics = {
        "max_batch_size": best,  # per device
        "max_batch_size_global": best * step.devices,
        "capped": best >= max_batch_size,
        "probes": len(probes),
        "peak_mem_mib": at_best.peak_mem_mib if at_best else None,
        "process_peak_mib": at_best.process_peak_mib if at_best else None,
        "memory_limit_mib": budget,
        "search_s": sum(p.seconds for p in probes),
    }
    hint = nothing_fits_hint(probes, budget) if best == 0 else None
    if hint:
        metrics["note"] = hint
    status, error = Status.OK, None
    if best == 0 and errors:  # nothing fitted because probes crashed, not because memory ran out
        status, error = Status.ERROR, ErrorInfo("ProbeError", errors[-1].error or "", errors[-1].error)
    return Record.measured(KIND, config, metrics=metrics, raw={"probes": [asdict(p) for p in probes]},
                           env=environment({"backend": backend, "device": device}), status=status,
                           error=error, started_at=started)
