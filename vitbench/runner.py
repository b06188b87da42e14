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

Before anything runs or is written: the executor and its options are validated (`check_executor`), and the
results directory must be a writable directory that holds no other study's results (`check_results_dir`), checked
again under a lock on the directory where the study copy is written (two studies started into one at once).
Outcome: `SweepSummary.failed_trials` lists the study's trials whose latest row is not ok (run now or found from
an earlier run), so a sweep's exit code can say whether the study succeeded (`vitbench sweep`: EXIT_FAILED).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vitbench.errors import ConfigError, shorten
from vitbench.executors import Executor, Job, Outcome, Role, Stored, executor_class
from vitbench.paths import check_cache_dir, check_dir, check_entry, compile_cache_on, make_dir
from vitbench.record import Record, Status
from vitbench.rows import RESULTS_FILE, result_files
from vitbench.store import CLAIMS_DIR, LOGS_DIR, STUDY_FILE, Store, claim_path, log_path
from vitbench.tidy import select
from vitbench.study import Study, Trial, trial_key

RESULTS_ROOT = "results"
EXIT_FAILED = 1  # `vitbench sweep`: a trial of the study (or a calibration of this run) did not end ok


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
    calibrations_failed: int = 0
    wall_s: float = 0.0
    interrupted: bool = False
    failed_trials: dict[str, Status] = field(default_factory=dict)  # key -> latest status, for every not-ok trial

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.statuses.items() if s != "ok")

    @property
    def interrupted_trials(self) -> int:
        """Trials of this run recorded 'interrupted' (cancelled, preempted, lost with their node): they run again
        next time, so the study is not complete."""
        return self.statuses.get(Status.INTERRUPTED.value, 0)

    @property
    def succeeded(self) -> bool:
        """Every trial of the study has an ok row (none was interrupted) and every calibration of this run
        ended ok. A trial another live sweep holds (skipped_claimed, said in the summary line) has no row yet and
        is that sweep's to report: two sweeps sharing a results directory each succeed on their own trials."""
        return not self.failed_trials and not self.calibrations_failed and not self.interrupted_trials


class SweepHooks:
    """Callbacks for progress display (the CLI renders them; the library never prints)."""

    def planned(self, todo: list[Trial], summary: SweepSummary) -> None: ...

    def started(self, trial: Trial | None, job: Job) -> None: ...

    def finished(self, trial: Trial | None, record) -> None: ...


def plan(study: Study, store: Store, force: bool = False, retry_failed: bool = False) -> list[Trial]:
    """Trials still to run, in study order: not done, or done from a file it reads whole (a checkpoint) whose
    content has changed since (inputs_changed)."""
    if force:
        return list(study.trials)
    done = store.done_keys(only_ok=retry_failed) - set(inputs_changed(study, store))
    return [t for t in study.trials if t.key not in done]


def inputs_changed(study: Study, store: Store) -> dict[str, str]:
    """{key: why} of the study's done trials whose row recorded the SHA-256 of a file it read whole (a
    checkpoint: vitbench.tasks.fields.InputFile) that the file no longer has: its key holds the path, so a
    checkpoint replaced under the same name kept the old accuracy as done. Each is said once, as a warning. Rows
    written before the digests were recorded are not checked."""
    import warnings

    from vitbench.errors import VitbenchWarning
    from vitbench.tasks import get_task
    from vitbench.tasks.fields import INPUT_SHA256
    from vitbench.trial import input_sha256

    latest = _latest(r for r in store.refresh() if r.status.done)
    out: dict[str, str] = {}
    for t in study.trials:
        rec = latest.get(t.key)
        if rec is None or not isinstance(rec.runner.get(INPUT_SHA256), dict):
            continue
        now = input_sha256(get_task(t.config["task"]), t.config)
        for name, sha in rec.runner[INPUT_SHA256].items():
            if name in now and now[name] != sha:
                out[t.key] = (f"trial {t.key}: {name} {shorten(str(t.config[name]), 120)} has changed since its "
                              f"row was written (SHA-256 {str(sha)[:12]}... now {str(now[name])[:12]}...): it "
                              "runs again")
                warnings.warn(out[t.key], VitbenchWarning, stacklevel=2)
                break
    return out


def _latest(records: Iterable[Record]) -> dict[str, Record]:
    """Per trial key, its latest row of `records` by finish time (tidy.select's rule: a row without an end time
    is placed by file order)."""
    out: dict[str, Record] = {}
    for r in records:
        if not r.key:
            continue
        old = out.get(r.key)
        if not (old and old.finished_at and r.finished_at) or str(r.finished_at) >= str(old.finished_at):
            out[r.key] = r
    return out


