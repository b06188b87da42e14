"""The local executor: trials one after another on this machine, each in a fresh child process.

Sequential on purpose: two timing trials sharing a machine would measure each other.

Isolation. Every trial is a new process, so allocator state, CUDA contexts, XLA clients and leaked memory never
reach the next trial. The default start method is multiprocessing's *forkserver* with torch and timm preloaded:
the server imports them once (it never touches a device: importing torch does not initialise CUDA), and each
trial is a fresh fork of that clean server, so a trial starts in milliseconds instead of paying the 2-4 s torch +
timm import. `start_method="spawn"` gives a bare interpreter per trial (slower, nothing shared at all).

Failure handling. A per-trial timeout (SIGTERM, then SIGKILL after a grace period); a child that dies without a
result (segfault, the kernel's OOM killer) becomes an 'error' row with the tail of its output; Ctrl-C kills the
running child, reports it 'interrupted' and re-raises. Children ignore SIGINT (the parent owns it) and ask the
kernel to kill them if their parent dies (PR_SET_PDEATHSIG), so a `kill -9` of the sweep leaves no orphan
still measuring while a resumed sweep runs.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from vitbench.errors import ConfigError
from vitbench.executors import Executor, OnResult, OnStart
from vitbench.procmem import die_with_parent
from vitbench.record import make_record, now

# Imported once by the fork server (torch/timm dominate a tiny trial's start-up otherwise).
DEFAULT_PRELOAD = ("vitbench.trial", "torch", "timm", "vitbench.backends.torch", "vitbench.measure.throughput",
                   "vitbench.measure.max_batch", "vitbench.measure.flops", "vitbench.measure.peak",
                   "vitbench.env")
START_METHODS = ("forkserver", "spawn")
def _child_main(job: dict, result_path: str, log_path: str) -> None:
    """Entry point of the trial process: output to the log file, run the trial, write the record as JSON."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the sweep, which stops us cleanly
    die_with_parent()
    if os.getppid() == 1:
        os._exit(1)  # our parent died before the death signal was armed
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from vitbench.trial import run_trial

    rec = run_trial(job)
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, allow_nan=False, default=str)
    os.replace(tmp, result_path)
    sys.stdout.flush()
    sys.stderr.flush()


def _tail_file(path: Path, lines: int = 20, max_bytes: int = 65536) -> str:
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


