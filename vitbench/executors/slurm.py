"""The `slurm` executor: every trial is one SLURM job, submitted and watched with submitit.

    vitbench sweep studies/scaling.yaml --executor slurm -o partition=gpu -o gpus=1 -o time_limit_min=60
    # or in the study:  executor: {name: slurm, options: {partition: gpu, gpus: 1, account: myproj}}

Each job runs `vitbench.executors.remote.run_on_worker`: the trial in a fresh child process with the study's
per-trial timeout, its record appended to the host's shard of the results directory (which must be on a file
system the nodes share, as submitit's own job folder must be), so a result survives the death of this driver and
a resumed sweep never measures a trial twice (see remote.py). The driver keeps `max_parallel` jobs in the queue,
submits them as job arrays, polls them, and turns a job that died without a record into a row: SLURM's time
limit -> 'timeout', its memory limit (OUT_OF_MEMORY) -> 'oom', a node failure or a crash -> 'error',
cancellation -> 'interrupted' (runs again next time). A job warned of its preemption (SIGUSR2, submitit's
`--signal=USR2@90`) stores its trial as interrupted and ends without a result: the driver keeps following it
through a requeue (remote.py, point 4); so does a job whose trial SLURM stopped with SIGTERM (a cancel, a
preemption, `scontrol requeue` without the warning first): a job squeue shows queued or running again is
followed whatever requeued it, and its end is the end squeue shows, not accounting's (which calls a job CANCELLED
while its worker still writes the row). Ctrl-C (or another stop signal) cancels every job still queued or running
and records them as interrupted.

`cluster: local` runs the same jobs as local processes through submitit's LocalExecutor (what the tests use;
also handy on a single GPU box). Options are validated by `SlurmOptions` (unknown keys are errors).
"""

from __future__ import annotations

import contextlib
import getpass
import importlib.util
import io
import math
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt

from vitbench.errors import BackendUnavailable, ConfigError, clip
from vitbench.executors import (Executor, Job, Outcome, failure, gpus_wanted, is_timing, register_executor,
                                wait_until)
from vitbench.executors.remote import check_worker_paths, run_on_worker, since_now, stored_row
from vitbench.paths import PathError, untrusted
from vitbench.record import Status

# SLURM job states (sacct, squeue) -> record status for a job that returned no record. One meaning per fault on
# every executor: a job cancelled, preempted or lost with its node runs again next time ('interrupted'); the
# trial's own limits keep their status.
_STATE_STATUS = {"TIMEOUT": Status.TIMEOUT, "DEADLINE": Status.TIMEOUT, "OUT_OF_MEMORY": Status.OOM,
                 "OUT_OF_ME+": Status.OOM, "CANCELLED": Status.INTERRUPTED, "PREEMPTED": Status.INTERRUPTED,
                 "BOOT_FAIL": Status.INTERRUPTED, "NODE_FAIL": Status.INTERRUPTED, "VANISHED": Status.INTERRUPTED,
                 "FAILED": Status.ERROR, "COMPLETED": Status.ERROR}
# squeue states of a job that is still queued or running (squeue(1) "JOB STATE CODES"); any other state, or no
# line at all, means the job has ended.
_ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
           "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}
# An sbatch that does not answer `--version` in this long is one no job can be submitted with.
SBATCH_CHECK_S = 60
# Minutes added to the per-trial timeout for the SLURM time limit: node start-up, imports, writing the row.
TIME_LIMIT_MARGIN_MIN = 5


