"""The `slurm` executor: every trial is one SLURM job, submitted and watched with submitit.

    vitbench sweep studies/scaling.yaml --executor slurm -o partition=gpu -o gpus=1 -o time_limit_min=60
    # or in the study:  executor: {name: slurm, options: {partition: gpu, gpus: 1, account: myproj}}

Each job runs `vitbench.executors.remote.run_on_worker`: the trial in a fresh child process with the study's
per-trial timeout, its record appended to the host's shard of the results directory (which must be on a file
system the nodes share, as submitit's own job folder must be), so a result survives the death of this driver and
a resumed sweep never measures a trial twice (see remote.py). The driver keeps `max_parallel` jobs in the queue,
submits them as job arrays, polls them, and turns a job that died without a record into a row: SLURM's time
limit -> 'timeout', its memory limit (OUT_OF_MEMORY) -> 'oom', a node failure or a crash -> 'error',
cancellation -> 'interrupted' (runs again next time). Ctrl-C (or SIGTERM) cancels every job still queued or
running and records them as interrupted.

`cluster: local` runs the same jobs as local processes through submitit's LocalExecutor (what the tests use;
also handy on a single GPU box). Options are validated by `SlurmOptions` (unknown keys are errors).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt

from vitbench.errors import BackendUnavailable, ConfigError
from vitbench.executors import Executor, OnResult, OnStart
from vitbench.executors.remote import base_record, parse_options, run_on_worker, since_now, stored_row

# SLURM job states (sacct) -> record status for a job that returned no record.
_STATE_STATUS = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "OUT_OF_MEMORY": "oom", "OUT_OF_ME+": "oom",
                 "CANCELLED": "interrupted", "PREEMPTED": "interrupted", "BOOT_FAIL": "error",
                 "NODE_FAIL": "error", "FAILED": "error"}
# Minutes added to the per-trial timeout for the SLURM time limit: node start-up, imports, writing the row.
TIME_LIMIT_MARGIN_MIN = 5


class SlurmOptions(BaseModel):
    """Options of the slurm executor (study `executor.options` or `vitbench sweep -o KEY=VALUE`)."""

    model_config = ConfigDict(extra="forbid")
    cluster: Literal["slurm", "local"] = "slurm"  # local: submitit's local processes (tests, one box)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gpus: NonNegativeInt | None = None  # per trial; None: 1 for a cuda trial, else 0
    cpus_per_task: PositiveInt | None = None
    mem_gb: PositiveFloat | None = None
    time_limit_min: PositiveFloat | None = None  # None: trial timeout + TIME_LIMIT_MARGIN_MIN (rounded up)
    exclusive: bool = False  # a whole node per trial (timing trials then share nothing)
    additional: dict[str, Any] = Field(default_factory=dict)  # more #SBATCH parameters, e.g. {gres: "gpu:a100:1"}
    setup: list[str] = Field(default_factory=list)  # shell lines run first in each job (module load ...)
    python: str | None = None  # interpreter on the nodes (default: this one)
    max_parallel: PositiveInt | None = None  # jobs queued or running at once (None: all)
    folder: str | None = None  # submitit's job files (default: <results>/slurm)
    start_method: Literal["spawn", "forkserver"] = "spawn"  # for the trial's child inside the job
    grace_s: PositiveFloat = 5.0  # after a trial's timeout: SIGTERM, then SIGKILL this much later
    poll_s: PositiveFloat = 5.0
    keep_logs: bool = False
    results_dir: str | None = None  # set by the runner


def _tail(text: str | None, lines: int = 20) -> str | None:
    if not text:
        return None
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _gpus(opts_gpus: int | None, job: dict) -> int:
    if opts_gpus is not None:
        return opts_gpus
    return 1 if str(job["config"].get("device", "cpu")).startswith(("cuda", "gpu")) else 0


class SlurmExecutor(Executor):
    """Trials as SLURM jobs via submitit (see the module docstring)."""

    name = "slurm"
    options_model = SlurmOptions

    def __init__(self, **options):
        self.opts: SlurmOptions = parse_options(self.name, SlurmOptions, options)  # type: ignore[assignment]
        # availability first, so a sweep that cannot run writes nothing
        if importlib.util.find_spec("submitit") is None:
            raise BackendUnavailable("executor 'slurm' needs submitit: pip install 'vitbench[cluster]'")
        if self.opts.cluster == "slurm" and shutil.which("sbatch") is None:
            raise BackendUnavailable("executor 'slurm': no `sbatch` on this machine's PATH; run the sweep on a "
                                     "SLURM login node (or set option cluster=local to run the jobs here)")

    @classmethod
    def check_options(cls, options: dict) -> None:
        parse_options(cls.name, SlurmOptions, options)

    # ---------------------------------------------------------------------------------------------------
    def _executor(self, folder: Path):
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
            if o.exclusive:
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

    def _time_limit_min(self, job: dict) -> float:
        if self.opts.time_limit_min:
            return self.opts.time_limit_min
        t = job.get("timeout_s") or 1800.0
        return math.ceil(t / 60.0) + TIME_LIMIT_MARGIN_MIN

    def run(self, jobs: Iterable[dict], on_start: OnStart, on_result: OnResult) -> None:
        o = self.opts
        results = Path(o.results_dir).resolve() if o.results_dir else None
        folder = Path(o.folder) if o.folder else (results / "slurm" if results else None)
        if folder is None:
            raise ConfigError("executor 'slurm' needs a results directory (or option folder=...) on a file system "
                              "the nodes share")
        folder.mkdir(parents=True, exist_ok=True)
        ex = self._executor(folder)
        pending = iter(jobs)
        running: list[tuple[dict, Any, float]] = []  # (job, submitit job, submitted at)
        exhausted = False
        try:
            while True:
                room = (o.max_parallel or 1 << 30) - len(running)
                batch: list[dict] = []
                while not exhausted and len(batch) < room:
                    try:
                        batch.append(next(pending))
                    except StopIteration:
                        exhausted = True
                if batch:
                    self._submit(ex, batch, results, since_now(), on_start, running)
                if not running and exhausted:
                    return
                finished = [r for r in running if r[1].done()]
                for item in finished:
                    running.remove(item)
                    job, sjob, _ = item
                    on_result(job, self._collect(job, sjob, results, time.time() - item[2]))
                if not finished:
                    time.sleep(o.poll_s)
        except KeyboardInterrupt:
            self._cancel_all(running, results, on_result)
            raise

    def _submit(self, ex, batch: list[dict], results: Path | None, since: str, on_start: OnStart,
                running: list) -> None:
        """Submit jobs grouped by resources (a job array per group), adding (job, submitit job, t) to `running`
        before announcing each (so a Ctrl-C inside on_start still cancels it)."""
        groups: dict[tuple, list[dict]] = {}
        for job in batch:
            groups.setdefault((_gpus(self.opts.gpus, job), self._time_limit_min(job)), []).append(job)
        for (gpus, minutes), group in groups.items():
            ex.update_parameters(**self._job_params(gpus, minutes))
            with ex.batch():
                handles = [ex.submit(run_on_worker, job, str(results) if results else None, self.opts.start_method,
                                     since, {"executor": self.name}, self.opts.keep_logs, self.opts.grace_s)
                           for job in group]
            t = time.time()
            running.extend((job, h, t) for job, h in zip(group, handles))
            for job in group:
                on_start(job)

    def _job_params(self, gpus: int, minutes: float) -> dict:
        """submitit parameters of one group of jobs: GPUs and time limit."""
        if self.opts.cluster == "slurm":  # SLURM counts whole minutes
            return {"gpus_per_node": gpus, "timeout_min": math.ceil(minutes)}
        return {"gpus_per_node": gpus, "local_timeout_min": minutes}  # the local cluster takes fractions

    def _collect(self, job: dict, sjob, results: Path | None, elapsed_s: float) -> dict:
        from submitit.core.utils import UncompletedJobError

        info = {"executor": self.name, "job_id": str(sjob.job_id)}
        try:
            if self.opts.cluster == "local" and not sjob.paths.result_pickle.exists():
                # a local job writes its result before it exits; submitit would wait for a slow NFS first
                raise UncompletedJobError(f"job {sjob.job_id} exited without a result")
            rec = sjob.result()
        except UncompletedJobError as e:  # FailedJobError (an exception in the job) is a subclass
            rec = stored_row(results, job)  # the worker wrote its row before the job went away?
            if rec is None:
                state = (str(sjob.state).upper().split() or ["UNKNOWN"])[0]
                status = _STATE_STATUS.get(state)
                if status is None:  # no SLURM accounting (cluster=local): a job killed at its limit timed out
                    status = "timeout" if elapsed_s >= 60 * self._time_limit_min(job) else "error"
                msg = {"timeout": f"SLURM job {sjob.job_id} hit its time limit ({state})",
                       "oom": f"SLURM job {sjob.job_id} exceeded its memory limit ({state})",
                       "interrupted": f"SLURM job {sjob.job_id} was cancelled or preempted ({state})"}.get(
                    status, f"SLURM job {sjob.job_id} ended without a result ({state}): {str(e)[-1500:]}")
                rec = base_record(job, status, "SlurmJob" + state.title().replace("_", ""), msg,
                                  tail=_tail(self._safe(sjob.stderr)) or _tail(self._safe(sjob.stdout)), **info)
        else:
            if not isinstance(rec, dict):
                rec = base_record(job, "error", "BadResult", f"job returned {type(rec).__name__}", **info)
            rec.setdefault("runner", {}).update(info)
        if rec.get("status") == "ok" and not self.opts.keep_logs:
            self._cleanup(sjob)
        return rec

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

    def _cancel_all(self, running, results: Path | None, on_result: OnResult) -> None:
        for _, sjob, _ in running:
            with contextlib.suppress(Exception):
                sjob.cancel(check=False)
        deadline = time.time() + self.opts.grace_s + 10  # let the jobs end (and release their trial locks)
        while time.time() < deadline and not all(self._safe(sjob.done) for _, sjob, _ in running):
            time.sleep(0.2)
        for job, sjob, _ in running:
            rec = stored_row(results, job)  # finished just before the cancel: keep its real row
            if rec is None:
                rec = base_record(job, "interrupted", "KeyboardInterrupt",
                                  "the sweep was interrupted; its SLURM job was cancelled",
                                  executor=self.name, job_id=str(sjob.job_id))
            on_result(job, rec)
