"""The process of one max-batch probe: run `steps` steps at one batch size, write one JSON result.

Input (a dict): {"step": Step fields, "backend": name, "device": ..., "threads": ..., "steps": n}. Output, in
the result file: status ok|oom|error, the measurement's peak memory and the whole process's peak. `child` is the
probe process's entry point: vitbench.measure.max_batch.run_probe forks it from a fork server.
"""

from __future__ import annotations

import enum
import json
import os
import sys

from vitbench.errors import looks_like_oom
from vitbench.procmem import die_with_parent


# How a process the kernel's out-of-memory killer ended exits: SIGKILL (-9 from Python's exit code; 137 = 128 + 9
# where a shell reports it). A probe (or a group's rank) that ends so ran out of host memory.
OOM_KILLED = (-9, 137)


def ended_out_of_memory(said: BaseException | str, code: int | None) -> bool:
    """Did a probe's process (or a group's rank) that failed run out of memory: what it said names an allocation
    failure (errors.looks_like_oom), or the kernel's out-of-memory killer ended it (`code`, OOM_KILLED)."""
    return looks_like_oom(said if isinstance(said, BaseException) else RuntimeError(said)) or code in OOM_KILLED


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


def probe(req: dict) -> dict:
    """Run the request's steps here; the result line's fields."""
    from vitbench.backends.base import Step, get_backend
    from vitbench.errors import BackendUnavailable, ConfigError

    step = Step(**req["step"])
    try:
        be = get_backend(req["backend"])
        from vitbench.measure.group import setup

        setup(be, req.get("device", "cpu"), req.get("threads"), step)
    except (BackendUnavailable, ConfigError) as e:  # not here at all: the search stops (bad input, exit 2)
        return {"status": ProbeStatus.UNAVAILABLE, "batch": step.batch_size, "error": str(e)[:1000],
                "process_peak_mib": None}
    result: dict = {"status": ProbeStatus.OK, "batch": step.batch_size}
    try:
        be.reset_peak_memory()
        work = be.prepare(step)
        for _ in range(req.get("steps", 2)):  # two steps: the optimizer state exists from step one on
            work.sync(work.step())
        result["peak_mem_mib"] = be.peak_memory_mib()
    except Exception as e:  # noqa: BLE001 - report, never crash silently
        from vitbench.measure import ranks

        if ranks.in_group():  # a rank that returned would leave its peers waiting in a collective: it fails, they
            raise             # are stopped at once, and _group_probe reads what it raised
        result["status"] = ProbeStatus.OOM if be.is_oom(e) else ProbeStatus.ERROR
        result["error"] = f"{type(e).__name__}: {str(e)[:500]}"
    result["process_peak_mib"] = be.process_peak_mib()
    return result


def _group_probe(req: dict) -> dict:
    """A probe of an N-device step on a process-per-device backend: N ranks (vitbench.measure.ranks), each a
    `probe`. The worst rank's status; peak_mem_mib: the largest rank's (memory of one device); process_peak_mib:
    the ranks' sum (they share the host, where the budget applies)."""
    from vitbench.measure.ranks import RankFailed, run_group

    try:
        results = run_group("vitbench.measure.probe:probe", {"req": req}, req["step"]["devices"])
    except RankFailed as e:  # a rank out of memory fails the group with what it raised (probe, above)
        return {"status": ProbeStatus.OOM if ended_out_of_memory(e, e.code) else ProbeStatus.ERROR,
                "batch": req["step"]["batch_size"], "error": str(e)[:1000], "process_peak_mib": None}
    bad = [r for r in results if r["status"] != ProbeStatus.OK]
    out = dict(bad[0] if bad else results[0])
    peaks = [r.get("peak_mem_mib") for r in results if r.get("peak_mem_mib") is not None]
    procs = [r.get("process_peak_mib") for r in results if r.get("process_peak_mib") is not None]
    out["peak_mem_mib"] = max(peaks) if peaks else None
    out["process_peak_mib"] = sum(procs) if procs else None
    return out


def _run(req: dict) -> dict:
    from vitbench.backends.base import Step
    from vitbench.measure import group

    step = Step(**req["step"])
    return _group_probe(req) if group.launches_ranks(step, req["backend"]) else probe(req)


def child(req: dict, result_path: str, log_path: str) -> None:
    """Entry point of a probe process forked from a fork server (ended with its search: forkservers.process) or
    spawned by the search: output to `log_path`, the result as JSON to `result_path` (written whole: a temporary
    file, then renamed)."""
    die_with_parent()  # a spawned probe's parent is its search
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    result = _run(req)
    with open(result_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(result_path + ".tmp", result_path)
    sys.stdout.flush()
    sys.stderr.flush()
