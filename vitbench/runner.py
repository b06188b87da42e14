"""Run a study: expand it, skip what is done, hand the rest to an executor, store every record as it arrives.

Order: the study's trials are already interleaved (repeat index outermost). Each run first measures a
calibration workload per (backend, device) in the study — the device's dense-matmul throughput, in a fresh
process like any trial — stored as kind='calibration' with this run's `run_id`, so `vitbench compare
--normalize` can divide machine speed out (issue 6).

Resume: a trial whose key already has a record with a terminal status (ok, oom, error, timeout) is skipped;
'interrupted' trials run again. `force=True` re-runs everything (the newer row supersedes the older one on load);
`retry_failed=True` re-runs every trial whose latest row is not 'ok'.

Concurrency: before a trial runs, the runner claims its key in the store (a non-blocking flock, released when
the trial's row is written or when the process dies) and re-reads the store; a trial another sweep is running,
or has just finished, is skipped. So two sweeps on one directory split the work instead of duplicating it.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vitbench.executors import Executor, get_executor
from vitbench.store import DONE_STATUSES, Store
from vitbench.study import Study, Trial, trial_key

RESULTS_ROOT = "results"


def default_results_dir(study: Study) -> Path:
    return Path(RESULTS_ROOT) / study.name


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


@dataclass
class SweepSummary:
    """What a sweep did: counts by status, trials skipped as done or claimed elsewhere, wall time."""

    run_id: str
    results_dir: Path
    planned: int = 0  # trials in the study (all repeats)
    skipped_done: int = 0
    skipped_claimed: int = 0
    ran: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    calibrations: int = 0
    wall_s: float = 0.0
    interrupted: bool = False

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.statuses.items() if s != "ok")


class SweepHooks:
    """Callbacks for progress display (the CLI renders them; the library never prints)."""

    def planned(self, todo: list[Trial], summary: SweepSummary) -> None: ...

    def started(self, trial: Trial | None, job: dict) -> None: ...

    def finished(self, trial: Trial | None, record: dict) -> None: ...


def plan(study: Study, store: Store, force: bool = False, retry_failed: bool = False) -> list[Trial]:
    """Trials still to run, in study order."""
    if force:
        return list(study.trials)
    statuses = {"ok"} if retry_failed else DONE_STATUSES
    done = store.done_keys(statuses)
    return [t for t in study.trials if t.key not in done]


def trial_status(study: Study, store: Store) -> dict[str, str]:
    """Latest status per trial key of the study ('pending' when never run)."""
    latest: dict[str, str] = {}
    for r in store.refresh():
        if r.get("key") and r.get("kind") != "calibration":
            latest[r["key"]] = r.get("status", "?")
    return {t.key: latest.get(t.key, "pending") for t in study.trials}


def _job(study: Study, run_id: str, trial: Trial, timeout_s: float) -> dict:
    from vitbench.trial import get_task

    return {"key": trial.key, "study": study.name, "study_sha": study.sha, "run_id": run_id,
            "repeat": trial.repeat, "config": trial.config, "timeout_s": timeout_s,
            "task_module": get_task(trial.task).module}


def calibration_trials(study: Study) -> list[Trial]:
    """One calibration per (backend, device, precision, threads) the study measures throughput with."""
    from vitbench.trial import get_task

    td = get_task("calibration")
    seen: dict[tuple, Trial] = {}
    for t in study.trials:
        c = t.config
        if get_task(c["task"]).kind != "bench":
            continue
        cfg = {"backend": c["backend"], "task": "calibration", "device": c.get("device", "cpu"),
               "precision": c.get("precision", "fp32"), "threads": c.get("threads"),
               **{p: d for p, (_, d) in td.params.items()}}
        ident = tuple(cfg[k] for k in ("backend", "device", "precision", "threads"))
        if ident not in seen:
            seen[ident] = Trial(trial_key(cfg, 0, td.version), cfg, 0, "calibration")
    return list(seen.values())


def run_study(study: Study, results_dir: str | os.PathLike | None = None, *, executor: Executor | str | None = None,
              force: bool = False, retry_failed: bool = False, calibration: bool | None = None,
              timeout_s: float | None = None, hooks: SweepHooks | None = None,
              executor_options: dict | None = None) -> SweepSummary:
    """Run every pending trial of `study`, storing one record per trial under `results_dir`.

    Raises KeyboardInterrupt after recording the running trial as 'interrupted' (the summary is then lost;
    everything finished is in the store)."""
    hooks = hooks or SweepHooks()
    results_dir = Path(results_dir) if results_dir else default_results_dir(study)
    store = Store(results_dir)
    run_id = new_run_id()
    summary = SweepSummary(run_id=run_id, results_dir=results_dir, planned=len(study.trials))
    t_start = time.perf_counter()
    todo = plan(study, store, force, retry_failed)
    summary.skipped_done = len(study.trials) - len(todo)
    hooks.planned(todo, summary)
    if not todo:
        summary.wall_s = time.perf_counter() - t_start
        store.close()
        return summary
    own_executor = not isinstance(executor, Executor)
    if own_executor:  # before anything is written: bad executor options leave no results directory behind
        name = executor or study.executor.name
        # the study's options belong to the study's executor; --executor NAME starts from none
        opts = {**(study.executor.options if name == study.executor.name else {}), **(executor_options or {})}
        if name == "local":
            opts.setdefault("log_dir", results_dir / "logs")
        else:  # remote workers write into the store's shards when they can see it (vitbench.executors.remote)
            opts.setdefault("results_dir", str(results_dir))
        executor = get_executor(name, **opts)
    store.save_study(study.text)
    timeout = timeout_s or study.timeout_s
    by_key = {t.key: t for t in study.trials}
    calib = calibration_trials(study) if (study.calibration if calibration is None else calibration) else []
    done_now: set[str] = set()

    def jobs() -> Iterator[dict]:
        for t in calib:
            yield {**_job(study, run_id, t, timeout), "key": f"cal-{run_id}-{t.key}"}
        for t in todo:
            if not store.claim(t.key):
                summary.skipped_claimed += 1
                continue
            if not force:
                statuses = {"ok"} if retry_failed else DONE_STATUSES
                if t.key in store.done_keys(statuses) and t.key not in done_now:
                    store.release(t.key)  # another sweep finished it meanwhile
                    summary.skipped_done += 1
                    continue
            yield _job(study, run_id, t, timeout)

    def on_start(job: dict) -> None:
        hooks.started(by_key.get(job["key"]), job)

    def on_result(job: dict, rec: dict) -> None:
        is_cal = job["key"].startswith("cal-")
        if is_cal:
            rec["key"] = None  # calibration rows are per run, never skipped as 'done'
            summary.calibrations += 1
        if not (rec.get("runner") or {}).get("stored"):  # else a worker already wrote it (a store shard)
            store.append(rec)  # durable before anything else happens
        if not is_cal:
            done_now.add(job["key"])
            store.release(job["key"])
            summary.ran += 1
            st = rec.get("status", "?")
            summary.statuses[st] = summary.statuses.get(st, 0) + 1
        hooks.finished(by_key.get(job["key"]), rec)

    try:
        executor.run(jobs(), on_start, on_result)
    except KeyboardInterrupt:
        summary.interrupted = True
        raise
    finally:
        summary.wall_s = time.perf_counter() - t_start
        if own_executor:
            executor.close()
        store.close()
    return summary
