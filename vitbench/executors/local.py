"""The local executor: trials one after another on this machine, each in a fresh child process.

Sequential on purpose: two timing trials sharing a machine would measure each other.

Isolation. Every trial is a new process, so allocator state, CUDA contexts, XLA clients and leaked memory never
reach the next trial. The default start method is a *fork server* per backend (vitbench.forkservers): each imports
vitbench's trial modules and its backend's preload list (the spec's `preload`: the framework imported, no device
touched, no client started) once, the first time a trial of that backend runs, and each trial is a fresh fork of
its backend's clean server: it starts in milliseconds instead of paying the framework import, and a trial of one
backend never inherits another's framework. `start_method="spawn"` gives a bare interpreter per trial (slower,
nothing shared at all); the `preload` option gives every trial one server with that list instead. Where there is no
fork server (Windows, a Python without what vitbench.forkservers uses) trials are spawned; on macOS too unless
`start_method="forkserver"` is asked for by name (a fork of a server that imported torch or JAX is unsafe there:
vitbench.forkservers.ON_MACOS). Each row says why (`runner.start_method_note`).

Failure handling. A per-trial timeout (SIGTERM, then SIGKILL after a grace period); a host-memory budget
(vitbench.memory_budget: `memory_limit_gib`, else $VITBENCH_MEMORY_LIMIT_GIB, else half the memory available when
the trial starts): a trial whose resident memory passes it is stopped at once and its row says 'oom', before the
kernel's OOM killer would pick a process; a child that dies without a result (segfault, the OOM killer) becomes an
'error' row with the tail of its output; a child stopped by a stop signal (vitbench.executors.STOP_SIGNALS: SIGTERM,
SIGHUP, SLURM's preemption warning SIGUSR2) is 'interrupted', and so is the running child when the sweep gets
Ctrl-C or one of those signals itself (`vitbench sweep`; the child is stopped). A record a child has measured is
written whole before a stop signal can end it (the signal is held while it is written). The budget
holds for the trial's process tree (its ranks and data workers: vitbench.memory_budget.TreeMemory), stopped whole;
max-batch probes, forked by a fork server rather than by the trial, are watched by their search. Children
ignore SIGINT (the parent owns it) and end when the sweep does: a spawned one by the kernel's parent-death signal
(PR_SET_PDEATHSIG), a forked one (whose parent is its fork server) when the pipe only the sweep holds the other end
of reports EOF (vitbench.forkservers.process), so a `kill -9` of the sweep leaves no orphan still measuring while a
resumed sweep runs.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, PositiveFloat, field_validator, model_validator

from vitbench import forkservers, memory_budget
from vitbench.executors import STOP_SIGNALS, Executor, Job, Outcome, failure, register_executor
from vitbench.procmem import die_with_parent
from vitbench.record import OVERLAPPED, Record, Status, now
from vitbench.store import LOGS_DIR, linked, log_path, open_in_store

_LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC  # opened by open_in_store: never through a link (store.py)

# Imported once by every fork server besides its backend's own preload list (vitbench.backends.base.BackendSpec).
PRELOAD = ("vitbench.trial", "vitbench.measure.throughput", "vitbench.measure.max_batch", "vitbench.measure.flops",
           "vitbench.measure.peak", "vitbench.env", "vitbench.executors.warm")


# Suffix of the marker file a trial process creates as soon as it runs vitbench's code (its start marker).
STARTED = ".started"


def backend_preload(job: Job) -> tuple[str, ...]:
    """What the fork server of `job`'s backend imports: PRELOAD and the backend's own list (none for a job
    without a backend, or one whose framework is missing here: the trial then fails with the backend's message)."""
    from vitbench.registry import Kind, entries

    e = entries(Kind.BACKEND).get(job.config.get("backend"))
    return (*PRELOAD, *(e.obj.preload if e is not None and not e.missing() else ()))


def _child_main(job: Job, result_path: str, log_path: str) -> None:
    """Entry point of the trial process: output to the log file, run the trial (registered in the host's
    registry of running trials, vitbench.executors.overlap), write the record as JSON. A forked trial ends with
    the sweep through its fork server's requester pipe (vitbench.forkservers.process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the sweep, which stops us cleanly
    die_with_parent()  # a spawned trial's parent is the sweep
    if os.getppid() == 1:
        os._exit(1)  # our parent died before the death signal was armed
    try:
        Path(result_path + STARTED).touch()  # reached: a crash from here on is not a start-up failure
    except OSError:  # the sweep's temporary directory is gone: it ended (Ctrl-C while this trial was forked)
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = open_in_store(Path(log_path), _LOG_FLAGS, "trial log")  # checked by the sweep; again: a link made since
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from vitbench.executors.overlap import Presence
    from vitbench.trial import run_trial

    with Presence(f"{job.study}/{job.key}", job.run_id) as presence:
        rec = run_trial(job)
    rec.runner[OVERLAPPED] = presence.overlapped
    # measured: a stop signal now waits until the record is whole in its place (the sweep then keeps it), then
    # ends the process as it would have (a handler, not a signal mask: any thread of the process may take it)
    held: list[int] = []
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, frame: held.append(signum))
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec.to_dict(), f, allow_nan=False, default=str)
    os.replace(tmp, result_path)
    for signum in held[:1]:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    sys.stdout.flush()
    sys.stderr.flush()


def _close(h: _Running) -> None:
    """Reap the trial, which has ended: a forked one's requester pipe is let go with it (ServerProcess.join)."""
    h.proc.join(0)


def tail_file(path: Path, lines: int = 20, max_bytes: int = 65536) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class LocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # inf: a wait never ending
    start_method: Literal["forkserver", "spawn"] = "forkserver"
    preload: tuple[str, ...] | None = None  # one fork server's imports for all (None: one server per backend)
    keep_logs: bool = False  # keep every trial's output under <results>/logs/, not only failures'
    grace_s: PositiveFloat = 5.0  # after a trial's timeout: SIGTERM, then SIGKILL this much later
    memory_limit_gib: PositiveFloat | None = None  # a trial's host-memory budget (None: vitbench.memory_budget)

    @field_validator("preload")
    @classmethod
    def _importable(cls, names: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """CPython's fork server skips a preload module it cannot import, in silence (multiprocessing.forkserver:
        `except ImportError: pass`): a misspelt name was accepted and preloaded nothing."""
        import importlib.util

        for name in names or ():
            try:
                found = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                raise ValueError(f"module {name!r} cannot be imported here, so the fork server would skip it")
        return names

    @model_validator(mode="after")
    def _forked(self) -> LocalOptions:
        if self.preload and self.start_method == "spawn":
            raise ValueError("preload is what the fork server imports once for every trial; with start_method "
                             "spawn each trial starts a fresh interpreter and nothing is preloaded")
        return self


@dataclass
class _Running:
    proc: mp.Process
    result: Path
    log: Path
    started_at: str
    t0: float
    deadline: float  # time.time() after which the trial is stopped as timed out
    budget_mib: float  # resident memory past which the trial is stopped as out of memory
    memory: memory_budget.TreeMemory | None = None  # the trial's process tree, read against budget_mib
    timed_out: bool = False
    over_budget_mib: float | None = None  # the resident memory it was stopped at


@register_executor
class LocalExecutor(Executor):
    """Sequential trials on this machine, one fresh process each (see the module docstring)."""

    name = "local"
    Options = LocalOptions
    description = "trials one after another on this machine, each in a fresh process (fork server)"
    poll_s = 3600.0  # `poll` returns when the child ends or its timeout comes, whichever is first

    def __init__(self, results_dir: str | Path | None = None, **options):
        super().__init__(results_dir, **options)
        self.start_method, self.start_method_note = self.opts.start_method, None
        why = forkservers.unavailable if self.start_method == "forkserver" else None
        if why == forkservers.ON_MACOS and "start_method" in self.opts.model_fields_set:
            why = None  # asked for by name (an option or the study's): the servers run on macOS, at that risk
        if why:
            self.start_method, self.start_method_note = "spawn", (
                f"spawned by default on {why}; start_method forkserver forks anyway" if why == forkservers.ON_MACOS
                else f"no fork server: {why}")
        self.log_dir = self.results_dir / LOGS_DIR if self.results_dir is not None else None
        self._tmp = tempfile.TemporaryDirectory(prefix="vitbench-trials-")

    @property
    def max_parallel(self) -> int:
        return 1

    def close(self) -> None:
        self._tmp.cleanup()

    # ---------------------------------------------------------------------------------------------------
    def submit_one(self, job: Job) -> _Running:
        result = Path(self._tmp.name) / f"{job.key}.json"
        log = log_path(self.results_dir if self.log_dir else Path(self._tmp.name), job.key)
        if log.parent.is_symlink():  # a link there is refused (PathError naming it), not emptied by the trial
            raise linked(log.parent, f"the store's {LOGS_DIR} directory")  # (opened by the trial: open_in_store)
        log.parent.mkdir(parents=True, exist_ok=True)
        if log.is_symlink():
            raise linked(log, f"log of trial {job.key}")
        for stale in (result, Path(str(result) + STARTED)):
            stale.unlink(missing_ok=True)
        args, name = (job, str(result), str(log)), f"vitbench-trial-{job.key}"
        if self.start_method == "spawn":
            proc = mp.get_context("spawn").Process(target=_child_main, name=name, args=args)
        else:
            preload = backend_preload(job) if self.opts.preload is None else self.opts.preload
            proc = forkservers.process(preload, _child_main, args, name)  # ends when this process ends
        t0 = time.time()
        run = _Running(proc, result, log, now(), t0, t0 + (job.timeout_s or float("inf")),
                       memory_budget.budget_mib(self.opts.memory_limit_gib))
        try:
            proc.start()
        except BaseException:  # Ctrl-C while the trial was being started: stop it if it came to exist
            if proc.pid is not None:
                self._stop(proc, grace_s=0.0)
            raise
        run.memory = memory_budget.TreeMemory(proc.pid)
        memory_budget.watch_apart(proc.pid)  # the sweep's own guard leaves it to us (a spawned trial is our child)
        return run

    def poll(self, handles: list[_Running]) -> list[_Running]:
        """Wait until a child ends, the nearest timeout comes or a child passes its memory budget (read every
        memory_budget.WATCH_S); stop the ones past their timeout or budget."""
        nearest = min(h.deadline for h in handles)
        mp.connection.wait([h.proc.sentinel for h in handles],
                           timeout=min(max(0.0, nearest - time.time()), self.poll_s, memory_budget.WATCH_S))
        done = []
        for h in handles:
            if not h.proc.is_alive():
                h.proc.join()
                done.append(h)
            elif (rss := h.memory.mib()) is not None and rss > h.budget_mib:
                h.over_budget_mib = rss
                self._stop(h.proc, grace_s=0.0)  # growing by the second: no time for a polite SIGTERM
                done.append(h)
            elif time.time() >= h.deadline:
                h.timed_out = True
                self._stop(h.proc)
                done.append(h)
        return done

    def cancel(self, running: list[tuple[Job, _Running]]) -> list[Outcome]:
        out = []
        for job, h in running:
            self._stop(h.proc)
            if h.result.exists():  # measured and written whole (renamed into place) just before: kept
                out.append(self.collect(job, h))
                continue
            memory_budget.end_apart(h.proc.pid)
            _close(h)
            out.append(Outcome(self._failure(job, h, Status.INTERRUPTED, "KeyboardInterrupt",
                                             "the sweep was interrupted (Ctrl-C or a stop signal) while this trial ran")))
        return out

    def collect(self, job: Job, h: _Running) -> Outcome:
        memory_budget.end_apart(h.proc.pid)
        _close(h)
        marker = Path(str(h.result) + STARTED)
        started = marker.exists()
        marker.unlink(missing_ok=True)
        if h.over_budget_mib is not None:
            about = memory_budget.describe(h.budget_mib, self.opts.memory_limit_gib).replace(
                "memory_limit_gib", "executor option memory_limit_gib")
            return Outcome(self._failure(job, h, Status.OOM, "MemoryBudgetExceeded",
                                         f"trial passed its host-memory budget of {about} with "
                                         f"{h.over_budget_mib:.0f} MiB resident ({h.memory.processes} "
                                         "process(es): the trial and what it started) and was stopped"))
        if h.timed_out:
            return Outcome(self._failure(job, h, Status.TIMEOUT, "Timeout",
                                         f"trial exceeded its timeout of {job.timeout_s:g} s and was killed"))
        wall_s = time.time() - h.t0
        if h.result.exists():
            try:
                rec = Record.from_dict(json.loads(h.result.read_text()))
            except ValueError as e:
                return Outcome(self._failure(job, h, Status.ERROR, "CorruptResult", str(e)))
            finally:
                h.result.unlink(missing_ok=True)
            entered = rec.runner.pop("entered_at_unix", None)
            first_step = rec.runner.pop("first_step_at_unix", None)
            # startup_s: process start -> the trial's code; to_first_step_s: -> its first measured step
            # (vitbench.phases), None for a trial that times no step
            rec.runner.update(wall_s=wall_s, **self._how(), exitcode=h.proc.exitcode,
                              startup_s=(entered - h.t0) if entered else None,
                              to_first_step_s=(first_step - h.t0) if first_step else None)
            if rec.status is Status.OK and not self.opts.keep_logs:
                with contextlib.suppress(OSError):
                    h.log.unlink()
            else:
                rec.runner["log"] = str(h.log) if self.log_dir else None
            return Outcome(rec)
        how = _signal_name(h.proc.exitcode)
        if h.proc.exitcode in [-s for s in STOP_SIGNALS]:
            return Outcome(self._failure(job, h, Status.INTERRUPTED, "TrialCancelled",
                                         f"trial process was stopped from outside ({how}): its job was cancelled "
                                         "or preempted; it runs again next time"))
        hint = ""
        if h.proc.exitcode == -signal.SIGKILL:
            hint = " (SIGKILL from outside: the kernel's OOM killer?)"
        elif not started:
            hint = (" before the trial started. Calling vitbench from a script? Put the call under "
                    "`if __name__ == '__main__':` (multiprocessing re-imports the main module in each trial)")
        return Outcome(self._failure(job, h, Status.ERROR, "TrialCrashed",
                                     f"trial process died without a result: {how}{hint}"))

    # ---------------------------------------------------------------------------------------------------
    def _stop(self, proc, grace_s: float | None = None) -> None:
        """Stop a trial and everything it started (e.g. max-batch probe processes): SIGTERM, then SIGKILL."""
        import psutil

        try:
            tree = psutil.Process(proc.pid).children(recursive=True) if proc.pid else []
        except psutil.Error:
            tree = []
        if proc.is_alive() and (self.opts.grace_s if grace_s is None else grace_s) > 0:
            proc.terminate()
            proc.join(self.opts.grace_s if grace_s is None else grace_s)
        if proc.is_alive():
            proc.kill()
            proc.join()
        for child in tree:
            with contextlib.suppress(psutil.Error):
                child.kill()

    def _how(self) -> dict:
        """How the trial process was started, for its row: runner.start_method, and runner.start_method_note
        where it is not the method asked for (why)."""
        return {"start_method": self.start_method,
                **({"start_method_note": self.start_method_note} if self.start_method_note else {})}

    def _failure(self, job: Job, h: _Running, status: Status, etype: str, message: str) -> Record:
        return failure(job, status, etype, message, tail=tail_file(h.log), started_at=h.started_at,
                       wall_s=time.time() - h.t0, **self._how(), exitcode=h.proc.exitcode,
                       log=str(h.log) if self.log_dir else None)
