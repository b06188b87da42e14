"""Shared CLI helpers: consoles, JSON output, and building a task's parameters from command-line options."""

from __future__ import annotations

import json
import sys

from rich.console import Console

from vitbench.errors import ConfigError

console = Console()
err_console = Console(stderr=True)


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def backend_choices() -> str:
    """'torch | jax': the registered backends, for help texts."""
    from vitbench.backends.base import backend_names

    return " | ".join(backend_names())


def task_params(task_name: str, **values):
    """(task class, its validated Params) from command-line values; a bad value is a ConfigError naming the
    option (--min-seconds) and what it must be."""
    from pydantic import ValidationError

    from vitbench.backends.base import backend_spec
    from vitbench.tasks import get_task

    task = get_task(task_name)
    try:
        params = task.Params.model_validate({"task": task.name, **{k: v for k, v in values.items()
                                                                   if v is not None}})
    except ValidationError as e:
        problems = []
        for x in e.errors():
            option = "--" + str(x["loc"][0]).replace("_", "-") if x["loc"] else "input"
            got = f" (got {x['input']!r})" if "input" in x and x["type"] != "missing" and x["loc"] else ""
            problems.append(f"{option}: {x['msg'].removeprefix('Value error, ')}{got}")
        raise ConfigError("; ".join(problems)) from None
    config = params.config()
    if "backend" in config:  # what the backend cannot do fails here, not in the middle of a measurement
        problems = backend_spec(config["backend"]).problems(config, task.needs)
        if problems:
            raise ConfigError("; ".join(f"--{f.replace('_', '-')}: {msg}" for f, msg in problems))
    return task, params
