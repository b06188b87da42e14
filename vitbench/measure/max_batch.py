"""The largest batch that fits: exponential probe, then bisection to an exact boundary.

Each probe runs in a fresh process (vitbench.measure.probe.child), so allocator state, caches and fragmentation
never leak from one probe into the next: a fork of a fork server that imported the backend's preload list and
nothing else (vitbench.forkservers; a trial's own server when the search runs in a trial, else one started for the
search), so a probe pays neither the interpreter's start nor the framework's import. A probe fits when its steps
complete without an out-of-memory error (CUDA: torch.cuda.OutOfMemoryError / XLA RESOURCE_EXHAUSTED) and, when a
memory budget is set, its peak stays within it. On CPU there is no OOM before the kernel kills the process, so a
budget is always in force there (default: half of the memory available when the search starts) and the parent
watches the probe's resident memory, killing it the moment it passes the budget: a search never takes the machine
down.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.connection
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from dataclasses import asdict, dataclass

import psutil

from vitbench import forkservers, memory_budget
from vitbench.backends.base import Step, backend_spec, default_backend
from vitbench.env import environment
from vitbench.errors import ConfigError, clip
from vitbench.measure.probe import ProbeStatus, child, ended_out_of_memory
from vitbench.measure.throughput import resolve_step, step_config
from vitbench.record import ErrorInfo, Record, Status, now

KIND = "max_batch"


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


def probe_start_method() -> str:
    """How probes start here: 'forkserver' (a fork of a server whose imports are done) or 'spawn' (where vitbench
    forks nothing from servers, forkservers.unavailable: no fork server, or macOS): a fresh interpreter, its
    framework imported in the probe, whose resident memory, and so the budget's verdict, then holds the imports
    too (a review measured a batch-32 probe at 784 MiB spawned, 543 MiB forked)."""
    return "spawn" if forkservers.unavailable else "forkserver"


def _probe_process(req: dict, result: Path, log: Path) -> mp.process.BaseProcess:
    """The probe's process, not started: a fork of the server that forked this process (a trial's: its backend's
    imports done) or of this process's server for the backend's preload list, ended with this process
    (forkservers.process); spawned where vitbench forks nothing from servers (forkservers.unavailable: Windows, a
    Python without what the servers use, and macOS, where forking from a server that imported torch or JAX is
    unsafe: forkservers.ON_MACOS)."""
    args = (req, str(result), str(log))
    if probe_start_method() == "spawn":
        return mp.get_context("spawn").Process(target=child, args=args)
    preload = (*backend_spec(req["backend"]).preload, "vitbench.measure.probe")
    return forkservers.process(preload, child, args, name=f"vitbench-probe-{req['step']['batch_size']}",
                               reuse_parent=True)


def run_probe(step: Step, batch: int, backend: str | None = None, device: str = "cpu", threads: int | None = None,
              budget_mib: float | None = None, timeout_s: float = 600.0, steps: int = 2,
              poll_s: float = 0.02) -> Probe:
    """Run one probe in a fresh process; kill it if its resident memory passes `budget_mib`."""
    # `batch` is per device: a probe of an N-device step runs the global batch N x batch
    req = {"step": {**step.to_dict(), "batch_size": batch * step.devices}, "backend": backend or default_backend(),
           "device": device, "threads": threads, "steps": steps}
    t0 = time.perf_counter()
    killed = None
    # Output goes to a file, not a pipe: a chatty child can never block on a full pipe while we poll it.
    with tempfile.TemporaryDirectory(prefix="vitbench-probe-") as tmp:
        result, log = Path(tmp) / "result.json", Path(tmp) / "probe.log"
        proc = _probe_process(req, result, log)
        try:
            proc.start()
            # the timeout counts from here: starting a fork server (its torch import, seconds) is not the probe's
            # (a timeout of 2 s failed batch 1 of every model, reported as nothing fits)
            started = time.perf_counter()
            memory_budget.watch_apart(proc.pid)  # watched here, against the budget: not by this command's guard
            tree = memory_budget.TreeMemory(proc.pid)  # the probe and its ranks
            while proc.exitcode is None:
                if budget_mib is not None and device == "cpu" and (tree.mib() or 0.0) > budget_mib:
                    killed = ProbeStatus.KILLED_OVER_BUDGET
                elif time.perf_counter() - started > timeout_s:
                    killed = ProbeStatus.TIMEOUT
                if killed:
                    break
                mp.connection.wait([proc.sentinel], timeout=poll_s)
        finally:
            if proc.pid is not None and proc.exitcode is None:
                _kill_tree(proc)
            if proc.pid is not None:
                proc.join(0)  # reaped (a forked probe's requester pipe let go with it)
            if proc.pid is not None:
                memory_budget.end_apart(proc.pid)
        out = json.loads(result.read_text()) if result.exists() else None
        err = log.read_text(errors="replace") if log.exists() else ""
    seconds = time.perf_counter() - t0
    if killed:
        return Probe(batch, False, killed, seconds=seconds,
                     error=f"probe passed the {budget_mib:.0f} MiB budget" if killed.over_budget else
                     f"probe took longer than {timeout_s:g} s")
    if out is None:
        tail = "\n".join(err.strip().splitlines()[-5:])
        oom = ended_out_of_memory(err, proc.exitcode)
        return Probe(batch, False, ProbeStatus.OOM if oom else ProbeStatus.ERROR, seconds=seconds,
                     error=tail or f"probe exited with code {proc.exitcode}")
    status = ProbeStatus(out["status"])
    fits = status is ProbeStatus.OK
    if fits and budget_mib is not None and out["process_peak_mib"] > budget_mib:
        fits, status = False, ProbeStatus.OVER_BUDGET
    return Probe(batch, fits, status, out.get("peak_mem_mib"), out.get("process_peak_mib"), seconds,
                 out.get("error"))


def _kill_tree(proc) -> None:
    """SIGKILL a probe and the processes it started (an N-device probe's ranks), then reap it."""
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    proc.kill()
    proc.join()
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass


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
            f"the framework and this model take at the smallest batch; raise --memory-limit-gib (a study's "
            f"memory_limit_gib; or ${memory_budget.ENV})")


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
        "probe_start_method": probe_start_method(),  # what a probe's process memory holds beside the step
        "search_s": sum(p.seconds for p in probes),
    }
    hint = nothing_fits_hint(probes, budget) if best == 0 else None
    if hint:
        metrics["note"] = hint
    # what set the limit: the smallest batch that did not fit (memory: oom, over_budget; or not memory)
    bound = min((p for p in probes if not p.fits), key=lambda p: p.batch, default=None)
    metrics["limited_by"] = ("cap" if bound is None else  # killed or measured past the budget: one cause
                             str(ProbeStatus.OVER_BUDGET if bound.status.over_budget else bound.status))
    status, error = Status.OK, None
    if bound is not None and bound.status is ProbeStatus.ERROR:
        # crashed for another reason than memory (a kernel's size limit, a bug): the largest batch that *fits* is
        # not known, and `best` below it is no measure of memory
        status, error = Status.ERROR, ErrorInfo(
            "ProbeError", f"batch {bound.batch} failed for a reason other than memory, so the largest batch that "
            f"fits is not known (largest that ran: {best}): {clip(bound.error or '', 300)}", bound.error)
    elif best == 0 and errors:  # nothing fitted because probes crashed, not because memory ran out
        status, error = Status.ERROR, ErrorInfo("ProbeError", errors[-1].error or "", errors[-1].error)
    elif best == 0 and bound is not None and bound.status is ProbeStatus.TIMEOUT:  # time, not memory: no oom
        status, error = Status.ERROR, ErrorInfo(
            "ProbeTimeout", f"batch {bound.batch} ran past the probe's {probe_timeout_s:g} s before any batch "
            "was measured: the search is bounded by time here, not memory; raise --probe-timeout-s", bound.error)
    elif best == 0:  # nothing fits: no largest batch was measured (an empty measure is no ok row)
        detail = f": {clip(bound.error, 300)}" if bound.error else ""
        why = hint or f"batch {bound.batch} did not fit ({bound.status}){detail}"
        status, error = Status.OOM, ErrorInfo("NothingFits", f"nothing fits: {why}", bound.error)
    elif bound is not None and bound.status is ProbeStatus.TIMEOUT:
        metrics["limit_note"] = (f"batch {bound.batch} ran past the probe's {probe_timeout_s:g} s: the largest "
                                 "batch is bounded by time here, not memory (--probe-timeout-s)")
    return Record.measured(KIND, config, metrics=metrics, raw={"probes": [asdict(p) for p in probes]},
                           env=environment({"backend": backend, "device": device}), status=status,
                           error=error, started_at=started)