class SlurmOptions(BaseModel):
    """Options of the slurm executor (study `executor.options` or `vitbench sweep -o KEY=VALUE`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # inf: a wait never ending
    cluster: Literal["slurm", "local"] = "slurm"  # local: submitit's local processes (tests, one box)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gpus: NonNegativeInt | None = None  # per trial; None: 1 for a GPU trial, else 0
    cpus_per_task: PositiveInt | None = None
    mem_gb: PositiveFloat | None = None
    time_limit_min: PositiveFloat | None = None  # None: trial timeout + TIME_LIMIT_MARGIN_MIN (rounded up)
    exclusive: bool | None = None  # a whole node per trial; None: yes for timing trials, no for the others
    additional: dict[str, Any] = Field(default_factory=dict)  # more #SBATCH parameters, e.g. {gres: "gpu:a100:1"}
    setup: list[str] = Field(default_factory=list)  # shell lines run first in each job (module load ...)
    python: str | None = None  # interpreter on the nodes (default: this one)
    max_parallel: PositiveInt | None = None  # jobs queued or running at once (None: all)
    folder: str | None = None  # submitit's job files (default: <results>/slurm)
    start_method: Literal["spawn", "forkserver"] = "spawn"  # for the trial's child inside the job
    grace_s: PositiveFloat = 5.0  # after a trial's timeout: SIGTERM, then SIGKILL this much later
    poll_s: PositiveFloat = 5.0
    vanish_s: PositiveFloat = 60.0  # a job gone from squeue (or ended there) this long without a result: a row
    keep_logs: bool = False


def _sbatch_failed(status: int | str, stderr: str | None, submitted: int = 0) -> BackendUnavailable:
    """The error of an sbatch that exited non-zero (SLURM not configured here, its controller unreachable, a
    partition or account it refuses): one line with its exit status, its first stderr lines (clipped), and the way
    out."""
    lines = [ln.strip() for ln in (stderr or "").strip().splitlines() if ln.strip()]
    said = clip(" | ".join(lines[:4]) + (" | ..." if len(lines) > 4 else ""), 400) if lines else "(no message)"
    kept = (f"; the {submitted} job(s) already submitted keep running and store their rows (run the sweep again "
            "for the rest)") if submitted else ""
    return BackendUnavailable(f"executor 'slurm': sbatch failed (exit status {status}): {said}{kept}; check the "
                              "SLURM configuration of this machine (`sinfo` should list its partitions) and the "
                              "options partition/account/qos, or run the sweep with the local executor "
                              "(--executor local, or option cluster=local)")


def _tail(text: str | None, lines: int = 20) -> str | None:
    if not text:
        return None
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _gpus(opts_gpus: int | None, job: Job) -> int:
    if opts_gpus is not None:
        return opts_gpus
    return gpus_wanted(job)


def squeue_states() -> dict[str, str] | None:
    """This user's jobs in the queue, id -> state (array tasks one by one, ended jobs while SLURM still lists
    them), or None when squeue does not answer."""
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-u", getpass.getuser(), "-o", "%i %T"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)


def slurm_job_id() -> dict:
    """Run inside a job: SLURM's id of it, for the row the worker writes."""
    import submitit

    return {"job_id": str(submitit.JobEnvironment().job_id)}


@dataclass
class _Submitted:
    sjob: Any  # submitit job
    t0: float
    queue_state: str | None = None  # its state in squeue when last seen there
    gone_since: float | None = None  # when squeue first showed it ended (or not at all)
    lost: bool = False  # ended without a result for vanish_s: collected without waiting for submitit


