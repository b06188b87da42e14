"""A study field may be written as the nested config path it sets (issue 52, item 1): `upstream.lr` for
`pretrain_lr`, `data.workers` for `data_workers`, in a study file and in `sweep --set`. The paths are generated
from the tasks' tables (TaskParams.field_paths), read as the field's name, so a trial's key does not depend on
the spelling; an unknown path is named with the close ones and the allowed paths (bounded)."""

from __future__ import annotations

import pytest

from vitbench.errors import ConfigError
from vitbench.study import load_study, parse_study
from vitbench.study.paths import LISTED_CHARS, field_paths
from vitbench.tasks import tasks

BASE = ("name: s\ndefaults: {model: ViT-Nano/4, backend: torch, device: cpu, threads: 1, pretrain_steps: 2}\n"
        "axes:\n  task: [pretrain, fewshot, finetune]\n")


def test_every_path_names_a_field_of_its_task_and_no_field_has_a_dot():
    paths = field_paths()
    assert paths["upstream.lr"] == "pretrain_lr" and paths["data.workers"] == "data_workers"
    assert paths["upstream.teacher.lam"] == "distill_lambda" and paths["upstream.data.tfds_name"] == \
        "upstream_tfds_name" and paths["real_input.name"] == "real_input_dataset"
    for name, task in tasks().items():
        fields = task.Params.model_fields
        assert not [f for f in fields if "." in f], name  # a path is told from a field by its dot
        for path, field in task.Params.field_paths().items():
            assert "." in path and field in fields, (name, path, field)


def test_a_study_written_with_paths_has_the_keys_of_the_one_written_with_fields():
    by_field = parse_study(BASE + "  pretrain_lr: [0.01, 0.02]\n  data_workers: [2]\n  upstream_workers: [1]\n")
    by_path = parse_study(BASE + "  upstream.lr: [0.01, 0.02]\n  data.workers: [2]\n"
                                 "  upstream.data.workers: [1]\n")
    assert [t.key for t in by_path.trials] == [t.key for t in by_field.trials]
    assert len(by_path.trials) == 6 and {t.config["pretrain_lr"] for t in by_path.trials} == {0.01, 0.02}
    # the other blocks too: defaults, include, exclude
    mixed = parse_study(BASE.replace("pretrain_steps: 2}", "pretrain_steps: 2, upstream.lr: 0.01}")
                        + "  data.workers: [2]\n  upstream.data.workers: [1]\n"
                        "include: [{task: fewshot, upstream.lr: 0.02}]\n"
                        "exclude: [{task: finetune, data.workers: 2}]\n")
    assert {(t.config["task"], t.config["pretrain_lr"]) for t in mixed.trials} == {
        ("pretrain", 0.01), ("fewshot", 0.01), ("fewshot", 0.02)}


def test_sweep_set_takes_a_path():
    # a study whose trials read both (the smoke study reads neither: --set of them is refused there now)
    by_field = load_study("transfer-digits", check_paths=False, sets={"pretrain_lr": 0.5, "data_workers": 2})
    by_path = load_study("transfer-digits", check_paths=False, sets={"upstream.lr": 0.5, "data.workers": 2})
    assert [t.key for t in by_path.trials] == [t.key for t in by_field.trials]
    plain = load_study("transfer-digits", check_paths=False)
    set_keys = {t.key for t in by_path.trials if t.config.get("pretrain_lr") == 0.5}
    assert set_keys and not set_keys & {t.key for t in plain.trials}  # what was set is in the keys


def test_an_unknown_path_is_named_with_the_close_ones_and_the_allowed_paths_bounded():
    with pytest.raises(ConfigError) as e:
        parse_study(BASE + "  upstream.lrr: [0.01]\n")
    msg = str(e.value)
    assert "axes.upstream.lrr: unknown path 'upstream.lrr'. Did you mean upstream.lr" in msg
    assert "Allowed paths: " in msg and "more (each task's paths" in msg
    assert len(msg) < LISTED_CHARS + 400  # the CLI's one-line bound is 2 KiB
    with pytest.raises(ConfigError, match=r"--set unknown path 'data\.wrokers'\. Did you mean data\.workers"):
        load_study("smoke", check_paths=False, sets={"data.wrokers": 2})


