"""`vitbench sweep STUDY --set FIELD=VALUE`: a shipped study on the user's data, without editing it."""

from __future__ import annotations

import json

STUDY = """
name: set-test
defaults:
  device: cpu
  dataset: digits
  classes: "5-9"
axes:
  task: [fewshot, finetune]
  model: [ViT-Nano/4]
  shots: [1, 5]
"""


def _trials(cli, path, *sets):
    r = cli("sweep", path, "--dry-run", "--json", *[a for s in sets for a in ("--set", s)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_set_replaces_defaults_and_axes_and_enters_the_keys(tmp_path, cli):
    path = tmp_path / "s.yaml"
    path.write_text(STUDY)
    data = tmp_path / "shards"
    data.mkdir()
    plain = _trials(cli, path)
    user = _trials(cli, path, "dataset=webdataset", f"data_path={data}", "classes=0-2", "shots=5")
    assert {t["config"]["shots"] for t in plain if t["config"]["task"] == "fewshot"} == {1, 5}
    fewshot = [t for t in user if t["config"]["task"] == "fewshot"]
    assert len(fewshot) == 1 and fewshot[0]["config"]["shots"] == 5  # the axis became the one value
    for t in user:
        c = t["config"]
        assert (c["dataset"], c["data_path"], c["classes"]) == ("webdataset", str(data), "0-2")
    assert not {t["key"] for t in user} & {t["key"] for t in plain}  # the keys include what was set
    # a brace pattern is a path that exists when every shard does
    for i in range(2):
        (data / f"train-{i}.tar").write_bytes(b"")
    pattern = _trials(cli, path, "dataset=webdataset", f"data_path={data}/train-{{0..1}}.tar")
    assert all(t["config"]["data_path"].endswith("train-{0..1}.tar") for t in pattern)
    r = cli("sweep", path, "--set", "dataset=webdataset", "--set", f"data_path={data}/train-{{0..2}}.tar")
    assert r.exit_code == 2 and "no such file" in r.output, r.output


def test_set_of_an_unknown_field_or_bad_value_exits_2_naming_the_allowed_ones(tmp_path, cli):
    path = tmp_path / "s.yaml"
    path.write_text(STUDY)
    r = cli("sweep", path, "--dry-run", "--set", "datapath=/x")
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "--set 'datapath': not a study field" in text and "Did you mean data_path" in text
    assert "Allowed: " in text and "dataset" in text and "Traceback" not in r.output
    r = cli("sweep", path, "--dry-run", "--set", "dataset=imagenet")
    assert r.exit_code == 2 and "dataset" in r.output, r.output
    r = cli("sweep", path, "--dry-run", "--set", "nothing")
    assert r.exit_code == 2 and "expected KEY=VALUE" in r.output


def test_set_of_a_field_no_trial_reads_exits_2(tmp_path, cli):
    """An infer and flops study has no dataset: `--set dataset=folder` changed no trial, with no word (the keys
    stayed the shipped ones: a user who meant to run on their data got the shipped numbers). A field one of its
    tasks reads is taken, even where another task does not read it."""
    path = tmp_path / "s.yaml"
    path.write_text("name: speed\naxes:\n  task: [infer, flops]\n  model: [ViT-Nano/4]\n")
    r = cli("sweep", path, "--dry-run", "--set", "dataset=folder", "--set", f"data_path={tmp_path}")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    said = " ".join(r.stderr.split())
    assert "--set 'dataset': no trial of this study reads dataset (its tasks: flops, infer)" in said, said
    assert not (tmp_path / "results").exists()
    assert {t["config"].get("batch_size") for t in _trials(cli, path, "batch_size=4")} >= {4}  # infer reads it


def test_set_of_an_architecture_field_changes_the_trials_models(tmp_path, cli):
    """`--set depth=4` was refused on every study as read by no trial ("it would change nothing"): an
    architecture field is no task's field, it is folded into the trial's model (docs/controlled-experiments.md)."""
    path = tmp_path / "s.yaml"
    path.write_text("name: arch\naxes:\n  task: [infer, flops]\n  model: [ViT-Nano/4]\n")
    assert {t["config"]["model"] for t in _trials(cli, path, "depth=4", "posemb=none")} == {
        "ViT-Nano/4[depth=4,posemb=none]"}
