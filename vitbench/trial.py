"""One trial = one task on one normalised config, run in its own process; plus the registry of tasks.

A *task* maps a trial config (a plain dict) to a measurement record (vitbench.record). The registry says, per
task, which trial fields define the measurement (the rest are dropped from the config, so they never split a
trial key), which task-specific parameters a study may set (with types and defaults), and which record kind it
produces. The study schema takes its allowed task names from here, so adding a task is one `register_task` call:

    # in vitbench/transfer/tasks.py (listed in PLUGIN_MODULES below, imported lazily)
    register_task("fewshot", fewshot_task, kind="fewshot", fields=(...), params={"shots": (int, 10)})

Third-party modules can add tasks the same way and be named in $VITBENCH_TASK_MODULES (comma separated).
Nothing here imports torch or jax at import time: task functions import their backend when they run.

`run_trial(job)` runs a task in the current process and turns any exception into a failure record (status
'oom' or 'error' with the traceback's last lines). Executors (vitbench.executors) call it in a fresh process.
"""

from __future__ import annotations

import importlib
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from vitbench.errors import looks_like_oom
from vitbench.record import error_info, make_record, now

TaskFn = Callable[[dict], dict]

# Modules that register more tasks when imported (the transfer tasks live there once they exist).
PLUGIN_MODULES: list[str] = ["vitbench.transfer.tasks"]
ENV_TASK_MODULES = "VITBENCH_TASK_MODULES"

# Trial fields a task may depend on (the study schema types them; vitbench.study.FIELD_TYPES).
COMMON_FIELDS = ("model", "backend", "task", "device", "resolution", "batch_size", "precision", "compile",
                 "seed", "threads", "num_classes", "optimizer", "channels_last")


@dataclass(frozen=True)
class TaskDef:
    """A registered task.

    fields: trial fields that define the measurement (others are dropped before hashing the key).
    params: task-specific knobs {name: (type, default)}; a study may set them in `defaults`/`axes`.
    kind: the record kind the task returns ('bench', 'max_batch', ...). version: bump to invalidate old keys.
    hidden: not selectable in studies (internal tasks such as the calibration workload).
    repeat: False for deterministic tasks, which a study's `repeats` does not multiply.
    """

    name: str
    fn: TaskFn
    kind: str
    fields: tuple[str, ...]
    params: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    description: str = ""
    version: int = 1
    hidden: bool = False
    repeat: bool = True  # False: deterministic (e.g. FLOP counts), measured once whatever `repeats` says

    @property
    def module(self) -> str:
        return self.fn.__module__


_REGISTRY: dict[str, TaskDef] = {}
_plugins_loaded = False


def register_task(name: str, fn: TaskFn, *, kind: str, fields: tuple[str, ...],
                  params: dict[str, tuple[Any, Any]] | None = None, description: str = "", version: int = 1,
                  hidden: bool = False, repeat: bool = True, replace: bool = False) -> TaskDef:
    """Add a task to the registry (idempotent for the same function; `replace=True` to override)."""
    unknown = [f for f in fields if f not in COMMON_FIELDS]
    if unknown:
        raise ValueError(f"task {name!r}: unknown trial fields {unknown}; allowed: {', '.join(COMMON_FIELDS)}")
    for required in ("backend", "task"):
        if required not in fields:
            raise ValueError(f"task {name!r}: fields must include {required!r}")
    clash = [p for p in (params or {}) if p in COMMON_FIELDS]
    if clash:
        raise ValueError(f"task {name!r}: params {clash} clash with trial fields")
    td = TaskDef(name, fn, kind, tuple(fields), dict(params or {}), description, version, hidden, repeat)
    old = _REGISTRY.get(name)
    if old is not None and not replace and (old.fn.__module__, old.fn.__qualname__) != (
            fn.__module__, fn.__qualname__):
        raise ValueError(f"task {name!r} is already registered by {old.module}")
    _REGISTRY[name] = td
    return td


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    extra = [m.strip() for m in os.environ.get(ENV_TASK_MODULES, "").split(",") if m.strip()]
    for mod in [*PLUGIN_MODULES, *extra]:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name is None or not mod.startswith(e.name):  # a missing dependency inside the plugin: loud
                raise
            if mod in extra:
                raise ImportError(f"${ENV_TASK_MODULES} names {mod!r}, which cannot be imported") from e


def tasks(include_hidden: bool = False) -> dict[str, TaskDef]:
    """Every registered task (built-ins, plugin modules, $VITBENCH_TASK_MODULES)."""
    _load_plugins()
    return {n: t for n, t in _REGISTRY.items() if include_hidden or not t.hidden}


def get_task(name: str, module: str | None = None) -> TaskDef:
    """Look a task up; `module` (where it was registered in the parent) is imported first if needed."""
    if name not in _REGISTRY and module:
        importlib.import_module(module)
    if name not in _REGISTRY:
        _load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        from vitbench.errors import ConfigError

        raise ConfigError(f"unknown task {name!r}; allowed: {', '.join(sorted(tasks()))}") from None


# ---------------------------------------------------------------------------------------------------------
# Built-in tasks: thin adapters from a trial config to the measurement functions.
# ---------------------------------------------------------------------------------------------------------
_SETTINGS_FIELDS = ("model", "task", "batch_size", "resolution", "precision", "compile", "device", "threads",
                    "num_classes", "optimizer", "channels_last", "seed")


def _settings(config: dict, **override):
    from vitbench.backends.base import RunSettings

    kw = {k: config[k] for k in _SETTINGS_FIELDS if k in config}
    kw.update(override)
    return RunSettings(**kw)