def failed_trials(study: Study, store: Store) -> dict[str, Status]:
    """The study's trials whose latest row (by finish time) is terminal and not ok: oom, error, timeout. Trials
    never run, interrupted, or running in another sweep are not failures (a resumed sweep runs them)."""
    keys = {t.key for t in study.trials}
    return {r.key: r.status for r in select(store.refresh(), kinds="all")
            if r.key in keys and r.status.done and r.status is not Status.OK}


def trial_status(study: Study, store: Store) -> dict[str, str] | None:
    """Per trial key of the study, the status a sweep acts on: its latest (by finish time) terminal row's
    (Status.done: it is not run again, as store.done_keys says), else its latest row's (interrupted, skipped: run
    again), else 'pending' (also where a file it read whole has changed since: inputs_changed). An ok row then an
    interrupted --force rerun showed 'interrupted' for a trial the sweep skips. None where the results directory
    holds no row (a shard's included)."""
    recs = store.refresh()
    if not recs:
        return None
    done, last = _latest(r for r in recs if r.status.done), _latest(recs)
    changed = inputs_changed(study, store)  # done, but a checkpoint it read has changed: a sweep runs it again
    return {t.key: (done.get(t.key) or last[t.key]).status.value if t.key in last and t.key not in changed
            else "pending" for t in study.trials}


def _job(study: Study, run_id: str, trial: Trial, timeout_s: float, role: Role = Role.TRIAL) -> Job:
    from vitbench.tasks import get_task

    return Job(key=trial.key, config=trial.config, repeat=trial.repeat, study=study.name, study_sha=study.sha,
               run_id=run_id, timeout_s=timeout_s, task_module=get_task(trial.task).__module__, role=role)


def calibration_trials(study: Study) -> list[Trial]:
    """One calibration per set of the calibration task's fields among the study's calibrated trials (those whose
    task says a sweep should measure the device for them, on a backend that can): backend, device, precision,
    threads."""
    from vitbench.tasks import calibration_task, get_task

    found = calibration_task()
    if found is None:
        return []
    cal = found[0]
    seen: dict[str, Trial] = {}
    made: set[str] = set()  # the calibration fields already made a trial of (100,000 trials share a few)
    calibrated = {name: get_task(name).calibrated for name in {t.task for t in study.trials}}
    wanted = [k for k in cal.Params.model_fields if k != "task"]
    for t in study.trials:
        if not calibrated[t.task]:
            continue
        fields = {k: t.config[k] for k in wanted if k in t.config}
        ident = json.dumps(fields, sort_keys=True, default=str)
        if ident in made:
            continue
        made.add(ident)
        cfg = cal.Params.model_validate({**fields, "task": cal.name}).config()
        if not cal.runs_on(cfg["backend"]):
            continue  # a backend without a matmul of its own (an inference runtime): the others measure the CPU
        key = trial_key(cfg, 0, cal.version)
        seen.setdefault(key, Trial(key, cfg, 0, "calibration"))
    return list(seen.values())


def executor_options(study: Study, name: str | None = None, options: dict | None = None) -> tuple[str, dict]:
    """(name, options) of the executor a sweep runs on: `name` (else the study's), the study's options when it
    is the study's executor, then `options` on top."""
    name = name or study.executor.name
    return name, {**(study.executor.options if name == study.executor.name else {}), **(options or {})}


def check_executor(study: Study, name: str | None = None, options: dict | None = None) -> None:
    """Raise a ConfigError now for an unknown executor or a bad option (before anything runs or is shown)."""
    name, opts = executor_options(study, name, options)
    executor_class(name).check_options(opts)


def make_executor(study: Study, results_dir: Path, name: str | None = None,
                  options: dict | None = None) -> Executor:
    """The executor a sweep runs on (`executor_options`). Workers of remote executors write into the store's
    shards when they can see the results directory (vitbench.executors.remote)."""
    name, opts = executor_options(study, name, options)
    return executor_class(name)(results_dir, **opts)