class LocalExecutor(Executor):
    """Sequential trials on this machine, one fresh process each (see the module docstring)."""

    name = "local"

    def __init__(self, start_method: str = "forkserver", preload: Sequence[str] | None = None,
                 log_dir: str | os.PathLike | None = None, keep_logs: bool = False, grace_s: float = 5.0):
        if start_method not in START_METHODS:
            raise ConfigError(f"unknown start method {start_method!r}; allowed: {', '.join(START_METHODS)}")
        if start_method == "forkserver" and "forkserver" not in mp.get_all_start_methods():
            start_method = "spawn"  # macOS/Windows: no fork server
        self.start_method = start_method
        self.ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            # '__main__' first: the server imports the main script once instead of every child doing it.
            self.ctx.set_forkserver_preload(["__main__", *(DEFAULT_PRELOAD if preload is None else preload)])
        self.log_dir = Path(log_dir) if log_dir else None
        self.keep_logs = keep_logs
        self.grace_s = grace_s
        self._tmp = tempfile.TemporaryDirectory(prefix="vitbench-trials-")

    # ---------------------------------------------------------------------------------------------------
    def run(self, jobs: Iterable[dict], on_start: OnStart, on_result: OnResult) -> None:
        for job in jobs:
            on_start(job)
            rec = self._run_one(job, on_result)
            on_result(job, rec)

    def close(self) -> None:
        self._tmp.cleanup()

    # ---------------------------------------------------------------------------------------------------
    def _paths(self, job: dict) -> tuple[Path, Path]:
        stem = f"{job['key']}"
        result = Path(self._tmp.name) / f"{stem}.json"
        log_dir = self.log_dir or Path(self._tmp.name)
        log_dir.mkdir(parents=True, exist_ok=True)
        return result, log_dir / f"{stem}.log"

    def _stop(self, proc) -> None:
        """Stop a trial and everything it started (e.g. max-batch probe processes): SIGTERM, then SIGKILL."""
        import psutil

        try:
            tree = psutil.Process(proc.pid).children(recursive=True) if proc.pid else []
        except psutil.Error:
            tree = []
        if proc.is_alive():
            proc.terminate()
            proc.join(self.grace_s)
        if proc.is_alive():
            proc.kill()
            proc.join()
        for child in tree:
            with contextlib.suppress(psutil.Error):
                child.kill()

    def _run_one(self, job: dict, on_result: OnResult) -> dict:
        result_path, log_path = self._paths(job)
        with contextlib.suppress(FileNotFoundError):
            result_path.unlink()
        timeout = job.get("timeout_s")
        started_at = now()
        t0 = time.time()
        proc = self.ctx.Process(target=_child_main, name=f"vitbench-trial-{job['key']}",
                                args=(job, str(result_path), str(log_path)))
        status = None
        try:
            proc.start()
            proc.join(timeout)
            if proc.is_alive():
                status = "timeout"
                self._stop(proc)
        except KeyboardInterrupt:
            self._stop(proc)
            rec = self._failure(job, "interrupted", started_at, t0, proc, log_path,
                                "KeyboardInterrupt", "the sweep was interrupted (Ctrl-C) while this trial ran")
            on_result(job, rec)
            raise
        wall_s = time.time() - t0
        if status is None and result_path.exists():
            try:
                rec = json.loads(result_path.read_text())
            except ValueError as e:
                rec = self._failure(job, "error", started_at, t0, proc, log_path, "CorruptResult", str(e))
            else:
                entered = rec.get("runner", {}).get("entered_at_unix")
                rec["runner"].update(wall_s=wall_s, start_method=self.start_method, exitcode=proc.exitcode,
                                     startup_s=(entered - t0) if entered else None)
                rec["runner"].pop("entered_at_unix", None)
                if rec.get("status") == "ok" and not self.keep_logs:
                    with contextlib.suppress(OSError):
                        log_path.unlink()
                else:
                    rec["runner"]["log"] = str(log_path) if self.log_dir else None
            result_path.unlink(missing_ok=True)
            return rec
        if status == "timeout":
            return self._failure(job, "timeout", started_at, t0, proc, log_path, "Timeout",
                                 f"trial exceeded its timeout of {timeout:g} s and was killed")
        how = _signal_name(proc.exitcode)
        hint = ""
        if proc.exitcode == -signal.SIGKILL:
            hint = " (SIGKILL from outside: the kernel's OOM killer?)"
        elif not _tail_file(log_path):
            hint = (" before the trial started (no output). Calling vitbench from a script? Put the call under "
                    "`if __name__ == '__main__':` (multiprocessing re-imports the main module in each trial)")
        return self._failure(job, "error", started_at, t0, proc, log_path, "TrialCrashed",
                             f"trial process died without a result: {how}{hint}")

    def _failure(self, job: dict, status: str, started_at: str, t0: float, proc, log_path: Path,
                 etype: str, message: str) -> dict:
        from vitbench.trial import get_task

        try:
            kind = get_task(job["config"]["task"], job.get("task_module")).kind
        except Exception:  # noqa: BLE001
            kind = "error"
        tail = _tail_file(log_path)
        rec = make_record(kind, job["config"], status=status, started_at=started_at,
                          error={"type": etype, "message": message, "tail": tail or None})
        rec.update({k: job[k] for k in ("key", "study", "study_sha", "run_id", "repeat") if k in job})
        rec["trial"] = job["config"]
        rec["runner"] = {"wall_s": time.time() - t0, "start_method": self.start_method,
                         "exitcode": proc.exitcode, "log": str(log_path) if self.log_dir else None}
        return rec
