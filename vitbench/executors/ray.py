"""The `ray` executor: every trial is one Ray task with its own resources (e.g. one GPU).

    vitbench sweep studies/scaling.yaml --executor ray -o address=auto -o num_gpus=1
    # or in the study:  executor: {name: ray, options: {address: auto, num_gpus: 1, num_cpus: 8}}

Connects to the Ray cluster at `address` ("auto", "ray://head:10001", or $RAY_ADDRESS), or starts a local
instance when there is none; a session the caller already opened (ray.init) is reused and left open. An address
where nothing accepts a connection is refused at once, before anything runs (_check_reachable). Each task
runs `vitbench.executors.remote.run_on_worker`: the trial in a fresh child process of the Ray worker (so no
CUDA context or leaked memory survives into the next trial even though Ray reuses workers), with the study's
per-trial timeout. When the results directory is on a file system the workers share, each worker appends its
record to its host's shard of the store (durable even if this driver dies); otherwise the record travels back
through Ray and this driver appends it. A task Ray's memory monitor killed becomes an 'oom' row, a crashed
worker an 'error' row; Ctrl-C cancels (force-kills) every task still queued or running and records them as
interrupted. Tasks are never retried by Ray (max_retries=0): a failure is a row, a re-run is the user's call.

The cluster's head. Every poll that brings no result asks the head (its GCS) one key lookup; a head that answers
none for `head_lost_s` is lost: each trial still in flight (running, queued in Ray, or drawn after) becomes an
'interrupted' row saying so (its worker's own row if it wrote one), the sweep ends with its summary, and the same
command runs those trials again once the cluster is back. (Ray's core would end the driver itself, with one raw
line and no summary, after its own `gcs_rpc_server_reconnect_timeout_s`: for the session this executor opens
that is set to HEAD_LOST_MARGIN_S more than `head_lost_s`, so vitbench decides first.)

Resources: `num_gpus` per trial (default: 1 for a cuda trial, else 0), `num_cpus` (default 1: for CPU timing
trials set it to a whole node's cores, or two trials will share cores and measure each other).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

from vitbench.errors import BackendUnavailable, VitbenchWarning
from vitbench.executors import Executor, Job, Outcome, failure, gpus_wanted, is_timing, register_executor
from vitbench.executors.remote import check_worker_paths, run_on_worker, since_now, stored_row
from vitbench.paths import check_entry
from vitbench.record import Status
from vitbench.store import LOGS_DIR


class RayOptions(BaseModel):
    """Options of the ray executor (study `executor.options` or `vitbench sweep -o KEY=VALUE`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # inf: a wait never ending
    address: str | None = None  # None: $RAY_ADDRESS, else a new local instance
    num_gpus: NonNegativeFloat | None = None  # per trial; None: 1 for a GPU trial, else 0
    num_cpus: NonNegativeFloat = 1.0
    exclusive: bool | None = None  # a whole node per trial; None: yes for timing trials, no for the others
    memory_gb: PositiveFloat | None = None  # Ray's logical memory resource per trial
    resources: dict[str, NonNegativeFloat] = Field(default_factory=dict)  # custom resources, e.g. {"TPU": 4}
    max_parallel: PositiveInt | None = None  # tasks submitted at once (None: all; Ray queues them)
    runtime_env: dict[str, Any] | None = None  # for a session this executor opens
    init: dict[str, Any] = Field(default_factory=dict)  # more ray.init() arguments for that session
    start_method: Literal["spawn", "forkserver"] = "spawn"  # for the trial's child inside the Ray worker
    grace_s: PositiveFloat = 5.0  # after a trial's timeout: SIGTERM, then SIGKILL this much later
    poll_s: PositiveFloat = 1.0
    keep_logs: bool = False
    # how long the cluster's head (GCS) may answer nothing before the trials in flight become rows and the sweep
    # ends; default: Ray's own gcs_rpc_server_reconnect_timeout_s (60 s, src/ray/common/ray_config_def.h)
    head_lost_s: PositiveFloat = 60.0


# Ray's own give-up time for an unreachable GCS, set for the driver session this executor opens (its core ends the
# process after it): head_lost_s plus this margin, Ray's default period (60 s) once more, so that vitbench's own
# check (every poll, HEAD_PROBE_S at most) decides first even on a loaded host.
RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
HEAD_LOST_MARGIN_S = 60.0
# How long one question to the head may take: a key lookup in the GCS answers in milliseconds; a miss alone
# decides nothing (only `head_lost_s` without any answer does).
HEAD_PROBE_S = 2.0
# How long the cluster's address may take to accept a TCP connection before the sweep starts (_check_reachable):
# Ray's own connect timeout per attempt (its "Failed to connect to GCS at address ... within 5 seconds").
CONNECT_PROBE_S = 5.0
# The file in the store's logs directory that holds the cluster's broadcasts (_quiet).
RAY_LOG = "ray.log"
# After Ctrl-C, how often the running tasks are force-cancelled again until they have ended (RayExecutor.cancel):
# a second is short beside the grace_s + 10 s they get in all, and long beside a killed worker's exit.
CANCEL_RETRY_S = 1.0


def _gpus(opts_gpus: float | None, job: Job) -> float:
    if opts_gpus is not None:
        return opts_gpus
    return float(gpus_wanted(job))


# A custom resource a node offers once (`ray start --resources='{"vitbench_node": 1}'`): a task that asks for
# all of it has the node to itself. Without it, such a task asks for all the CPUs of the smallest node.
NODE_RESOURCE = "vitbench_node"
# Errors of a task lost with its worker or node (not the trial's own fault: the trial runs in a child process):
# 'interrupted', run again next time, as SLURM requeues a NODE_FAIL job.
_LOST = ("NodeDiedError", "LocalRayletDiedError", "WorkerCrashedError", "RaySystemError", "ObjectLostError",
         "OwnerDiedError", "ActorDiedError")


class _Unsent:
    """The handle of a job drawn after the head was lost: never submitted, its row says so."""


def ray_task_id() -> dict:
    """Run inside a task: Ray's id of it, for the row the worker writes."""
    import ray

    return {"task_id": ray.get_runtime_context().get_task_id()}


@register_executor
class RayExecutor(Executor):
    """Trials as Ray tasks (see the module docstring)."""

    name = "ray"
    Options = RayOptions
    requires = ("ray",)
    description = "one Ray task per trial, with its own resources (e.g. one GPU)"

    def __init__(self, results_dir: str | Path | None = None, **options):
        super().__init__(results_dir, **options)
        self.poll_s = self.opts.poll_s
        if importlib.util.find_spec("ray") is None:  # before anything is written
            raise BackendUnavailable("executor 'ray' needs ray: pip install 'vitbench[cluster]'")
        self.results = str(self.results_dir.resolve()) if self.results_dir is not None else None
        if self.results is not None:  # what its workers and the cluster's broadcasts write, checked before any run
            check_worker_paths(Path(self.results))
            check_entry(self._log_path(), "the store's Ray log")
        self._check_reachable()
        self._started = False
        self._task = None
        self._printer = None  # Ray's own printer of cluster errors, while _quiet has replaced it
        self._whole: dict[str, Any] | None = None  # task options for a node to itself (asked of the head once)
        self._silent_since: float | None = None  # when the head last stopped answering
        self._lost: str | None = None  # why the head is lost (then nothing more is asked of Ray)

    def _check_reachable(self) -> None:
        """A cluster address where nothing listens is refused now (BackendUnavailable, exit 2), before anything is
        claimed or written: `ray.init` would try it NUM_REDIS_GET_RETRIES (20) times, each waiting 5 s for the GCS
        (ray/_private/node.py `_init_gcs_client`; ~2 min on ray 2.60), with no setting to shorten that for one
        session that would not also shorten a slow head's legitimate start. So the address Ray would connect to
        (its own `canonicalize_bootstrap_address`: $RAY_ADDRESS, "auto", localhost rewritten) must accept a TCP
        connection within CONNECT_PROBE_S; whether a Ray head answers there is still ray.init's to say. Skipped for
        a session the caller opened (reused) and where Ray starts a local instance (no address)."""
        import socket
        import sys

        if (ray := sys.modules.get("ray")) is not None and ray.is_initialized():
            return
        given, env = self.opts.address, os.environ.get("RAY_ADDRESS") or None
        address = env if env and given in (None, "auto") else given  # as ray.init reads them
        try:
            if address is not None and "://" in address:  # Ray Client: ray://HOST[:PORT] (its default 10001)
                target = address.split("://", 1)[1].split("/")[0]
                target = target if target.rpartition(":")[2].isdigit() else f"{target}:10001"
            else:
                from ray._private.services import canonicalize_bootstrap_address

                target = canonicalize_bootstrap_address(address)
            host, _, port = (target or "").rpartition(":")
            port_n = int(port) if target else 0
        except Exception:  # noqa: BLE001 - an address Ray cannot read: ray.init says why, at once
            return
        if not target:  # a new local instance
            return
        try:
            socket.create_connection((host.strip("[]"), port_n), timeout=CONNECT_PROBE_S).close()
        except OSError as e:
            why = ("nothing listens there" if isinstance(e, ConnectionRefusedError) else
                   f"no answer in {CONNECT_PROBE_S:g} s" if isinstance(e, TimeoutError) else str(e) or repr(e))
            named = f"$RAY_ADDRESS {env!r}" if address == env else f"address={given!r}"
            raise BackendUnavailable(
                f"executor 'ray': no Ray cluster at {named}" + (f" ({target})" if target != address else "")
                + f": {why}. Start one (`ray start --head` on its head node), or give its head's address as "
                "-o address=HOST:PORT (the study's executor.options.address); with no address and no $RAY_ADDRESS "
                "the sweep starts a local Ray instance") from None

    def _ray(self):
        import ray

        if not ray.is_initialized():
            o = self.opts
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "logging_level": logging.WARNING, **o.init}
            if o.runtime_env:
                kw["runtime_env"] = o.runtime_env
            on_term = signal.getsignal(signal.SIGTERM)
            reconnect = os.environ.get(RECONNECT_ENV)  # read by Ray's core when the session starts
            os.environ[RECONNECT_ENV] = str(math.ceil(o.head_lost_s + HEAD_LOST_MARGIN_S))
            try:
                ray.init(address=o.address, **kw)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise BackendUnavailable(f"executor 'ray': cannot connect to or start Ray "
                                         f"(address={o.address!r}): {e}") from e
            finally:
                if reconnect is None:
                    os.environ.pop(RECONNECT_ENV, None)
                else:
                    os.environ[RECONNECT_ENV] = reconnect
                # Ray's core worker installs its own SIGTERM handler (it logs and exits 1); the sweep's own
                # (`kill` stops as cleanly as Ctrl-C: jobs cancelled, rows interrupted, exit 130) comes back
                if on_term is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, on_term)
            self._started = True
            self._quiet()
        return ray

    def _quiet(self) -> None:
        """Keep the cluster's error broadcasts (a raylet that died, a node marked dead: each with 20 lines of the
        raylet's log) out of the sweep's output, which log_to_driver=False does not: the trial's row says what
        happened to it; the broadcasts go to <results>/logs/ray.log. (Ray's driver thread prints them through
        the module-level `print_to_stdstream`, looked up at each call.)"""
        try:
            from ray._private import worker as ray_worker
        except ImportError:
            return
        log = self._log_path() if self.results else None

        def to_log(data, *args, **kwargs) -> None:
            if log is None:
                return
            with contextlib.suppress(OSError):
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "a") as f:
                    f.writelines(f"({data.get('pid', '')}) {line}\n" for line in data.get("lines", []))

        if hasattr(ray_worker, "print_to_stdstream"):
            self._printer = ray_worker.print_to_stdstream
            ray_worker.print_to_stdstream = to_log

    def _log_path(self) -> Path:
        """Where the cluster's broadcasts go (_quiet)."""
        return Path(self.results) / LOGS_DIR / RAY_LOG

    def close(self) -> None:
        if self._started:
            import ray

            if self._lost is None:  # (without its head, Ray's shutdown would wait for it)
                ray.shutdown()
            self._started = False
            if self._printer is not None:
                from ray._private import worker as ray_worker

                ray_worker.print_to_stdstream, self._printer = self._printer, None

    # ---- the queue primitives ----------------------------------------------------------------------------
    def submit_one(self, job: Job) -> Any:
        if self._lost is not None:
            return _Unsent()
        ray = self._ray()
        if self._task is None:
            self._task = ray.remote(run_on_worker)
        o = self.opts
        opts: dict[str, Any] = {"num_cpus": o.num_cpus, "num_gpus": _gpus(o.num_gpus, job), "max_retries": 0,
                                "retry_exceptions": False, "name": f"vitbench {job.label()}"}
        if o.memory_gb:
            opts["memory"] = int(o.memory_gb * 2**30)
        if o.resources:
            opts["resources"] = dict(o.resources)
        if is_timing(job) if o.exclusive is None else o.exclusive:
            opts.update(self._whole_node(ray))
        return self._task.options(**opts).remote(job, self.results, o.start_method, since_now(),
                                                 {"executor": self.name}, o.keep_logs, o.grace_s,
                                                 identify=ray_task_id)

    def _whole_node(self, ray) -> dict[str, Any]:
        """Task options that give it a node to itself: all of NODE_RESOURCE, else all CPUs of the smallest node
        (asked of the head once, at the first such task: a head that stops answering is not asked again)."""
        if self._whole is None:
            if ray.cluster_resources().get(NODE_RESOURCE):
                self._whole = {"resources": {**dict(self.opts.resources), NODE_RESOURCE: 1}}
            else:
                cpus = [n["Resources"].get("CPU", 0) for n in ray.nodes()
                        if n.get("Alive") and n["Resources"].get("CPU")]
                self._whole = {"num_cpus": max(self.opts.num_cpus, min(cpus))} if cpus else {}
        return self._whole

    def poll(self, handles: list[Any]) -> list[Any]:
        unsent = [h for h in handles if isinstance(h, _Unsent)]
        refs = [h for h in handles if not isinstance(h, _Unsent)]
        if self._lost is None and refs:
            ready, _ = self._ray().wait(refs, num_returns=1, timeout=self.poll_s)
            if ready:
                return ready + unsent
            self._check_head()
        if self._lost is not None:
            return handles  # every task in flight is lost with the head
        return unsent

    def _check_head(self) -> None:
        """After `head_lost_s` without an answer from the head, it is lost (`_lost` says why)."""
        silence = self._head_silence()
        if silence is None:
            self._silent_since = None
            return
        now_s = time.monotonic()
        self._silent_since = self._silent_since or now_s
        if now_s - self._silent_since >= self.opts.head_lost_s:
            self._lost = (f"the Ray cluster's head ({self._head_address()}) has not answered for "
                          f"{self.opts.head_lost_s:g} s (head_lost_s; {silence})")
            warnings.warn(f"executor 'ray': {self._lost}: the trials still queued or running are recorded as "
                          "interrupted; once the cluster is back, the same command runs them", VitbenchWarning,
                          stacklevel=2)

    @staticmethod
    def _head_silence() -> str | None:
        """Ask the head one question (a key lookup in its GCS, HEAD_PROBE_S at most): None if it answered, else
        why not. (A Ray without this client: None, and Ray's own timeout decides.)"""
        from ray._private import worker as ray_worker

        gcs = getattr(ray_worker.global_worker, "gcs_client", None)
        if gcs is None or not hasattr(gcs, "internal_kv_get"):
            return None
        try:
            gcs.internal_kv_get(b"vitbench-probe", b"vitbench", timeout=HEAD_PROBE_S)
        except Exception as e:  # noqa: BLE001 - any failure to answer is silence
            return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
        return None

    def _head_address(self) -> str:
        from ray._private import worker as ray_worker

        address = getattr(getattr(ray_worker.global_worker, "node", None), "gcs_address", None)
        return f"GCS at {address}" if address else f"address {self.opts.address!r}"

    def _lost_row(self, job: Job, **info) -> Outcome:
        return stored_row(self.results, job) or Outcome(failure(
            job, Status.INTERRUPTED, "RayHeadLost", f"{self._lost}: the trial's task is lost with it; the trial "
            "runs again next time", **info))

    def collect(self, job: Job, ref: Any) -> Outcome:
        if isinstance(ref, _Unsent):
            return self._lost_row(job, executor=self.name)
        info = {"executor": self.name, "task_id": ref.task_id().hex()}
        if self._lost is not None:
            with contextlib.suppress(Exception):  # (no head needed: the driver owns the task) stop it if it runs
                self._ray().cancel(ref, force=True)
            return self._lost_row(job, **info)
        ray = self._ray()
        from ray import exceptions as rx

        try:
            outcome = ray.get(ref)
        except Exception as e:  # noqa: BLE001 - every way a task can die becomes a row
            found = stored_row(self.results, job)
            if found is not None:
                return found
            if isinstance(e, rx.OutOfMemoryError):
                status, msg = Status.OOM, "Ray's memory monitor killed the task (node out of memory)"
            elif isinstance(e, rx.TaskCancelledError):
                status, msg = Status.INTERRUPTED, "the Ray task was cancelled"
            elif any(c.__name__ in _LOST for c in type(e).__mro__):
                status, msg = Status.INTERRUPTED, (f"the Ray task was lost with its worker or node "
                                                   f"({type(e).__name__}); the trial runs again next time")
            else:
                status, msg = Status.ERROR, f"the Ray task failed: {type(e).__name__}"
            lines = str(e).strip().splitlines()
            return Outcome(failure(job, status, type(e).__name__, msg, tail="\n".join(lines[-20:]) or None,
                                   **info))
        if not isinstance(outcome, Outcome):
            return Outcome(failure(job, Status.ERROR, "BadResult", f"task returned {type(outcome).__name__}",
                                   **info))
        outcome.record.runner.update(info)
        return outcome

    def cancel(self, running: list[tuple[Job, Any]]) -> list[Outcome]:
        """Force-cancel every running task, again each CANCEL_RETRY_S until all have ended (their workers killed,
        their trial locks released) or grace_s + 10 s have passed: one cancel is not always enough. With one,
        a task cancelled right after it was submitted ran on to its end in 2 of 13 runs of
        tests/test_executors.py's Ctrl-C test (ray 2.60, 2 cores; and once in a full suite): still running
        grace_s + 10 s later, it then measured beside the resumed sweep and wrote an `ok` row after its
        `interrupted` one. Cancelling an ended task does nothing (Ray's docs), so asking again is safe. A task
        still not ended at the deadline is said, in a warning and in its row: it may still measure."""
        refs = [ref for _, ref in running if not isinstance(ref, _Unsent)]
        if refs:
            ray = self._ray()
            wait_s = self.opts.grace_s + 10
            deadline = time.monotonic() + wait_s
            while refs:
                for ref in refs:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref, force=True)
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:  # let the killed workers go (and release their trial locks)
                    _, refs = ray.wait(refs, num_returns=len(refs), timeout=min(CANCEL_RETRY_S, left))
                except Exception:  # noqa: BLE001 - the head is gone: nothing more to ask
                    break
        alive = {id(ref) for ref in refs}
        if alive:
            warnings.warn(f"executor 'ray': {len(alive)} cancelled task(s) had not ended {wait_s:g} s later and "
                          "may still be measuring (`ray list tasks --filter state=RUNNING`); a sweep resumed now "
                          "may measure beside them", VitbenchWarning, stacklevel=2)
        return [stored_row(self.results, job) or Outcome(failure(
            job, Status.INTERRUPTED, "KeyboardInterrupt", "the sweep was interrupted; its Ray task was cancelled"
            + (f", but had not ended {wait_s:g} s later: it may still be running" if id(ref) in alive else ""),
            executor=self.name, **({} if isinstance(ref, _Unsent) else {"task_id": ref.task_id().hex()})))
            for job, ref in running]
