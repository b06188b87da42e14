"""A command's option defaults are its task's field defaults (the one declaration, tasks' Params): the same
measurement asked from the command line or from a study is the same trial, with the same key."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import vitbench.cli.measure_cmd as measure_cmd
from vitbench.cli import app
from vitbench.cli import common
from vitbench.study import parse_study, trial_key
from vitbench.tasks import get_task

MODEL = "ViT-Nano/4"


class _Captured(Exception):
    """Raised by the stand-in for task_params: the command stops before measuring anything."""


def _command_params(monkeypatch, argv: list[str]) -> tuple[str, dict, object]:
    """(task name, the values the command passed on, their validated Params) for `vitbench ARGV`."""
    seen: dict = {}
    real = common.task_params

    def capture(task_name, names=None, **values):
        seen.update(task=task_name, values=values, params=real(task_name, names, **values)[1])
        raise _Captured

    monkeypatch.setattr(measure_cmd, "task_params", capture)
    res = CliRunner().invoke(app, argv)
    assert isinstance(res.exception, _Captured), res.output
    return seen["task"], seen["values"], seen["params"]


@pytest.mark.parametrize("argv", [["bench", MODEL], ["bench", MODEL, "--task", "train"], ["max-batch", MODEL],
                                  ["flops", MODEL]])
def test_every_option_default_is_its_fields_default(monkeypatch, argv):
    task, values, _ = _command_params(monkeypatch, argv)
    fields = get_task(task).Params.model_fields
    differ = {k: (v, fields[k].get_default(call_default_factory=True)) for k, v in values.items()
              if k in fields and k != "model" and v is not None
              and v != fields[k].get_default(call_default_factory=True)}
    assert not differ, f"`vitbench {argv[0]}` option defaults (left) differ from the task's fields: {differ}"


@pytest.mark.parametrize("task", ["infer", "train"])
def test_bench_with_no_options_is_the_studys_default_trial(monkeypatch, task):
    _, _, params = _command_params(monkeypatch, ["bench", MODEL, "--task", task])
    study = parse_study(f"name: defaults\naxes:\n  model: [{MODEL}]\n  task: [{task}]\n", "defaults.yaml")
    (trial,) = study.trials
    assert trial.config == params.config()
    assert trial_key(trial.config) == trial_key(params.config())


def test_transfer_defaults_keep_their_keys():
    """The default pretrain / fewshot / finetune trials keep main's keys, and the three commands with no options
    build main's configs (pretrain: the same checkpoint cache name), now that their defaults come from the config
    classes and fewshot / finetune share DownstreamConfig (tests/transfer_keys.py wrote the golden file from
    main at a509195; exact: keys and configs are strings, integers and declared floats)."""
    import json
    from pathlib import Path

    from transfer_keys import collect

    then = json.loads((Path(__file__).parent / "data" / "transfer_keys_a509195.json").read_text())
    now = json.loads(json.dumps(collect()))
    for task in then["trials"]:
        assert now["trials"][task]["key"] == then["trials"][task]["key"], task
    for cmd in then["commands"]:
        assert now["commands"][cmd] == then["commands"][cmd], cmd
    assert now == then
