"""Child process of a max-batch probe: run `steps` steps at one batch size, print one JSON result line.

Input (argv[1], JSON): {"step": Step fields, "backend": name, "device": ..., "threads": ..., "steps": n}. Output:
a line starting with PROBE_MARK carrying status ok|oom|error, the measurement's peak memory and the whole
process's peak.
"""

from __future__ import annotations

import json
import os
import sys

from vitbench.procmem import die_with_parent


def probe(req: dict) -> dict:
    """Run the request's steps here; the result line's fields."""
    from vitbench.backends.base import Step, get_backend
    from vitbench.errors import BackendUnavailable, ConfigError
    from vitbench.measure.max_batch import ProbeStatus

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
        result["status"] = ProbeStatus.OOM if be.is_oom(e) else ProbeStatus.ERROR
        result["error"] = f"{type(e).__name__}: {str(e)[:500]}"
    result["process_peak_mib"] = be.process_peak_mib()
    return result


def _group_probe(req: dict) -> dict:
    """A probe of an N-device step on a process-per-device backend: N ranks (vitbench.measure.ranks), each a
    `probe`. The worst rank's status; peak_mem_mib: the largest rank's (memory of one device); process_peak_mib:
    the ranks' sum (they share the host, where the budget applies)."""
    from vitbench.measure.max_batch import ProbeStatus
    from vitbench.measure.ranks import RankFailed, run_group

    try:
        results = run_group("vitbench.measure.probe:probe", {"req": req}, req["step"]["devices"])
    except RankFailed as e:
        return {"status": ProbeStatus.ERROR, "batch": req["step"]["batch_size"], "error": str(e)[:1000],
                "process_peak_mib": None}
    bad = [r for r in results if r["status"] != ProbeStatus.OK]
    out = dict(bad[0] if bad else results[0])
    peaks = [r.get("peak_mem_mib") for r in results if r.get("peak_mem_mib") is not None]
    procs = [r.get("process_peak_mib") for r in results if r.get("process_peak_mib") is not None]
    out["peak_mem_mib"] = max(peaks) if peaks else None
    out["process_peak_mib"] = sum(procs) if procs else None
    return out


def main() -> int:
    from vitbench.measure.max_batch import PROBE_MARK

    req = json.loads(sys.argv[1])
    # A killed search leaves no probe behind: die with the parent (armed here, not in a preexec_fn, which is
    # unsafe in a multithreaded parent), and give up if the parent is already gone.
    die_with_parent()
    if req.get("parent_pid") and os.getppid() != req["parent_pid"]:
        return 1
    from vitbench.backends.base import Step
    from vitbench.measure import group

    step = Step(**req["step"])
    result = _group_probe(req) if group.launches_ranks(step, req["backend"]) else probe(req)
    print(PROBE_MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
