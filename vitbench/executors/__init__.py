"""Executors: where and how trials run. The runner hands jobs to one; it hands back one record per job.

The seam (issue 7 adds `slurm` via submitit and `ray` beside `local`):

    class Executor:
        name: str
        def run(self, jobs: Iterable[dict], on_start, on_result) -> None

`jobs` is consumed lazily: the runner claims a trial's key (vitbench.store.Store.claim) as the job is drawn,
so an executor that draws everything up front claims everything up front. A job is a JSON-able dict built by
vitbench.runner: {key, study, study_sha, run_id, repeat, config, task_module, timeout_s}; run it with
`vitbench.trial.run_trial(job)` in a fresh process. `on_start(job)` when a job starts, `on_result(job, record)`
exactly once per job that started, as results arrive (the runner stores it at once, unless the record's
`runner.stored` says a worker already wrote it into a shard of the store: vitbench.executors.remote). An executor
never raises
for a failing trial (crash, OOM, timeout become records); on KeyboardInterrupt it stops its running trials,
reports each as status 'interrupted' through `on_result`, and re-raises.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

from vitbench.errors import ConfigError

OnStart = Callable[[dict], None]
OnResult = Callable[[dict, dict], None]


class Executor(ABC):
    """Runs trial jobs and reports a record for each (see the module docstring for the contract)."""

    name: str = "?"

    @abstractmethod
    def run(self, jobs: Iterable[dict], on_start: OnStart, on_result: OnResult) -> None: ...

    def close(self) -> None:
        """Release workers/servers held by the executor."""

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ConfigError for options this executor does not take (run when a study is loaded, so a bad
        `executor:` block fails before anything runs). Default: the constructor's keyword arguments."""
        import inspect

        try:
            inspect.signature(cls.__init__).bind(None, **options)
        except TypeError as e:
            allowed = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
            raise ConfigError(f"executor {cls.name!r}: {e}; allowed options: {', '.join(allowed)}") from None


# name -> "module:Class". slurm and ray import submitit / ray only when they run (the [cluster] extra).
EXECUTORS: dict[str, str] = {
    "local": "vitbench.executors.local:LocalExecutor",
    "slurm": "vitbench.executors.slurm:SlurmExecutor",
    "ray": "vitbench.executors.ray:RayExecutor",
}


def executor_class(name: str) -> type[Executor]:
    """The class registered under `name` (ConfigError naming the allowed names otherwise)."""
    import importlib

    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}; allowed: {', '.join(EXECUTORS)}")
    mod, cls = EXECUTORS[name].split(":")
    try:
        return getattr(importlib.import_module(mod), cls)
    except ImportError as e:
        from vitbench.errors import BackendUnavailable

        raise BackendUnavailable(f"executor {name!r} needs an optional extra: {e}") from e


def get_executor(name: str, **options) -> Executor:
    """Instantiate an executor by name with its options (from the study's `executor` block or the CLI)."""
    klass = executor_class(name)
    try:
        return klass(**options)
    except TypeError as e:
        raise ConfigError(f"executor {name!r}: bad options {sorted(options)}: {e}") from e
