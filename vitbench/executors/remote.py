"""What a cluster worker runs for one trial, and the driver-side helpers the slurm and ray executors share.

Worker side (`run_on_worker`, executed inside a SLURM job or a Ray task):
  1. The trial runs in a fresh child process through the local executor (`spawn` by default: the child inherits
     this process's environment as it is now, e.g. the CUDA_VISIBLE_DEVICES a Ray task was given), so the
     per-trial timeout, crash/OOM rows and log tails behave exactly as in a local sweep, and a CUDA context never
     outlives its trial even when Ray reuses the worker process.
  2. If the study's results directory is visible here (a shared file system: the directory holds the study file
     whose SHA-256 is the job's `study_sha`), the worker appends the record itself to its host's shard,
     `results.w-<host>.jsonl` (flock'ed appends from one host only: no cross-machine append races), and says so
     in its Outcome (Stored.WORKER), so the driver does not append it again. A result measured on a node is then
     durable even if the driver (a login-node session) dies; the shards are merged on load.
  3. Exactly once across driver restarts. Jobs outlive a killed driver (SLURM jobs, submitit's local processes),
     and a resumed sweep re-submits the trials that have no row yet. So before measuring, the worker takes a
     lock `claims/<key>.worker.lock` (held until its row is written; a busy lock is waited for up to LOCK_WAIT_S,
     the time a cancelled job takes to die) and re-reads the store: a trial that another job is still running,
     or that another sweep stored after the driver re-checked the store for it
     (`since`: the job's draw time minus DUPLICATE_WINDOW_S), is not measured again; the worker returns a
     'skipped' record as Stored.ELSEWHERE, which the driver counts but never writes. (flock across
     machines needs a file system that supports it: NFSv4, Lustre/GPFS with flock enabled.)
  Without a visible store, the worker just returns the record and the driver appends it (e.g. a Ray cluster
  without a shared file system); then a killed driver loses the results of trials still running.

  4. Preemption and requeue. SLURM's warning before it preempts or ends a job (PREEMPT_SIGNAL, SIGUSR2:
     `--signal=USR2@N`, which submitit asks for on every job) stops the running trial; so does SLURM's SIGTERM to
     every process of a job it cancels, preempts or requeues (`scontrol requeue`, `PreemptMode=REQUEUE` without
     a user signal: no warning first). Either way the trial's row, 'interrupted', goes into the store and the
     worker exits without a result (SIGUSR2 always; SIGTERM where the driver follows its jobs, `follow`: SLURM),
     so the driver follows the job: requeued, whatever requeued it, it runs the trial again and the driver gets
     that row; ended (cancelled), the driver finds the interrupted row and the trial runs again next time. A job
     requeued after it measured returns the row it stored instead of measuring again: one final row per trial.

Driver side: `vitbench.executors.failure` builds the row for a job that died without returning one (node failure,
SLURM time limit or memory limit, cancelled), after `stored_row` checked that its worker has not already written
one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from vitbench.executors import PREEMPT_SIGNAL, Job, Outcome, Stopped, Stored, failure, stopped_by
from vitbench.paths import check_entry
from vitbench.record import ErrorInfo, Record, Status, now
from vitbench.rows import SHARD_PREFIX, result_files
from vitbench.store import CLAIMS_DIR, STUDY_FILE, Store, open_in_store

# A row another sweep stored less than this before the driver drew a job may have been missed by the driver's
# own re-check (it was being written); the worker treats it as a duplicate. Also absorbs small clock skew.
DUPLICATE_WINDOW_S = 5.0
# How long a worker waits for another holder of its trial's lock before leaving the trial to it: long enough for
# a cancelled job of an interrupted sweep to die, short against a trial's run time.
LOCK_WAIT_S = 30.0
# Suffix of a worker's trial lock in the store's claims directory (beside the sweep's own claim, `<key>.lock`).
WORKER_LOCK = ".worker.lock"


def rows_for_key(results_dir: str | os.PathLike, key: str) -> list[Record]:
    """Every parseable row of trial `key` in a store (all shards), parsing only the lines that mention it:
    a worker looks this up before each trial, and stores of long studies are large. Corrupt lines are skipped
    silently here (a full read reports them)."""
    needle = json.dumps(key).encode()
    out = []
    for f in result_files(results_dir, recursive=False):
        try:
            data = f.read_bytes()
        except OSError:
            continue
        at = data.find(needle)
        while at != -1:  # each line holding the key, found by a byte search (not a split into every line)
            start, end = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at)
            end = len(data) if end == -1 else end
            try:
                r = Record.from_dict(json.loads(data[start:end]))
            except (ValueError, TypeError, AttributeError):
                r = None
            if r is not None and r.key == key:
                out.append(r)
            at = data.find(needle, end)
    return out


def since_now(window_s: float = DUPLICATE_WINDOW_S) -> str:
    """ISO time `window_s` ago (UTC, ms, the format of record timestamps): the `since` of a job drawn now."""
    import datetime as dt

    t = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=window_s)
    return t.isoformat(timespec="milliseconds")


def host_shard() -> str:
    """This host's shard name in the store (file `results.w-<host>.jsonl`)."""
    return SHARD_PREFIX + re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:80]


