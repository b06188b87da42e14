"""What a cluster worker runs for one trial, and the driver-side helpers the slurm and ray executors share.

Worker side (`run_on_worker`, executed inside a SLURM job or a Ray task):
  1. The trial runs in a fresh child process through the local executor (`spawn` by default: the child inherits
     this process's environment as it is now, e.g. the CUDA_VISIBLE_DEVICES a Ray task was given), so the
     per-trial timeout, crash/OOM rows and log tails behave exactly as in a local sweep, and a CUDA context never
     outlives its trial even when Ray reuses the worker process.
  2. If the study's results directory is visible here (a shared file system: the directory holds the study file
     whose SHA-256 is the job's `study_sha`), the worker appends the record itself to its host's shard,
     `results.w-<host>.jsonl` (flock'ed appends from one host only: no cross-machine append races), and marks the
     returned copy `runner.stored`, so the driver does not append it again. A result measured on a node is then
     durable even if the driver (a login-node session) dies; the shards are merged on load.
  3. Exactly once across driver restarts. Jobs outlive a killed driver (SLURM jobs, submitit's local processes),
     and a resumed sweep re-submits the trials that have no row yet. So before measuring, the worker takes a
     lock `claims/<key>.worker.lock` (held until its row is written; a busy lock is waited for up to LOCK_WAIT_S,
     the time a cancelled job takes to die) and re-reads the store: a trial that another job is still running,
     or that another sweep stored after the driver re-checked the store for it
     (`since`: the job's draw time minus DUPLICATE_WINDOW_S), is not measured again; the worker returns a
     'skipped' record marked as stored elsewhere, which the driver counts but never writes. (flock across
     machines needs a file system that supports it: NFSv4, Lustre/GPFS with flock enabled.)
  Without a visible store, the worker just returns the record and the driver appends it (e.g. a Ray cluster
  without a shared file system); then a killed driver loses the results of trials still running.

Driver side: `base_record` builds the row for a job that died without returning one (node failure, SLURM time
limit or memory limit, cancelled), after `stored_row` checked that its worker has not already written one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import socket
import time
from pathlib import Path

from vitbench.record import make_record, now
from vitbench.store import DONE_STATUSES, STUDY_FILE, Store

JOB_FIELDS = ("key", "study", "study_sha", "run_id", "repeat")
# A row another sweep stored less than this before the driver drew a job may have been missed by the driver's
# own re-check (it was being written); the worker treats it as a duplicate. Also absorbs small clock skew.
DUPLICATE_WINDOW_S = 5.0
# How long a worker waits for another holder of its trial's lock before leaving the trial to it: long enough for
# a cancelled job of an interrupted sweep to die, short against a trial's run time.
LOCK_WAIT_S = 30.0


def since_now(window_s: float = DUPLICATE_WINDOW_S) -> str:
    """ISO time `window_s` ago (UTC, ms, the format of record timestamps): the `since` of a job drawn now."""
    import datetime as dt

    t = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=window_s)
    return t.isoformat(timespec="milliseconds")


def host_shard() -> str:
    """This host's shard name in the store (file `results.w-<host>.jsonl`)."""
    return "w-" + re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:80]


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


def parse_options(executor: str, model, options: dict):
    """Validate an executor's options with its pydantic model; a ConfigError names each bad option."""
    from pydantic import ValidationError

    from vitbench.errors import ConfigError

    try:
        return model.model_validate(options)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in x['loc'])}: {x['msg']}"
                             + (f" (got {x['input']!r})" if x["type"] != "missing" else "") for x in e.errors())
        raise ConfigError(f"executor {executor!r} options: {problems}; allowed options: "
                          f"{', '.join(k for k in model.model_fields if k != 'results_dir')}") from None


def base_record(job: dict, status: str, etype: str, message: str, tail: str | None = None,
                started_at: str | None = None, **runner) -> dict:
    """A record for a job that produced none itself (same shape as the local executor's failure rows)."""
    from vitbench.trial import get_task

    try:
        kind = get_task(job["config"]["task"], job.get("task_module")).kind
    except Exception:  # noqa: BLE001 - the task may not be importable on the driver
        kind = "error"
    rec = make_record(kind, job["config"], status=status, started_at=started_at,
                      error={"type": etype, "message": message, "tail": tail or None})
    rec.update({k: job[k] for k in JOB_FIELDS if k in job})
    rec["trial"] = job["config"]
    rec["runner"] = dict(runner)
    return rec


