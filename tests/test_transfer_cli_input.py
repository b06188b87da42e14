"""What a user trips over in the transfer commands: warm-up defaults for short runs, where `--out` writes,
checkpoint file modes, options that would be silently ignored, a batch larger than the data, values below any
sense."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from vitbench.cli import app
from vitbench.errors import ConfigError
from vitbench.transfer.checkpoint import load_checkpoint
from vitbench.protocols.pretrain import PretrainConfig, cache_path, pretrain

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = ("ViT-Nano/4", "-r", "16", "-b", "8")


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path / "cache"))  # never the repo's results/
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def test_default_warmup_fits_short_runs_and_keeps_the_keys_of_long_ones():
    assert PretrainConfig(model="ViT-Nano/4", steps=20).warmup_steps == 2
    assert PretrainConfig(model="ViT-Nano/4", steps=5).warmup_steps == 0
    assert PretrainConfig(model="ViT-Nano/4").warmup_steps == 30  # 300 steps: as before
    assert PretrainConfig(model="ViT-Nano/4").key() == PretrainConfig(model="ViT-Nano/4", warmup_steps=30).key()
    assert PretrainConfig(model="ViT-Nano/4", steps=20, warmup_steps=5).warmup_steps == 5
    with pytest.raises(ValueError, match=r"the warm-up must be shorter than the steps \(20\)"):
        PretrainConfig(model="ViT-Nano/4", steps=20, warmup_steps=20)


def test_pretrain_with_few_steps_and_out_a_directory(run, tmp_path):
    out = tmp_path / "ckpts"
    out.mkdir()
    r = run("pretrain", *TINY, "--steps", "20", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    written = out / cache_path(PretrainConfig(model="ViT-Nano/4", resolution=16, steps=20, batch_size=8)).name
    assert rec["config"]["checkpoint"] == str(written) and rec["config"]["warmup_steps"] == 2
    assert sorted(p.name for p in out.iterdir()) == sorted([written.name, written.with_suffix(".json").name])
    assert not (tmp_path / "ckpts.safetensors").exists()  # not next to the directory
    umask = os.umask(0)
    os.umask(umask)
    for p in out.iterdir():  # a new file's usual mode, not mkstemp's 0600
        assert p.stat().st_mode & 0o777 == 0o666 & ~umask, oct(p.stat().st_mode)
    assert load_checkpoint(written).meta["config"]["warmup_steps"] == 2
    # the same --out again: its own checkpoint replaced; a file of the user's there (the checkpoint's name, or
    # the .json beside it) is refused before anything runs and never overwritten (before: replaced silently)
    assert run("pretrain", *TINY, "--steps", "20", "--out", out).exit_code == 0
    for mine in (written.with_suffix(".json"), written):
        mine.write_text('{"my": "precious config"}')
        r = run("pretrain", *TINY, "--steps", "20", "--out", out)
        assert r.exit_code == 2 and "is not a vitbench checkpoint file" in " ".join(r.output.split()), r.output
        assert mine.read_text() == '{"my": "precious config"}'
        mine.unlink()


def test_a_checkpoint_pair_is_written_whole_or_not_at_all_and_out_needs_only_the_weights(run, tmp_path,
                                                                                           monkeypatch):
    """A full disk left a cache's weights without their .json: the weights counted as cached, and every later
    `pretrain --out` of that config failed on the missing .json (FileNotFoundError). Now the weights are written
    last and removed with their metadata when they cannot be; `--out` writes the .json from the weights' own
    header; a cached run's --json prints JSON alone (a 'cached upstream' line went before it)."""
    from vitbench import paths
    from vitbench.transfer import checkpoint

    real = checkpoint.write_atomic

    def weights_full(path, data):
        if ".safetensors" in path.name:  # the weights, written beside their place first
            raise paths.PathError(f"{str(path)!r} cannot be written: the disk is full")
        return real(path, data)

    cache = tmp_path / "cache"
    monkeypatch.setattr(checkpoint, "write_atomic", weights_full)
    r = run("pretrain", *TINY, "--steps", "4")
    assert r.exit_code == 2 and "cannot be written: the disk is full" in r.output, r.output
    assert not cache.exists() or not [p for p in cache.iterdir() if p.suffix in (".json", ".safetensors")]
    monkeypatch.setattr(checkpoint, "write_atomic", real)
    assert run("pretrain", *TINY, "--steps", "4").exit_code == 0
    (weights,) = cache.glob("*.safetensors")
    weights.with_suffix(".json").unlink()  # a cache of an older vitbench, left so by a full disk
    out = tmp_path / "mine.safetensors"
    r = run("pretrain", *TINY, "--steps", "4", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["metrics"]["cached"] is True  # stdout: the JSON alone
    assert json.loads(out.with_suffix(".json").read_text()) == checkpoint.read_meta(weights)


@pytest.mark.parametrize("name,expected", [("x.pt", "name it 'x.pt.safetensors' or 'x.safetensors'"),
                                           ("afile/x.safetensors", "its directory")])
def test_a_checkpoint_path_that_cannot_be_is_refused_before_training(name, expected, tmp_path, monkeypatch, run):
    (tmp_path / "afile").write_text("a file")
    import vitbench.protocols.pretrain as pre

    def trained(*a, **k):
        raise AssertionError("training started")
    monkeypatch.setattr(pre, "load_splits", trained)
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(".", r"\.")):
        pretrain(PretrainConfig(model="ViT-Nano/4", steps=2), out=tmp_path / name)
    r = run("pretrain", *TINY, "--steps", "2", "--out", tmp_path / name)
    assert r.exit_code == 2 and expected in " ".join(r.output.split()), r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


