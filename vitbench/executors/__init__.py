"""Executors: where and how trials run. The runner hands jobs to one; it hands back one outcome per job.

An executor is one module that registers an `Executor` subclass (`register_executor`): its name, its options
(a pydantic model, checked when a study is loaded, before anything runs) and four primitives, `submit`, `poll`,
`collect` and `cancel`, which the one queue loop in `Executor.run` drives for every executor: keep up to
`max_parallel` jobs in flight, report each result as it arrives, and on Ctrl-C cancel what runs and report each
of those as interrupted (the row a job wrote just before the cancel is kept). Shared code never names one.

Contract: `jobs` is consumed lazily (the runner claims a trial's key as the job is drawn, so an executor that
drew everything up front would claim everything up front). `on_start(job)` when a job starts, `on_result(job,
outcome)` exactly once per job that started. An executor never raises for a failing trial: a crash, OOM or
timeout is an outcome whose record says so. Every trial runs in a fresh process (`vitbench.trial.run_trial`).
"""

from __future__ import annotations

from vitbench.executors.base import (
    Executor,
    NoOptions,
    OnResult,
    OnStart,
    Outcome,
    Stored,
    executor_class,
    failure,
    get_executor,
    gpus_wanted,
    is_timing,
    register_executor,
    wait_until,
    wants_gpu,
)
from vitbench.executors.signals import PREEMPT_SIGNAL, STOP_SIGNALS, Stopped, stopped_by
from vitbench.job import Job, Role
from vitbench.record import now

__all__ = ["PREEMPT_SIGNAL", "STOP_SIGNALS", "Executor", "Job", "NoOptions", "OnResult", "OnStart", "Outcome", "Role",
           "Stopped", "Stored", "executor_class", "failure", "get_executor", "gpus_wanted", "is_timing", "now", "register_executor",
           "stopped_by", "wait_until", "wants_gpu"]
