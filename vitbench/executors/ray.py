"""The `ray` executor: every trial is one Ray task with its own resources (e.g. one GPU).

    vitbench sweep studies/scaling.yaml --executor ray -o address=auto -o num_gpus=1
    # or in the study:  executor: {name: ray, options: {address: auto, num_gpus: 1, num_cpus: 8}}

Connects to the Ray cluster at `address` ("auto", "ray://head:10001", or $RAY_ADDRESS), or starts a local
instance when there is none; a session the caller already opened (ray.init) is reused and left open. Each task
runs `vitbench.executors.remote.run_on_worker`: the trial in a fresh child process of the Ray worker (so no
CUDA context or leaked memory survives into the next trial even though Ray reuses workers), with the study's
per-trial timeout. When the results directory is on a file system the workers share, each worker appends its
record to its host's shard of the store (durable even if this driver dies); otherwise the record travels back
through Ray and this driver appends it. A task Ray's memory monitor killed becomes an 'oom' row, a crashed
worker an 'error' row; Ctrl-C cancels (force-kills) every task still queued or running and records them as
interrupted. Tasks are never retried by Ray (max_retries=0): a failure is a row, a re-run is the user's call.

Resources: `num_gpus` per trial (default: 1 for a cuda trial, else 0), `num_cpus` (default 1: for CPU timing
trials set it to a whole node's cores, or two trials will share cores and measure each other).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

from vitbench.errors import BackendUnavailable
from vitbench.executors import Executor, OnResult, OnStart
from vitbench.executors.remote import base_record, parse_options, run_on_worker, since_now, stored_row


class RayOptions(BaseModel):
    """Options of the ray executor (study `executor.options` or `vitbench sweep -o KEY=VALUE`)."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = None  # None: $RAY_ADDRESS, else a new local instance
    num_gpus: NonNegativeFloat | None = None  # per trial; None: 1 for a cuda trial, else 0
    num_cpus: NonNegativeFloat = 1.0
    memory_gb: PositiveFloat | None = None  # Ray's logical memory resource per trial
    resources: dict[str, float] = Field(default_factory=dict)  # custom resources, e.g. {"TPU": 4}
    max_parallel: PositiveInt | None = None  # tasks submitted at once (None: all; Ray queues them)
    runtime_env: dict[str, Any] | None = None  # for a session this executor opens
    init: dict[str, Any] = Field(default_factory=dict)  # more ray.init() arguments for that session
    start_method: Literal["spawn", "forkserver"] = "spawn"  # for the trial's child inside the Ray worker
    grace_s: PositiveFloat = 5.0  # after a trial's timeout: SIGTERM, then SIGKILL this much later
    poll_s: PositiveFloat = 1.0
    keep_logs: bool = False
    results_dir: str | None = None  # set by the runner


def _gpus(opts_gpus: float | None, job: dict) -> float:
    if opts_gpus is not None:
        return opts_gpus
    return 1.0 if str(job["config"].get("device", "cpu")).startswith(("cuda", "gpu")) else 0.0


class RayExecutor(Executor):
    """Trials as Ray tasks (see the module docstring)."""

    name = "ray"
    options_model = RayOptions

    def __init__(self, **options):
        self.opts: RayOptions = parse_options(self.name, RayOptions, options)  # type: ignore[assignment]
        if importlib.util.find_spec("ray") is None:  # before anything is written
            raise BackendUnavailable("executor 'ray' needs ray: pip install 'vitbench[cluster]'")
        self._started = False

    @classmethod
    def check_options(cls, options: dict) -> None:
        parse_options(cls.name, RayOptions, options)

    def _ray(self):
        import ray

        if not ray.is_initialized():
            o = self.opts
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "logging_level": logging.WARNING, **o.init}
            if o.runtime_env:
                kw["runtime_env"] = o.runtime_env
            try:
                ray.init(address=o.address, **kw)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise BackendUnavailable(f"executor 'ray': cannot connect to or start Ray "
                                         f"(address={o.address!r}): {e}") from e
            self._started = True
        return ray

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False

    # ---------------------------------------------------------------------------------------------------
    def run(self, jobs: Iterable[dict], on_start: OnStart, on_result: OnResult) -> None:
        ray = self._ray()
        o = self.opts
        results = str(Path(o.results_dir).resolve()) if o.results_dir else None
        task = ray.remote(run_on_worker)
        pending = iter(jobs)
        running: dict[Any, dict] = {}  # ObjectRef -> job
        exhausted = False
        try:
            while True:
                while not exhausted and len(running) < (o.max_parallel or 1 << 30):
                    try:
                        job = next(pending)
                    except StopIteration:
                        exhausted = True
                        break
                    opts: dict[str, Any] = {"num_cpus": o.num_cpus, "num_gpus": _gpus(o.num_gpus, job),
                                            "max_retries": 0, "retry_exceptions": False,
                                            "name": f"vitbench {job['config'].get('model')} "
                                                    f"{job['config'].get('task')} {job['key']}"}
                    if o.memory_gb:
                        opts["memory"] = int(o.memory_gb * 2**30)
                    if o.resources:
                        opts["resources"] = dict(o.resources)
                    ref = task.options(**opts).remote(job, results, o.start_method, since_now(),
                                                      {"executor": self.name}, o.keep_logs, o.grace_s)
                    running[ref] = job
                    on_start(job)
                if not running:
                    return
                ready, _ = ray.wait(list(running), num_returns=1, timeout=o.poll_s)
                for ref in ready:
                    job = running.pop(ref)
                    on_result(job, self._collect(ray, job, ref, results))
        except KeyboardInterrupt:
            for ref in running:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            with contextlib.suppress(Exception):  # let the killed workers go (and release their trial locks)
                ray.wait(list(running), num_returns=len(running), timeout=o.grace_s + 10)
            for job in running.values():
                rec = stored_row(results, job) or base_record(
                    job, "interrupted", "KeyboardInterrupt",
                    "the sweep was interrupted; its Ray task was cancelled", executor=self.name)
                on_result(job, rec)
            raise

    def _collect(self, ray, job: dict, ref, results: str | None) -> dict:
        from ray import exceptions as rx

        info = {"executor": self.name, "task_id": ref.task_id().hex()}
        try:
            rec = ray.get(ref)
        except Exception as e:  # noqa: BLE001 - every way a task can die becomes a row
            rec = stored_row(results, job)
            if rec is None:
                if isinstance(e, rx.OutOfMemoryError):
                    status, msg = "oom", "Ray's memory monitor killed the task (node out of memory)"
                elif isinstance(e, rx.TaskCancelledError):
                    status, msg = "interrupted", "the Ray task was cancelled"
                else:
                    status, msg = "error", f"the Ray task failed: {type(e).__name__}"
                lines = str(e).strip().splitlines()
                rec = base_record(job, status, type(e).__name__, msg, tail="\n".join(lines[-20:]) or None, **info)
            return rec
        if not isinstance(rec, dict):
            return base_record(job, "error", "BadResult", f"task returned {type(rec).__name__}", **info)
        rec.setdefault("runner", {}).update(info)
        return rec