def _bench_task(config: dict) -> dict:
    from vitbench.measure.throughput import bench

    return bench(_settings(config), backend=config["backend"], warmup_steps=config["warmup_steps"],
                 min_steps=config["min_steps"], min_seconds=config["min_seconds"],
                 max_seconds=config["max_seconds"])


def _max_batch_task(config: dict) -> dict:
    from vitbench.measure.max_batch import max_batch

    settings = _settings(config, task=config["mode"], batch_size=1)
    return max_batch(settings, backend=config["backend"], memory_limit_gib=config["memory_limit_gib"],
                     max_batch_size=config["max_batch_size"], start=config["start"],
                     granularity=config["granularity"], probe_timeout_s=config["probe_timeout_s"])


def _flops_task(config: dict) -> dict:
    from vitbench.measure.flops import flops

    return flops(config["model"], resolution=config["resolution"], backend=config["backend"],
                 num_classes=config["num_classes"], count=config["count"])


def _calibration_task(config: dict) -> dict:
    """The device's dense-matmul throughput, measured fresh (never cached): issue 6 divides it out."""
    from vitbench.backends.base import get_backend
    from vitbench.env import environment

    started = now()
    be = get_backend(config["backend"])
    info = be.setup(config["device"], config.get("threads"))
    vals = [be.matmul_flops_per_s(config["precision"], n=config["matmul_n"], seconds=config["seconds"]) / 1e12
            for _ in range(config["reps"])]
    vals_sorted = sorted(vals)
    metrics = {"matmul_tflops_per_s": vals_sorted[len(vals) // 2], "matmul_tflops_per_s_max": vals_sorted[-1],
               "matmul_tflops_per_s_min": vals_sorted[0]}
    return make_record("calibration", dict(config), metrics=metrics, raw={"matmul_tflops_per_s": vals},
                       env=environment(info), started_at=started)


_BENCH_FIELDS = ("model", "backend", "task", "device", "resolution", "batch_size", "precision", "compile",
                 "seed", "threads", "num_classes", "channels_last")
_BENCH_PARAMS = {"warmup_steps": (NonNegativeInt, 3), "min_steps": (PositiveInt, 10),
                 "min_seconds": (NonNegativeFloat, 1.0), "max_seconds": (PositiveFloat, 60.0)}
register_task("infer", _bench_task, kind="bench", fields=_BENCH_FIELDS, params=_BENCH_PARAMS,
              description="inference throughput (img/s, step-time stats, memory, MFU)")
register_task("train", _bench_task, kind="bench", fields=(*_BENCH_FIELDS, "optimizer"), params=_BENCH_PARAMS,
              description="training-step throughput (forward + backward + optimizer)")
register_task("max_batch", _max_batch_task, kind="max_batch",
              fields=("model", "backend", "task", "device", "resolution", "precision", "compile", "threads",
                      "num_classes", "channels_last"),
              params={"mode": (Literal["infer", "train"], "infer"), "memory_limit_gib": (PositiveFloat | None, None),
                      "max_batch_size": (PositiveInt, 4096), "start": (PositiveInt, 1), "granularity": (PositiveInt, 1),
                      "probe_timeout_s": (PositiveFloat, 600.0)},
              repeat=False, description="largest batch that fits (fresh process per probe)")
register_task("flops", _flops_task, kind="flops", fields=("model", "backend", "task", "resolution", "num_classes"),
              params={"count": (bool, True)}, repeat=False,
              description="params, analytic and counted GMACs/GFLOPs per image")
register_task("calibration", _calibration_task, kind="calibration",
              fields=("backend", "task", "device", "precision", "threads"),
              params={"matmul_n": (PositiveInt, 1024), "seconds": (PositiveFloat, 0.25), "reps": (PositiveInt, 3)},
              description="device matmul throughput, measured at the start of each sweep run", hidden=True)


# ---------------------------------------------------------------------------------------------------------
# Running one trial
# ---------------------------------------------------------------------------------------------------------
def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def run_trial(job: dict) -> dict:
    """Run `job` (from vitbench.runner: key, study, run_id, repeat, config, task_module) here; never raises
    for a failing task: the failure becomes a record with status 'oom' or 'error' and the traceback's tail."""
    t_enter = time.time()
    started = now()
    config = job["config"]
    try:
        td = get_task(config["task"], job.get("task_module"))
        kind = td.kind
    except Exception as e:  # noqa: BLE001 - an unknown task in a worker is a row, not a dead sweep
        td, kind = None, "error"
        rec = make_record(kind, config, status="error", error=error_info(e, _tail(traceback.format_exc())),
                          started_at=started)
    if td is not None:
        t0 = time.perf_counter()
        try:
            rec = td.fn(dict(config))
            if not isinstance(rec, dict) or "status" not in rec:
                raise TypeError(f"task {td.name!r} returned {type(rec).__name__}, not a record dict")
        except Exception as e:  # noqa: BLE001 - failures are rows
            status = "oom" if looks_like_oom(e) else "error"
            rec = make_record(kind, config, status=status, error=error_info(e, _tail(traceback.format_exc())),
                              started_at=started)
        task_s = time.perf_counter() - t0
    else:
        task_s = 0.0
    rec = dict(rec)
    rec.update({k: job[k] for k in ("key", "study", "study_sha", "run_id", "repeat") if k in job})
    rec["trial"] = config
    rec["runner"] = {**rec.get("runner", {}), "pid": os.getpid(), "task_s": task_s,
                     "entered_at_unix": t_enter}
    return rec
