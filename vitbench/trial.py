"""Running one trial job in this process: the task's measurement, or a failure row; never raises for a trial.

Executors (vitbench.executors) call `run_trial(job)` in a fresh process per trial. The task is looked up in the
registry (its module imported first when it is a plug-in registered outside vitbench's own modules); its Params
validate the job's config; whatever it returns or raises becomes the record, with the job's identity attached
(`Record.for_job`): an exception is an 'oom' or 'error' row with the traceback's last lines, a training
divergence a 'diverged' row with its step, and an 'ok' record without its task's headline metric (null, not a
finite number) an 'error' row: no row is ok without its measure.
"""

from __future__ import annotations

import importlib
import os
import time
import traceback
from typing import TYPE_CHECKING

from vitbench import phases, turns
from vitbench.errors import TrainingDiverged, looks_like_oom
from vitbench.record import ErrorInfo, Record, Status, now

if TYPE_CHECKING:
    from vitbench.job import Job


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def run_trial(job: Job) -> Record:
    """Run `job` here and return its record (see the module docstring)."""
    from vitbench.tasks import get_task, run_checked

    t_enter = time.time()
    phases.reset()
    started = now()
    kind = "error"
    inputs: dict[str, str | None] = {}
    t0 = time.perf_counter()
    try:
        try:
            task = get_task(job.task)
        except Exception:  # noqa: BLE001 - not registered yet: a plug-in module the parent had imported
            importlib.import_module(job.task_module)
            task = get_task(job.task)
        kind = task.kind
        inputs = input_sha256(task, job.config)  # the files it reads whole, as it reads them
        # only while it holds the turn, where `vitbench ab --schedule turns` shares a CPU; the label is the same on
        # both sides, so the referee starts their same trial together
        with turns.held(f"{job.role.value} {job.key}"):
            rec = run_checked(task, task.Params.model_validate(job.config))
    except TrainingDiverged as e:  # divergence is reported as divergence, with its step
        rec = Record.measured(kind, job.config, status=Status.DIVERGED, error=ErrorInfo.of(e),
                              metrics={"diverged_step": e.step}, started_at=started)
    except Exception as e:  # noqa: BLE001 - failures are rows
        status = Status.OOM if looks_like_oom(e) else Status.ERROR
        rec = Record.failed(kind, job.config, status, ErrorInfo.of(e, _tail(traceback.format_exc())), started)
    rec = rec.for_job(job)
    rec.runner.update(pid=os.getpid(), task_s=time.perf_counter() - t0, entered_at_unix=t_enter,
                      first_step_at_unix=phases.first_step_at())
    if inputs:
        from vitbench.tasks.fields import INPUT_SHA256

        rec.runner[INPUT_SHA256] = inputs
    return rec


def input_sha256(task, config: dict) -> dict[str, str | None]:
    """{field: SHA-256 of the file it names} for the files a trial of `task` with `config` reads whole
    (vitbench.tasks.fields.InputFile); None for one that cannot be read (the trial then says why)."""
    from vitbench.paths import content_sha256
    from vitbench.tasks.fields import input_files

    return {f: content_sha256(p) for f, p in input_files(task.Params, config).items()}