@register_executor
class SlurmExecutor(Executor):
    """Trials as SLURM jobs via submitit (see the module docstring)."""

    name = "slurm"
    Options = SlurmOptions
    requires = ("submitit",)
    description = "one SLURM job per trial (submitit); workers write their rows into the shared results dir"

    def __init__(self, results_dir: str | Path | None = None, **options):
        super().__init__(results_dir, **options)
        self.poll_s = self.opts.poll_s
        # availability first, so a sweep that cannot run writes nothing
        if importlib.util.find_spec("submitit") is None:
            raise BackendUnavailable("executor 'slurm' needs submitit: pip install 'vitbench[cluster]'")
        # submitit submits with sbatch and launches each job's task with srun (its SlurmExecutor refuses to start
        # without srun on the PATH: a RuntimeError, exit 1, where a machine has sbatch alone)
        missing = [c for c in ("sbatch", "srun") if shutil.which(c) is None] if self.opts.cluster == "slurm" else []
        if missing:
            raise BackendUnavailable(f"executor 'slurm': no {' or '.join(f'`{c}`' for c in missing)} on this "
                                     "machine's PATH; run the sweep on a SLURM login node (or set option "
                                     "cluster=local to run the jobs here)")
        self.results = self.results_dir.resolve() if self.results_dir is not None else None
        folder = Path(self.opts.folder) if self.opts.folder else (self.results / "slurm" if self.results else None)
        if folder is None:
            raise ConfigError("executor 'slurm' needs a results directory (or option folder=...) on a file system "
                              "the nodes share")
        self.folder = folder
        self._check_trusted()
        check_worker_paths(self.results)
        self._ex: dict[bool, Any] = {}  # a submitit executor for whole-node jobs, one for the others
        self._submitted = 0  # jobs sbatch took so far

    def _check_trusted(self) -> None:
        """Refuse (PathError) a job folder that another user could write into: it, or a folder between it and the
        results directory, writable by every user or owned by another user (paths.untrusted, the compile caches'
        rule). submitit's files there are pickles: the job's (<uuid>.pkl), which the node unpickles and runs, and
        its result (<id>_result.pkl), written by the job and unpickled here by `sjob.result()`; unpickling runs
        whatever code the pickle names, so another user's file there would run as this user."""
        why = untrusted(self.results if self.results is not None else self.folder, self.folder)
        if why is not None:
            raise PathError(f"executor 'slurm': job folder {why}: submitit's job files there are pickles that "
                            "vitbench and the jobs load (loading one runs code), so it does not use a folder "
                            "another user can write; `chmod o-w` it if it is yours, or choose another with -o "
                            "folder=DIR")

    def run(self, jobs, on_start, on_result) -> None:
        if self.opts.cluster == "slurm":  # before the first trial is claimed or pickled: a SLURM that cannot
            self._check_sbatch()  # take a job (not configured here) leaves no claims and no job files behind
        super().run(jobs, on_start, on_result)

    @staticmethod
    def _check_sbatch() -> None:
        """`sbatch --version` reads SLURM's configuration as a submission does, without submitting anything."""
        try:
            out = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, timeout=SBATCH_CHECK_S,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise _sbatch_failed(f"none: no answer in {SBATCH_CHECK_S} s", None) from None
        except OSError as e:
            raise _sbatch_failed(f"none: {e.strerror or e}", None) from None
        if out.returncode != 0:
            raise _sbatch_failed(out.returncode, out.stderr or out.stdout)

    # ---------------------------------------------------------------------------------------------------
    def _executor(self, folder: Path, exclusive: bool = False):
        import submitit

        o = self.opts
        kw = {f"{o.cluster}_python": o.python} if o.python else {}
        ex = submitit.AutoExecutor(folder=folder, cluster=o.cluster, **kw)
        params: dict[str, Any] = {"name": "vitbench", "nodes": 1, "tasks_per_node": 1}
        if o.cpus_per_task:
            params["cpus_per_task"] = o.cpus_per_task
        if o.mem_gb:
            params["mem_gb"] = o.mem_gb
        if o.cluster == "slurm":
            for k in ("partition", "account", "qos", "constraint"):
                if getattr(o, k):
                    params[f"slurm_{k}"] = getattr(o, k)
            if exclusive:  # (submitit writes any value it is given, False included, into --exclusive=)
                params["slurm_exclusive"] = True
            if o.additional:
                params["slurm_additional_parameters"] = dict(o.additional)
            if o.setup:
                params["slurm_setup"] = list(o.setup)
            if o.max_parallel:
                params["slurm_array_parallelism"] = o.max_parallel
        elif o.setup:
            params["local_setup"] = list(o.setup)
        ex.update_parameters(**params)
        return ex

    def _time_limit_min(self, job: Job) -> float:
        if self.opts.time_limit_min:
            return self.opts.time_limit_min
        t = job.timeout_s or 1800.0
        return math.ceil(t / 60.0) + TIME_LIMIT_MARGIN_MIN

    def _exclusive(self, job: Job) -> bool:
        return is_timing(job) if self.opts.exclusive is None else self.opts.exclusive

    def _job_params(self, gpus: int, minutes: float) -> dict:
        """submitit parameters of one group of jobs: GPUs and time limit."""
        if self.opts.cluster == "slurm":  # SLURM counts whole minutes
            return {"gpus_per_node": gpus, "timeout_min": math.ceil(minutes)}
        return {"gpus_per_node": gpus, "local_timeout_min": minutes}  # the local cluster takes fractions

    # ---- the queue primitives ----------------------------------------------------------------------------
    def submit(self, jobs: list[Job]) -> list[_Submitted]:
        """Jobs grouped by resources, a job array per group."""
        made = [d for d in (self.folder, *self.folder.parents) if not os.path.lexists(d)]
        self.folder.mkdir(parents=True, exist_ok=True)
        for d in made:  # what this made is never writable by others, whatever the umask (000 in a CI container)
            with contextlib.suppress(OSError):
                os.chmod(d, stat.S_IMODE(os.stat(d).st_mode) & ~stat.S_IWOTH)
        self._check_trusted()  # before any pickle is written there
        since = since_now()
        results = str(self.results) if self.results else None
        groups: dict[tuple, list[int]] = {}
        for i, job in enumerate(jobs):
            groups.setdefault((_gpus(self.opts.gpus, job), self._time_limit_min(job), self._exclusive(job)),
                              []).append(i)
        out: list[_Submitted | None] = [None] * len(jobs)
        for (gpus, minutes, exclusive), idx in groups.items():
            ex = self._ex.get(exclusive) or self._ex.setdefault(exclusive, self._executor(self.folder, exclusive))
            ex.update_parameters(**self._job_params(gpus, minutes))
            handles = self._submit_group(ex, [jobs[i] for i in idx], results, since)
            self._submitted += len(handles)
            t = time.time()
            for i, h in zip(idx, handles):
                out[i] = _Submitted(h, t)
        return out  # type: ignore[return-value]

    def _submit_group(self, ex, jobs: list[Job], results: str | None, since) -> list:
        """One job array. An sbatch that exits non-zero submitted nothing: submitit's job files of this array
        are removed, and a BackendUnavailable says why (the runner then releases the claims of its trials),
        instead of submitit's traceback."""
        from submitit.core.utils import FailedJobError, JobPaths

        staging = JobPaths.get_first_id_independent_folder(self.folder)  # where submitit stages an array's files
        before = set(self._staged(staging))
        said = io.StringIO()  # submitit prints a failed sbatch's stderr itself: it goes into the error instead
        try:
            with contextlib.redirect_stderr(said), ex.batch():
                handles = [ex.submit(run_on_worker, job, results, self.opts.start_method, since,
                                     {"executor": self.name}, self.opts.keep_logs, self.opts.grace_s,
                                     identify=slurm_job_id, follow=True) for job in jobs]
        except FailedJobError as e:  # sbatch ran and refused: nothing was submitted
            self._drop_staged(staging, before, len(jobs))
            cause = e.__cause__
            status = cause.returncode if isinstance(cause, subprocess.CalledProcessError) else "unknown"
            raise _sbatch_failed(status, str(e) or said.getvalue(), self._submitted) from None
        except OSError as e:  # a pickle not written (a full disk: the CLI says so), or sbatch gone: none submitted
            self._drop_staged(staging, before, len(jobs))
            if e.filename == "sbatch":
                raise _sbatch_failed(f"none: {e.strerror or e}", None, self._submitted) from None
            raise
        if said.getvalue():  # (printed by something else than a failed sbatch)
            sys.stderr.write(said.getvalue())
        return handles

    @staticmethod
    def _staged(folder: Path) -> list[Path]:
        """submitit's files of an array being submitted: its pickles (<uuid>.pkl) and its sbatch script."""
        try:
            return [p for p in folder.iterdir()
                    if (p.suffix == ".pkl" and len(p.stem) == 32) or p.name.startswith(".submission_file_")]
        except OSError:
            return []

    def _drop_staged(self, folder: Path, before: set[Path], n: int) -> None:
        """Remove the files an unsubmitted array of `n` jobs left: the new pickles and script. Only when exactly
        those are new: a file another sweep on the same folder is staging at the same moment is not ours."""
        new = [p for p in self._staged(folder) if p not in before]
        pickles = [p for p in new if p.suffix == ".pkl"]
        if len(pickles) == n and len(new) - len(pickles) <= 1:
            for p in new:
                with contextlib.suppress(OSError):
                    p.unlink()

    def poll(self, handles: list[_Submitted]) -> list[_Submitted]:
        """Finished jobs: those submitit sees done (a result file, or sacct) and squeue no longer shows active,
        and those the queue lost: ended in squeue, or gone from it, for vanish_s without a result (accounting off
        or not answering, an array task cancelled before it started). A job squeue shows active is followed,
        whatever sacct says: sacct calls a job CANCELLED while its worker still writes the trial's row
        (COMPLETING), and a requeued job (REQUEUED, PENDING) runs the trial again."""
        done = [h for h in handles if h.sjob.done()]
        if self.opts.cluster == "slurm":
            queue = squeue_states()
            done = [h for h in done if not self._active(h, queue)]
            seen = {id(d) for d in done}
            done += self._lost([h for h in handles if id(h) not in seen], queue)
        if not done:
            time.sleep(self.poll_s)
        return done

    @staticmethod
    def _active(h: _Submitted, queue: dict[str, str] | None) -> bool:
        """Still queued or running, by squeue (its result file says it has ended; squeue not answering: not)."""
        return queue is not None and queue.get(str(h.sjob.job_id)) in _ACTIVE \
            and not h.sjob.paths.result_pickle.exists()

    def _lost(self, handles: list[_Submitted], queue: dict[str, str] | None) -> list[_Submitted]:
        if not handles or queue is None:  # squeue not answering: nothing can be said
            return []
        t, lost = time.time(), []
        for h in handles:
            state = queue.get(str(h.sjob.job_id))
            if state in _ACTIVE:
                h.queue_state, h.gone_since = state, None
                continue
            h.queue_state = state or h.queue_state
            h.gone_since = h.gone_since or t
            if t - h.gone_since >= self.opts.vanish_s:
                h.lost = True
                lost.append(h)
        return lost

    def collect(self, job: Job, h: _Submitted) -> Outcome:
        from submitit.core.utils import UncompletedJobError

        sjob = h.sjob
        info = {"executor": self.name, "job_id": str(sjob.job_id)}
        try:
            if (self.opts.cluster == "local" or h.lost) and not sjob.paths.result_pickle.exists():
                # a local job writes its result before it exits (submitit would wait for a slow NFS first); a
                # lost job never will (submitit would wait for accounting forever)
                raise UncompletedJobError(f"job {sjob.job_id} ended without a result")
            self._check_trusted()  # again: sjob.result() unpickles the result file the job wrote
            outcome = sjob.result()
        except UncompletedJobError as e:  # FailedJobError (an exception in the job) is a subclass
            outcome = stored_row(self.results, job)  # the worker wrote its row before the job went away?
            if outcome is None:
                state = (str(sjob.state).upper().split() or ["UNKNOWN"])[0]
                if state not in _STATE_STATUS and self.opts.cluster == "slurm":  # accounting says nothing
                    state = h.queue_state if h.queue_state in _STATE_STATUS else "VANISHED"
                status = _STATE_STATUS.get(state)
                if status is None:  # cluster=local (no accounting): a job killed at its limit timed out
                    status = Status.TIMEOUT if time.time() - h.t0 >= 60 * self._time_limit_min(job) \
                        else Status.ERROR
                msg = {Status.TIMEOUT: f"SLURM job {sjob.job_id} hit its time limit ({state})",
                       Status.OOM: f"SLURM job {sjob.job_id} exceeded its memory limit ({state})",
                       Status.INTERRUPTED: f"SLURM job {sjob.job_id} was cancelled, preempted or lost ({state}); "
                                           "the trial runs again next time"}.get(
                    status, f"SLURM job {sjob.job_id} ended without a result ({state}): {str(e)[-1500:]}")
                outcome = Outcome(failure(job, status, "SlurmJob" + state.title().replace("_", ""), msg,
                                          tail=_tail(self._safe(sjob.stderr)) or _tail(self._safe(sjob.stdout)),
                                          **info))
        else:
            if not isinstance(outcome, Outcome):
                return Outcome(failure(job, Status.ERROR, "BadResult", f"job returned {type(outcome).__name__}",
                                       **info))
            outcome.record.runner.update(info)
        if outcome.record.status is Status.OK and not self.opts.keep_logs:
            self._cleanup(sjob)
        return outcome

    def cancel(self, running: list[tuple[Job, _Submitted]]) -> list[Outcome]:
        for _, h in running:
            with contextlib.suppress(Exception):
                h.sjob.cancel(check=False)
        # let the jobs end (and their workers write the rows and release their trial locks): accounting calls a
        # job CANCELLED at once, squeue shows it COMPLETING until its processes have ended
        def ended() -> bool:
            queue = squeue_states() if self.opts.cluster == "slurm" else None
            return all(self._safe(h.sjob.done) and not self._active(h, queue) for _, h in running)

        wait_until(ended, self.opts.grace_s + 10, step=0.5)
        return [stored_row(self.results, job)  # finished just before the cancel: keep its real row
                or Outcome(failure(job, Status.INTERRUPTED, "KeyboardInterrupt",
                                   "the sweep was interrupted; its SLURM job was cancelled",
                                   executor=self.name, job_id=str(h.sjob.job_id)))
                for job, h in running]

    # ---------------------------------------------------------------------------------------------------
    @staticmethod
    def _safe(fn) -> str | None:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - a missing log file is no reason to lose the row
            return None

    @staticmethod
    def _cleanup(sjob) -> None:
        for p in Path(sjob.paths.folder).glob(f"{sjob.job_id}_*"):
            with contextlib.suppress(OSError):
                p.unlink()