def check_results_dir(study: Study, results_dir: str | os.PathLike, what: str = "results directory",
                      store: Store | None = None) -> Path:
    """`results_dir` can hold this study's results: a writable directory (or one that can be made) whose
    results and study copy, if any, are this study's. Another study's results would mix into one report and
    one resume; they go into a directory of their own (`vitbench report` reads several below one parent).
    `store`: the directory's open Store, whose records are then read once for this check and what follows."""
    path = check_dir(results_dir, what)
    if not path.is_dir():
        return path
    check_store_paths(study, path)
    others: set[str] = set()
    copy = path / STUDY_FILE
    if copy.is_file():
        from vitbench.study.reader import load_bounded

        data = None
        with contextlib.suppress(Exception):
            data, _ = load_bounded(copy.read_text(errors="replace"))
        if not (isinstance(data, dict) and isinstance(data.get("name"), str)):  # a file of the user's: kept as is
            raise ConfigError(f"{what} {shorten(str(path))} holds {STUDY_FILE}, which is not a study a sweep "
                              "copied there (no study name in it): give the sweep a directory of its own")
        others.add(data["name"])
    with contextlib.nullcontext(store) if store is not None else Store(path) as s:
        records = s.refresh()
    others |= {r.study for r in records if r.study}
    if not records and path.is_dir() and any(
            _whole_lines(f) for f in result_files(path, recursive=False)):
        raise ConfigError(f"{what} {shorten(str(path))} holds results files with no vitbench record in them (a "
                          "file of another tool's?): nothing is appended to them; give the sweep a directory of "
                          "its own")
    others.discard(study.name)
    if others and not records:  # a sweep that stopped before its first row (an executor that could not submit)
        named = ", ".join(shorten(o) for o in sorted(others))
        raise ConfigError(f"{what} {shorten(str(path))} holds the {STUDY_FILE} of study {named} and no row (a "
                          f"sweep of it that recorded nothing: its executor could not start?), not "
                          f"{shorten(study.name)}: remove that "
                          f"{STUDY_FILE} (or the directory), or give this study its own directory")
    if others:
        raise ConfigError(f"{what} {shorten(str(path))} holds the results of study "
                          f"{', '.join(shorten(o) for o in sorted(others))}, not {shorten(study.name)}; give this "
                          "study its own directory (`vitbench report` reads several runs below one parent)")
    return path


def _whole_lines(f: Path) -> bool:
    """Whether results file `f` holds a complete (newline-ended) line that is not blank: a sweep killed in its
    first write leaves only a torn line, which is no sign of another tool's file."""
    with open(f, "rb") as fh:
        return any(line.strip() and line.endswith(b"\n") for line in fh)


def check_store_paths(study: Study, root: Path) -> None:
    """Everything a sweep of `study` reads or writes in store `root` is of its kind, or absent (paths.check_entry):
    the results file and every worker shard, the study copy and its older copies, the claims and logs
    directories, each trial's claim and log. A directory where the results file goes used to end the sweep after
    its first trial, the trial lost: refused here, before anything runs (exit 2 naming the path)."""
    name = "the store's"
    check_entry(root / RESULTS_FILE, f"{name} results file")
    check_entry(root / STUDY_FILE, f"{name} study copy")
    stem, suffix = os.path.splitext(STUDY_FILE)
    for p in sorted({*root.glob(f"{os.path.splitext(RESULTS_FILE)[0]}*.jsonl"), *root.glob(f"{stem}.*{suffix}")}):
        check_entry(p, f"{name} file")  # "the store's file" (it said "the store's store file")
    for d in (CLAIMS_DIR, LOGS_DIR):
        check_entry(root / d, f"{name} {d} directory", directory=True)
    # each trial's claim and log where one exists already (its directory, checked above, holds the absent ones:
    # checking each absent path made a file in its directory, twice per trial, 16 s for 100,000 trials)
    keys = {t.key for t in (*study.trials, *calibration_trials(study))}
    for what, where in (("claim", claim_path), ("log", log_path)):
        probe = where(root, "k")
        if not probe.parent.is_dir():
            continue
        present = {e.name for e in os.scandir(probe.parent)}
        for key in keys:
            p = where(root, key)
            if p.name in present:
                check_entry(p, f"{name} {what} of trial {key}")