NOT_WRITTEN = "vitbench writes checkpoints as .safetensors, each with its metadata .json beside it"


@pytest.mark.parametrize("name,says", [
    ("x.npz", f"{NOT_WRITTEN}; .npz checkpoints (vit_jax / big_vision) are read but not written; name it "
              "'x.safetensors'"),
    ("out.json", ".json is the name of a checkpoint's metadata file, written beside its .safetensors weights; "
                 "name the checkpoint 'out.safetensors' (its metadata: 'out.json')"),
    ("x.pt", f"{NOT_WRITTEN}, never as pickles (.pt files usually are); name it 'x.pt.safetensors' or "
             "'x.safetensors'"),
    ("x.v2", f"{NOT_WRITTEN}; name it 'x.v2.safetensors' or 'x.safetensors'")])
def test_out_of_another_format_says_what_vitbench_writes_and_reads(name, says, tmp_path, run):
    """`--out x.npz` said ".npz files usually are" pickles: .npz is no pickle, and vitbench reads it."""
    r = run("pretrain", *TINY, "--steps", "2", "--out", tmp_path / name)
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and f"--out '{tmp_path / name}': {says}" in text, r.output
    assert ("pickle" in text) == (name == "x.pt")
    assert list(tmp_path.iterdir()) == []  # refused before training: nothing written, no cache made


def test_a_checkpoint_that_is_no_file_says_what_it_is(run, tmp_path):
    """`fewshot -c DIR` said the directory "does not exist"."""
    (tmp_path / "d").mkdir()
    (tmp_path / "gone.safetensors").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "pipe.safetensors")
    for name, says in (("d", "is a directory, not a checkpoint file"),
                       ("gone.safetensors", "is not a regular file (a device, a pipe or a broken link)"),
                       ("pipe.safetensors", "is not a regular file (a device, a pipe or a broken link)"),
                       ("none.safetensors", "does not exist")):
        with pytest.raises(ConfigError, match=re.escape(f"checkpoint '{tmp_path / name}' {says}; expected")):
            load_checkpoint(tmp_path / name)
    r = run("fewshot", "-c", tmp_path / "d", "--shots", "1", "--seeds", "2")
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and f"'{tmp_path / 'd'}' is a directory, not a checkpoint file" in text, r.output
    assert "does not exist" not in text and "Traceback" not in r.output


def test_options_a_checkpoint_would_ignore_are_refused(run, tmp_path):
    ckpt = tmp_path / "up.safetensors"
    for cmd in ("fewshot", "finetune"):
        for extra in (["--pretrain-steps", "20"], ["--pretrain-warmup-steps", "2"]):  # (--model names its model)
            r = run(cmd, "-c", ckpt, *extra)
            assert r.exit_code == 2 and f"{extra[0]} would be ignored" in r.output, r.output