def visible_store(results_dir: str | os.PathLike | None, study_sha: str | None) -> Path | None:
    """The results directory if this machine sees the driver's store (its study file matches the job's)."""
    if not results_dir or not study_sha:
        return None
    root = Path(results_dir)
    for candidate in (root / STUDY_FILE, root / f"study.{study_sha[:12]}.yaml"):
        with contextlib.suppress(OSError):
            if hashlib.sha256(candidate.read_bytes()).hexdigest() == study_sha:
                return root
    return None


def stored_row(results_dir: str | os.PathLike | None, job: Job) -> Outcome | None:
    """The row a worker already wrote for this job (same key and run), if any (read from every shard)."""
    if not results_dir or not Path(results_dir).is_dir():
        return None
    rows = [r for r in rows_for_key(results_dir, job.key) if r.run_id == job.run_id]
    return Outcome(rows[-1], Stored.WORKER) if rows else None


def _done_elsewhere(root: Path, job: Job, since: str | None) -> Record | None:
    """A terminal row for this trial stored by another sweep after `since` (ISO time), if any."""
    if not since:
        return None
    for r in rows_for_key(root, job.key):
        stored_at = r.runner.get("stored_at") or r.finished_at or ""
        if r.status.done and r.run_id != job.run_id and stored_at >= since:
            return r
    return None


def _done_before(root: Path, job: Job) -> Record | None:
    """A terminal row this very job stored already (same run): the job was requeued after it measured."""
    rows = [r for r in rows_for_key(root, job.key) if r.run_id == job.run_id and r.status.done]
    return rows[-1] if rows else None


def worker_lock_path(root: Path, key: str) -> Path:
    """The lock a worker holds while it measures trial `key` of store `root` (point 3)."""
    return root / CLAIMS_DIR / f"{key}{WORKER_LOCK}"


def check_worker_paths(root: Path | None) -> None:
    """Before anything runs (the executor's start): every worker lock already in store `root` is a file a worker
    can lock (paths.check_entry; absent ones can be created: the runner checked the claims directory), so that no
    job dies on one later (a directory or a pipe there: a PathError naming it, exit 2)."""
    if root is None or not (root / CLAIMS_DIR).is_dir():
        return
    for p in sorted((root / CLAIMS_DIR).glob(f"*{WORKER_LOCK}")):
        check_entry(p, "the store's worker lock")