def run_study(study: Study, results_dir: str | os.PathLike | None = None, *,
              executor: Executor | str | None = None,
              force: bool = False, retry_failed: bool = False, calibration: bool | None = None,
              timeout_s: float | None = None, hooks: SweepHooks | None = None,
              executor_options: dict | None = None) -> SweepSummary:
    """Run every pending trial of `study`, storing one record per trial under `results_dir`.

    Raises KeyboardInterrupt after recording the running trial as 'interrupted' (the summary is then lost;
    everything finished is in the store)."""
    from vitbench.tasks import row_check

    hooks = hooks or SweepHooks()
    results_dir = Path(results_dir or default_results_dir(study)).expanduser()
    store = Store(results_dir, check=row_check())  # read once: for the check, the plan and what follows
    results_dir = check_results_dir(study, results_dir, store=store)
    if not isinstance(executor, Executor):  # before anything is shown or written
        check_executor(study, executor, executor_options)
    if compile_cache_on():  # every trial opens the compile cache: one that cannot be is refused now, not per trial
        check_cache_dir()
    run_id = new_run_id()
    summary = SweepSummary(run_id=run_id, results_dir=results_dir, planned=len(study.trials))
    t_start = time.perf_counter()
    todo = plan(study, store, force, retry_failed)
    outcomes = store.outcomes()
    planned_at = {t.key: outcomes.get(t.key) for t in todo}  # each trial's latest outcome as planned
    summary.skipped_done = len(study.trials) - len(todo)
    own_executor = not isinstance(executor, Executor)
    if todo:  # what can still fail (an executor that cannot start, a directory that cannot be made) fails here
        if own_executor:
            executor = make_executor(study, results_dir, executor, executor_options)
        try:
            make_dir(results_dir, "results directory")
        except ConfigError:
            if own_executor:
                executor.close()
            raise
    hooks.planned(todo, summary)
    if not todo:
        summary.failed_trials = failed_trials(study, store)
        summary.wall_s = time.perf_counter() - t_start
        store.close()
        return summary
    try:  # checked again where the study copy is written: another study started meanwhile is refused
        with store.locked():
            check_results_dir(study, results_dir, store=store)
            store.save_study(study.text)
    except ConfigError:
        if own_executor:
            executor.close()
        store.close()
        raise
    timeout = timeout_s or study.timeout_s
    by_key = {t.key: t for t in study.trials}
    calib = calibration_trials(study) if (study.calibration if calibration is None else calibration) else []
    done_now: set[str] = set()

    def finished_elsewhere(key: str) -> bool:
        """Whether another sweep stored an outcome of `key` since this one planned: so it is not measured twice,
        also under --force, --retry-failed or a changed input (two --force sweeps on one folder measured 5 rows
        for 3 trials)."""
        return key not in done_now and store.outcome(key) != planned_at[key]

    def jobs() -> Iterator[Job]:
        for t in calib:
            yield _job(study, run_id, t, timeout, Role.CALIBRATION)
        elsewhere: list[Trial] = []
        for t in todo:
            if not store.claim(t.key):
                elsewhere.append(t)
                continue
            if finished_elsewhere(t.key):
                store.release(t.key)  # another sweep finished it meanwhile
                summary.skipped_done += 1
                continue
            yield _job(study, run_id, t, timeout)
        # Once more, when this sweep's own trials are handed out: another sweep that held a trial and stopped
        # (Ctrl-C, a kill) freed its claim without finishing it; this sweep exited 0 saying "running in another
        # sweep" of a trial nobody was running.
        for t in elsewhere:
            if not store.claim(t.key):
                summary.skipped_claimed += 1  # still running there
            elif finished_elsewhere(t.key):
                store.release(t.key)
                summary.skipped_done += 1
            else:
                yield _job(study, run_id, t, timeout)

    def on_start(job: Job) -> None:
        hooks.started(by_key.get(job.key) if job.role is Role.TRIAL else None, job)

    def on_result(job: Job, outcome: Outcome) -> None:
        rec = outcome.record
        if outcome.stored is Stored.DRIVER:  # else a worker wrote it, or nothing is to be written
            store.append(rec)  # durable before anything else happens
        if job.role is Role.CALIBRATION:
            summary.calibrations += 1
            summary.calibrations_failed += rec.status is not Status.OK
            hooks.finished(None, rec)
            return
        done_now.add(job.key)
        store.release(job.key)
        summary.ran += 1
        summary.statuses[rec.status.value] = summary.statuses.get(rec.status.value, 0) + 1
        hooks.finished(by_key.get(job.key), rec)

    try:
        executor.run(jobs(), on_start, on_result)
    except KeyboardInterrupt:
        summary.interrupted = True
        raise
    finally:
        summary.wall_s = time.perf_counter() - t_start
        if own_executor:
            executor.close()
        if not summary.interrupted:
            summary.failed_trials = failed_trials(study, store)
        store.close()
    return summary