def test_downstream_commands_pass_the_upstream_warmup(run, tmp_path):
    r = run("fewshot", "-m", "ViT-Nano/4", "--pretrain-steps", "20", "--pretrain-warmup-steps", "3", "-r", "16",
            "--shots", "1", "--seeds", "2", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["upstream"]["warmup_steps"] == 3
    r = run("fewshot", "-m", "ViT-Nano/4", "--pretrain-steps", "20", "-r", "16", "--shots", "1", "--seeds", "2",
            "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["config"]["upstream"]["warmup_steps"] == 2, r.output


def test_a_batch_larger_than_the_data_is_said_before_training(run, tmp_path):
    r = run("pretrain", "ViT-Nano/4", "-r", "8", "--steps", "2", "-b", "2000", "--out", tmp_path / "big")
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("warning: --batch-size 2000 is") and "training images of digits" in first, first
    quiet = run("pretrain", "ViT-Nano/4", "-r", "8", "--steps", "2", "-b", "16", "--out", tmp_path / "small")
    assert quiet.exit_code == 0 and "warning" not in quiet.output


def test_fewshot_l2_reg_must_be_positive(run):
    r = run("fewshot", "-m", "ViT-Nano/4", "--l2-reg", "-1")
    assert r.exit_code == 2 and "--l2-reg" in r.output and "greater than 0" in r.output, r.output
    assert "constrained-float" not in r.output and len(r.output.strip().splitlines()) == 1  # one line


@pytest.mark.parametrize("args", [("pretrain", "ViT-Nano/4", "--objective", "maskd_patch"),
                                  ("fewshot", "-m", "ViT-Nano/4", "--objective", "maskd_patch")])
def test_an_unknown_objective_is_refused_naming_the_option_and_the_objectives(run, args):
    r = run(*args)
    assert r.exit_code == 2, r.output
    # named as every task field a command sets (the task's Params: vitbench.cli.common.task_params)
    assert "--objective: Input should be 'supervised', 'masked_patch' or 'none' (got 'maskd_patch')" in r.output


def test_choice_parse_names_the_option_and_the_allowed_values():
    from vitbench.choices import Choice

    class Colour(Choice):
        RED = "red"
        BLUE = "blue"

    assert Colour.parse("blue", "--colour") is Colour.BLUE and f"{Colour.RED}" == str(Colour.RED) == "red"
    for bad in ("green", None, 3, "x" * 5000):
        with pytest.raises(ConfigError, match=r"^--colour .* is not allowed; allowed: red, blue$") as e:
            Colour.parse(bad, "--colour")
        assert len(str(e.value)) < 200  # user input is quoted short


@pytest.mark.parametrize("change, says", [
    ({"resolution": None}, "resolution is None; expected an integer in 1.."),
    ({"resolution": "abc"}, "resolution is 'abc'"),
    ({"num_classes": 10**9}, "num_classes is 1000000000; expected an integer in 0..65536"),
    ({"metrics": {"exaflops": -5.0}}, "metrics.exaflops is -5.0; expected a finite number >= 0"),
    ({"metrics": {"images_seen": "NaN"}}, "metrics.images_seen is 'NaN'"),
    ({"metrics": {"accuracy": float("inf")}}, "metrics.accuracy is inf; expected a finite number"),
    ({"metrics": "x"}, "metrics is 'x'; expected an object"),
    ({"objective": {"objective": "bogus"}}, "objective is 'bogus'; allowed: supervised"),
])
def test_a_checkpoint_header_vitbench_never_writes_is_refused_naming_the_field(tmp_path, change, says):
    """An edited (or another tool's) vitbench header: each field commands read is checked where the header is read
    (read_meta), a ConfigError naming the file and field (before: KeyError/AttributeError tracebacks, or a
    negative pre-training compute copied into an ok fewshot row)."""
    from safetensors.numpy import save_file

    from vitbench.transfer.checkpoint import FORMAT, read_meta

    meta = {"format": FORMAT, "model": "ViT-Nano/4", "resolution": 16, "num_classes": 10, "metrics": {}, **change}
    path = tmp_path / "ck.safetensors"
    save_file({"w": np.zeros(2, np.float32)}, str(path), metadata={"vitbench": json.dumps(meta)})
    with pytest.raises(ConfigError, match=re.escape(says)):
        read_meta(path)
    for header in ("[1, 2]", "null"):
        save_file({"w": np.zeros(2, np.float32)}, str(path), metadata={"vitbench": header})
        with pytest.raises(ConfigError, match="its vitbench metadata is a JSON .*, not an object"):
            read_meta(path)


def test_a_data_config_named_as_a_command_names_it_leaves_the_shared_defaults_alone():
    """A command's names for the data settings (`--data-path`) ride on its own copy of the config: the shared
    default (a module's DataConfig constant) keeps its config path, and neither key nor equality changes."""
    from vitbench.protocols.pretrain import UPSTREAM_DATA
    from vitbench.transfer.config import validated

    c = validated(PretrainConfig, {"model": "ViT-Nano/4"}, "x", {"data.path": "--data-path"})
    assert c.data.name_of("path") == "--data-path" and UPSTREAM_DATA.name_of("path") == "data.path"
    assert c.data == UPSTREAM_DATA and c.key() == PretrainConfig(model="ViT-Nano/4").key()


def test_a_checkpoint_trial_takes_the_resolution_it_was_trained_at_in_a_study_as_on_the_command_line(run,
                                                                                                    tmp_path):
    """`fewshot -c` took the resolution from the checkpoint, a study trial with the same settings the model's
    native one: the same settings measured two things (0.702 against 0.738; inspect's distance 8 px against
    16.5). The task's Params now take it from the file, for both; given, it is kept."""
    from vitbench.study import parse_study
    from vitbench.tasks import get_task

    ck = tmp_path / "ck16.safetensors"
    assert run("pretrain", *TINY, "--steps", "2", "--out", ck).exit_code == 0  # ViT-Nano/4 (native 32) at 16
    for task in ("fewshot", "finetune", "inspect"):
        p = get_task(task).Params.model_validate({"task": task, "model": "ViT-Nano/4", "checkpoint": str(ck)})
        assert p.resolution == 16, task
        p = get_task(task).Params.model_validate({"task": task, "model": "ViT-Nano/4", "checkpoint": str(ck),
                                                  "resolution": 32})
        assert p.resolution == 32, task
    study = parse_study(f"name: c\naxes: {{model: [ViT-Nano/4], task: [fewshot], checkpoint: ['{ck}']}}\n")
    (trial,) = study.trials
    r = run("fewshot", "-c", ck, "--shots", "10", "--seeds", "1", "--threads", "1", "--json")
    assert r.exit_code == 0, r.output
    cli_config = json.loads(r.stdout)["config"]
    assert trial.config["resolution"] == cli_config["resolution"] == 16
    assert trial.config["backend"] == cli_config["backend"]  # the task's default, not the file's


@pytest.mark.parametrize("fails", ["weights", "metadata"])
def test_a_failed_checkpoint_write_leaves_the_old_pair_as_it_was(tmp_path, monkeypatch, fails):
    """Writing the metadata over the old one first, then failing on the weights, left the old weights without
    their metadata: now the weights are written whole beside their place first and renamed in last."""
    from vitbench import paths
    from vitbench.transfer import checkpoint

    path = tmp_path / "ck.safetensors"
    checkpoint.write_pair(path, b"old weights", {"old": True})
    real = checkpoint.write_atomic

    def full(p, data):
        if p.suffix == (".json" if fails == "metadata" else ".tmp"):
            raise paths.PathError(f"{p} cannot be written: the disk is full")
        return real(p, data)

    monkeypatch.setattr(checkpoint, "write_atomic", full)
    with pytest.raises(paths.PathError, match="the disk is full"):
        checkpoint.write_pair(path, b"new weights", {"new": True})
    assert path.read_bytes() == b"old weights" and json.loads(path.with_suffix(".json").read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.json", "ck.safetensors"]  # no staged copy left


def test_a_named_data_config_still_pickles():
    """The names a command gives a DataConfig (a function) stay in its process: a pickled copy (to a worker)
    names its fields by their config paths, and equals the original."""
    import pickle

    from vitbench.transfer.config import DataConfig, validated

    cfg = validated(DataConfig, {"name": "npz", "path": "/x.npz"}, "x", {"path": "--data-path"})
    assert cfg.name_of("path") == "--data-path"
    copy = pickle.loads(pickle.dumps(cfg))
    assert copy == cfg and copy.name_of("path") == "data.path" and cfg.name_of("path") == "--data-path"