def rows_for_key(results_dir: str | os.PathLike, key: str) -> list[dict]:
    """Every parseable row of trial `key` in a store (all shards), parsing only the lines that mention it:
    a worker looks this up before each trial, and stores of long studies are large. Corrupt lines are skipped
    silently here (load() reports them)."""
    import json

    from vitbench.store import result_files

    needle = json.dumps(key).encode()
    out = []
    for f in result_files(results_dir):
        try:
            data = f.read_bytes()
        except OSError:
            continue
        for line in data.split(b"\n"):
            if needle in line:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and r.get("key") == key:
                    out.append(r)
    return out


def stored_row(results_dir: str | os.PathLike | None, job: dict) -> dict | None:
    """The row a worker already wrote for this job (same key and run), if any (read from every shard)."""
    if not results_dir or not Path(results_dir).is_dir():
        return None
    rows = [r for r in rows_for_key(results_dir, job["key"]) if r.get("run_id") == job.get("run_id")]
    if not rows:
        return None
    row = dict(rows[-1])
    row["runner"] = {**(row.get("runner") or {}), "stored": "worker"}
    return row


def _done_elsewhere(root: Path, job: dict, since: str | None) -> dict | None:
    """A terminal row for this trial stored by another sweep after `since` (ISO time), if any."""
    if not since:
        return None
    for r in rows_for_key(root, job["key"]):
        stored_at = (r.get("runner") or {}).get("stored_at") or r.get("finished_at") or ""
        if r.get("status") in DONE_STATUSES and r.get("run_id") != job.get("run_id") and stored_at >= since:
            return r
    return None


def _lock(root: Path, key: str, wait_s: float) -> int | None:
    """Take the trial's worker lock, waiting up to `wait_s` for a holder that is only dying (a cancelled job)."""
    d = root / "claims"
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / f"{key}.worker.lock", os.O_RDWR | os.O_CREAT, 0o644)
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


def run_on_worker(job: dict, results_dir: str | None = None, start_method: str = "spawn",
                  since: str | None = None, runner_info: dict | None = None, keep_logs: bool = False,
                  grace_s: float = 5.0, lock_wait_s: float = LOCK_WAIT_S) -> dict:
    """Run one trial job on this machine (see the module docstring); never raises for a failing trial.

    `since` (ISO time, from `since_now()` when the driver drew the job): a row another sweep stored after it
    makes this job a duplicate. `runner_info`: extra fields for the record's `runner` block (executor name,
    job id, ...). `grace_s`: after the trial's timeout, SIGTERM, then SIGKILL this much later. `lock_wait_s`:
    how long to wait for another job holding this trial before leaving it to that job."""
    from vitbench.executors.local import LocalExecutor

    info = {"host": socket.gethostname(), "worker_pid": os.getpid(), **(runner_info or {})}
    info.update(_job_id_here(info.get("executor")))
    root = visible_store(results_dir, job.get("study_sha"))
    store = Store(root, shard=host_shard()) if root is not None else None
    fd = None
    try:
        if store is not None:
            fd = _lock(root, job["key"], lock_wait_s)
            if fd is None:
                return _skipped(job, info, "another job is running this trial right now (a sweep that was killed "
                                           "left it running?); its row will appear when it finishes")
            other = _done_elsewhere(root, job, since)
            if other is not None:
                return _skipped(job, info, f"already measured by run {other.get('run_id')} "
                                           f"(status {other.get('status')}) after this sweep started")
        out: list[dict] = []
        ex = LocalExecutor(start_method=start_method, preload=(), keep_logs=keep_logs, grace_s=grace_s,
                           log_dir=(root / "logs") if root is not None else None)
        try:
            ex.run([job], lambda j: None, lambda j, r: out.append(r))
        finally:
            ex.close()
        rec = out[-1]
        rec["runner"] = {**rec.get("runner", {}), **info}
        # (a calibration row gets its per-run identity from the driver, which writes it)
        if store is not None and rec.get("status") in DONE_STATUSES and rec.get("kind") != "calibration":
            rec["runner"]["stored_at"] = now()
            store.append(rec)  # durable on the shared file system before the driver even hears of it
            rec = dict(rec)
            rec["runner"] = {**rec["runner"], "stored": store.path.name}
        return rec
    finally:
        _unlock(fd)
        if store is not None:
            store.close()


def _job_id_here(executor: str | None) -> dict:
    """The cluster's id of the job/task running this worker, for the row (the driver adds it to rows it writes)."""
    try:
        if executor == "slurm":
            import submitit

            return {"job_id": str(submitit.JobEnvironment().job_id)}
        if executor == "ray":
            import ray

            return {"task_id": ray.get_runtime_context().get_task_id()}
    except Exception:  # noqa: BLE001 - not inside such a job (e.g. called directly)
        pass
    return {}


def _skipped(job: dict, info: dict, why: str) -> dict:
    rec = base_record(job, "skipped", "Duplicate", why, **info)
    rec["runner"]["stored"] = "elsewhere"  # the driver counts it but never writes it
    return rec