def test_a_bad_value_written_at_a_path_is_reported_there():
    with pytest.raises(ConfigError, match=r"s\.yaml:6: zip\[0\]\.upstream\.lr\[1\]: Input should be a valid "
                                          r"number"):
        parse_study(BASE + "zip:\n  - {upstream.lr: [0.1, x], data.workers: [1, 2]}\n", "s.yaml")
    with pytest.raises(ConfigError, match=r"the command line: --set upstream\.data\.workers: Input should be "
                                          r"greater than or "):
        load_study("smoke", check_paths=False, sets={"upstream.data.workers": -1})


def test_a_bad_value_set_on_the_command_line_is_reported_there_not_at_a_line_of_the_file():
    """`sweep studies/ci.yaml --set batch_size=0` was reported at `ci.yaml:17: defaults.batch_size`, a line that
    says 16; a path that does not exist at a line of a study that names no path at all."""
    with pytest.raises(ConfigError) as e:
        load_study("smoke", check_paths=False, sets={"batch_size": 0})
    assert "the command line: --set batch_size: Input should be greater than 0 (got 0)" in str(e.value)
    assert ".yaml:" not in str(e.value).split("\n", 1)[1]


def test_a_check_across_fields_names_the_command_line_for_a_field_set_there():
    """A check across fields (serve's schedule bound) was reported at a line of the study file although --set
    gave the value; it is reported where the field it names came from."""
    text = "name: s\naxes: {model: [ViT-Nano/4], task: [serve], scenario: [Server]}\n"
    with pytest.raises(ConfigError) as e:
        parse_study(text, "s.yaml", sets={"target_qps": 0.0001})
    assert "the command line: --set target_qps: for task 'serve': target_qps 0.0001 schedules" in str(e.value)
    in_file = r"s\.yaml:3: defaults\.target_qps: for task 'serve': target_qps 0\.0001"
    with pytest.raises(ConfigError, match=in_file):
        parse_study(text + "defaults: {target_qps: 0.0001}\n", "s.yaml")


def test_a_field_given_by_its_name_and_its_path_in_one_block_is_refused():
    with pytest.raises(ConfigError, match=r"axes\.upstream\.lr: pretrain_lr is set twice here \(as upstream\.lr "
                                          r"and as pretrain_lr\): keep one"):
        parse_study(BASE + "  upstream.lr: [0.01]\n  pretrain_lr: [0.02]\n")


NANO = "ViT-Nano/4"


@pytest.mark.parametrize("by_path,by_flag", [
    (["pretrain", NANO, "--set", "upstream.lr=0.002", "--set", "upstream.steps=3", "--set", "depth=2"],
     ["pretrain", NANO, "--lr", "0.002", "--steps", "3", "--set", "depth=2"]),
    (["fewshot", "--model", NANO, "--set", "upstream.steps=3", "--set", "data.workers=1",
      "--set", "data.classes=5-9"],
     ["fewshot", "--model", NANO, "--pretrain-steps", "3", "--data-workers", "1", "--classes", "5-9"]),
    (["finetune", "--model", NANO, "--pretrain-steps", "3", "--set", "upstream.data.workers=1"],
     ["finetune", "--model", NANO, "--pretrain-steps", "3"]),
], ids=["pretrain", "fewshot", "finetune"])
def test_a_transfer_commands_set_takes_a_path(monkeypatch, by_path, by_flag):
    """`--set PATH=VALUE` on pretrain, fewshot and finetune sets the field of that path (a dotted key; any other
    is an architecture override, as before): the task runs with the Params the flags give."""
    from test_commands_are_tasks import _caught

    task, params = _caught(monkeypatch, by_path)
    want_task, want = _caught(monkeypatch, by_flag)
    if by_path[0] == "finetune":  # no flag sets the upstream's data workers: the field itself
        want = want.model_copy(update={"upstream_workers": 1})
    assert task == want_task and params.config() == want.config()


def test_a_transfer_commands_bad_path_or_value_is_named_by_its_path():
    from typer.testing import CliRunner

    from vitbench.cli import app

    r = CliRunner().invoke(app, ["pretrain", NANO, "--set", "upstream.lrr=0.1"])
    assert r.exit_code == 2 and "--set unknown path 'upstream.lrr'. Did you mean upstream.lr" in r.output
    r = CliRunner().invoke(app, ["fewshot", "--model", NANO, "--set", "data.workers=-1"])
    assert r.exit_code == 2 and "--set data.workers: " in r.output, r.output