def _lock(root: Path, key: str, wait_s: float) -> int | None:
    """Take the trial's worker lock, waiting up to `wait_s` for a holder that is only dying (a cancelled job)."""
    # never through a link (a link made after the driver's check_links would have its target truncated)
    fd = open_in_store(worker_lock_path(root, key), os.O_RDWR | os.O_CREAT, "the store's worker lock")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.2)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def run_on_worker(job: Job, results_dir: str | None = None, start_method: str = "spawn",
                  since: str | None = None, runner_info: dict | None = None, keep_logs: bool = False,
                  grace_s: float = 5.0, lock_wait_s: float = LOCK_WAIT_S,
                  identify: Callable[[], dict] | None = None, follow: bool = False) -> Outcome:
    """Run one trial job on this machine (see the module docstring); never raises for a failing trial.

    `since` (ISO time, from `since_now()` when the driver drew the job): a row another sweep stored after it
    makes this job a duplicate. `runner_info`: extra fields for the record's `runner` block (executor name; the
    job's cluster id comes from `identify`, a function of the executor's module run here). `grace_s`: after the
    trial's timeout, SIGTERM, then SIGKILL this much later. `lock_wait_s`: how long to wait for another job
    holding this trial before leaving it to that job. `follow`: the driver follows this job to its end, through
    any requeue (SLURM), so a trial stopped from outside ends the worker without a result (point 4)."""
    from vitbench.executors.local import LocalExecutor

    info = {"host": socket.gethostname(), "worker_pid": os.getpid(), **(runner_info or {})}
    if identify is not None:
        try:
            info.update(identify())
        except Exception:  # noqa: BLE001 - not inside such a job (e.g. called directly)
            pass
    root = visible_store(results_dir, job.study_sha)
    store = Store(root, shard=host_shard()) if root is not None else None
    fd = None
    try:
        if store is not None:
            fd = _lock(root, job.key, lock_wait_s)
            if fd is None:
                return _skipped(job, info, "another job is running this trial right now (a sweep that was killed "
                                           "left it running?); its row will appear when it finishes")
            if (mine := _done_before(root, job)) is not None:
                return Outcome(mine, Stored.WORKER)  # requeued after it measured: measured once
            other = _done_elsewhere(root, job, since)
            if other is not None:
                return _skipped(job, info, f"already measured by run {other.run_id} "
                                           f"(status {other.status}) after this sweep started")
        out: list[Outcome] = []
        ex = LocalExecutor(root, start_method=start_method, preload=(), keep_logs=keep_logs, grace_s=grace_s)
        stop: Stopped | None = None
        try:
            with stopped_by((PREEMPT_SIGNAL,)):  # (SIGTERM: the trial's child gets it too and says so itself)
                ex.run([job], lambda j: None, lambda j, o: out.append(o))
        except Stopped as e:  # the loop stopped the trial and recorded it as interrupted (a row it measured stays)
            stop = e
        finally:
            ex.close()
        rec = out[-1].record if out else failure(job, Status.INTERRUPTED, "Preempted", "", **info)
        rec.runner.update(info)
        if stop is not None and rec.status is Status.INTERRUPTED:
            rec.error = ErrorInfo("Preempted", f"the job got {stop.signal.name}, the scheduler's warning before a "
                                  "preemption or its time limit, while this trial ran; the trial was stopped and "
                                  "runs again (when the job is requeued, else next time)",
                                  rec.error.tail if rec.error else None)
        # (a calibration is a per-run row: the driver writes it)
        stored = store is not None and (rec.status.done or rec.status is Status.INTERRUPTED) \
            and job.row_key is not None
        if stored:
            rec.runner["stored_at"] = now()
            store.append(rec)  # durable on the shared file system before the driver even hears of it
        if rec.status is Status.INTERRUPTED and (follow or (stop is not None and stored)):
            # no result for the driver: it follows the job, which either ends (the driver then finds this row, or
            # makes one from the job's state) or is requeued by the scheduler and runs the trial again
            raise _Preempted(128 + (stop.signal if stop is not None else signal.SIGTERM))
        return Outcome(rec, Stored.WORKER) if stored else Outcome(rec)
    finally:
        _unlock(fd)
        if store is not None:
            store.close()


class _Preempted(SystemExit):
    """Ends a worker whose trial a preemption warning, or a stop from outside in a followed job, stopped, without a
    result (its row is in the store): exit status 128 + the signal, as a shell reports a process ended by it."""



def _skipped(job: Job, info: dict, why: str) -> Outcome:
    return Outcome(failure(job, Status.SKIPPED, "Duplicate", why, **info), Stored.ELSEWHERE)
