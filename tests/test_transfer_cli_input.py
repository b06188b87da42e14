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
    # how the data is read is no part of the upstream: 2 workers pre-trained it again (found by a review)
    up = PretrainConfig(model="ViT-Nano/4")
    read = up.data.model_copy(update={"workers": 2, "check_data": True})
    assert PretrainConfig(model="ViT-Nano/4", data=read).key() == up.key()
    assert up.key_data()["split_rule"] == 2
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
    # session 31: the other numbers and texts a downstream row carries of its upstream (upstream_metrics/config)
    ({"metrics": {"accuracy": 5.0}}, "metrics.accuracy is 5.0; expected a finite number in 0..1"),
    ({"metrics": {"teacher_agreement": -0.5}}, "metrics.teacher_agreement is -0.5; expected a finite number in 0"),
    ({"metrics": {"params_m": -3}}, "metrics.params_m is -3; expected a finite number >= 0 (a count)"),
    ({"metrics": {"params_m": True}}, "metrics.params_m is True; expected a finite number >= 0"),
    ({"key": "k" * 10**6}, "key is 'kkkk"),
    ({"backend": 3}, "backend is 3; expected null or a text of at most 200 characters"),
    ({"config": {"x": "y" * 10**6}}, "config is 1,000,009 bytes of JSON; expected a pre-training config of"),
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


def _tiny_checkpoint(path, **header):
    """A ViT-Nano/4 checkpoint at 32 px (an 8 x 8 grid of 4 px patches) written by vitbench's own writer, its
    safetensors header then rewritten with `header`'s fields (8-byte little-endian length, the JSON, the tensors
    kept as they were): the file a user who edits a header has."""
    import struct

    from vitbench.models.specs import get_spec
    from vitbench.models.torch import build_torch_model
    from vitbench.transfer.checkpoint import save_checkpoint

    spec = get_spec("ViT-Nano/4").with_classes(5)
    weights = {k: v.numpy() for k, v in build_torch_model(spec, 32, 5).state_dict().items()}
    save_checkpoint(path, weights, {"model": spec.name, "spec": spec.to_dict(), "resolution": 32,
                                    "num_classes": 5, "config": {}, "metrics": {}})
    if header:
        data = path.read_bytes()
        (n,) = struct.unpack("<Q", data[:8])
        doc = json.loads(data[8:8 + n])
        doc["__metadata__"]["vitbench"] = json.dumps({**json.loads(doc["__metadata__"]["vitbench"]), **header})
        text = json.dumps(doc).encode()
        text += b" " * (-len(text) % 8)
        path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])
    return path


@pytest.mark.parametrize("header, says", [
    ({"resolution": 64}, "metadata's resolution is 64, but its weights are of 32 px (its position embedding "
                         "pos_embed (1, 65, 32): a grid of 8 x 8 patches at ViT-Nano/4's stride 4)"),
    ({"resolution": 34}, "metadata's resolution is 34, which ViT-Nano/4's weights cannot be made for (resolution "
                         "34 for ViT-Nano/4 must be a positive multiple of 4"),
    ({"model": "ViT-Micro/4"}, "metadata's model is 'ViT-Micro/4', but its spec (the architecture stored beside "
                               "it, which its weights are checked against) is ViT-Nano/4"),
    ({"num_classes": 7}, "metadata's num_classes is 7, but its weights' classifier head.weight (5, 32) has 5 "
                         "outputs: the header contradicts the weights"),
    ({"num_classes": 0}, "metadata's num_classes is 0, but its weights' classifier head.weight (5, 32) has 5 "
                         "outputs: the header contradicts the weights"),
])
def test_a_checkpoint_header_that_contradicts_its_weights_is_refused_where_it_is_read(run, tmp_path, header,
                                                                                      says):
    """A 32 px ViT-Nano/4 checkpoint whose header was edited to `resolution: 64` ran `fewshot -c` "@ 64px", exit
    0: the position table resampled silently and the row read as a 64 px upstream; `model: ViT-Micro/4` beside
    the Nano spec was accepted too. Now every reader of the header refuses it, naming the file, the field and
    what the weights say; the command exits 2 before anything runs."""
    from vitbench.transfer.checkpoint import checkpoint_spec, read_meta, trained_resolution

    ok = _tiny_checkpoint(tmp_path / "ok.safetensors")
    assert trained_resolution(ok) == 32 and checkpoint_spec(ok).name == "ViT-Nano/4"
    edited = _tiny_checkpoint(tmp_path / "edited.safetensors", **header)
    for read in (read_meta, checkpoint_spec, trained_resolution, load_checkpoint):
        with pytest.raises(ConfigError, match=f"^{re.escape(str(edited))}: its vitbench {re.escape(says)}"):
            read(edited)
    r = run("fewshot", "-c", edited, "--shots", "1", "--seeds", "1", "--threads", "1")
    assert r.exit_code == 2 and says in " ".join(r.output.split()) and "@ 64px" not in r.output, r.output


# a budget as protocols.pretrain writes one: 20 steps of 16 images over 608 training images, 0.0134 GFLOPs each
_BUDGET = {"config": {"steps": 20, "batch_size": 16},
           "metrics": {"images_seen": 320, "train_images": 608, "epochs": 320 / 608,
                       "train_gflops_per_image": 0.0134, "exaflops": 0.0134e9 * 320 / 1e18}}


@pytest.mark.parametrize("edit, says", [
    ({"exaflops": 1e300}, "metrics.exaflops is 1e+300, but train_gflops_per_image 0.0134 x images_seen 320 make "
                          "4.288e-09"),
    ({"images_seen": 10**30}, "metrics.images_seen is 1e+30, but config.steps 20 x config.batch_size 16 make 320"),
    ({"epochs": 90.0}, "metrics.epochs is 90, but images_seen 320 / train_images 608 make 0.526316"),
])
def test_a_checkpoint_header_whose_budget_contradicts_itself_is_refused(run, tmp_path, edit, says):
    """The pre-training budget in a header became the downstream rows' pretrain_exaflops (the compute `vitbench
    fit` reads) as written: a header edited to exaflops 1e300 gave an ok few-shot row of 1e300 exaFLOPs. It is
    checked against the header's own arithmetic (steps x batch = images seen, GFLOPs per image x images seen =
    exaFLOPs); a header as pretrain writes it reads, an edited one exits 2 naming the field and the sum."""
    from vitbench.transfer.checkpoint import read_meta

    ok = _tiny_checkpoint(tmp_path / "ok.safetensors", **_BUDGET)
    assert read_meta(ok)["metrics"]["exaflops"] == _BUDGET["metrics"]["exaflops"]
    edited = _tiny_checkpoint(tmp_path / "edited.safetensors", config=_BUDGET["config"],
                              metrics={**_BUDGET["metrics"], **edit})
    with pytest.raises(ConfigError, match=f"^{re.escape(str(edited))}: its vitbench metadata's {re.escape(says)}"):
        read_meta(edited)
    r = run("fewshot", "-c", edited, "--shots", "1", "--seeds", "1", "--threads", "1")
    assert r.exit_code == 2 and "the header contradicts itself" in " ".join(r.output.split()), r.output


def test_a_checkpoint_without_a_classifier_is_not_held_to_a_num_classes(tmp_path):
    """`num_classes` is checked against the classifier's rows (a header edited to 7 over a 5-class head was read
    as 7 classes) only where the weights hold one: an encoder-only checkpoint (objective none or masked_patch,
    num_classes 0, no head saved) reads as before, and so does a supervised header whose head was dropped (its
    readers that need the head name the missing keys)."""
    from vitbench.models.identify import is_head
    from vitbench.models.specs import get_spec
    from vitbench.models.torch import build_torch_model
    from vitbench.transfer.checkpoint import read_meta, save_checkpoint

    spec = get_spec("ViT-Nano/4").with_classes(5)
    weights = {k: v.numpy() for k, v in build_torch_model(spec, 32, 5).state_dict().items()
               if not is_head(k, spec)}
    header = {"model": spec.name, "spec": spec.to_dict(), "resolution": 32, "config": {}, "metrics": {}}
    encoder = save_checkpoint(tmp_path / "enc", weights, {**header, "num_classes": 0,
                                                          "objective": {"objective": "none"}})
    assert read_meta(encoder)["num_classes"] == 0 and load_checkpoint(encoder).num_classes == 0
    headless = save_checkpoint(tmp_path / "headless", weights, {**header, "num_classes": 5})
    assert read_meta(headless)["num_classes"] == 5


def test_a_study_trial_takes_a_vitbench_checkpoints_model_from_its_header_as_the_command_does(tmp_path):
    """`fewshot -c ck.safetensors` reads the model from the header; a study trial with `checkpoint: ck...` and no
    model failed `axes: no model given`. Now it reads the model when the study is parsed, so the trial's config
    and key are those of the trial naming it; weights that do not say their model (a timm state dict) still need
    it, said on the checkpoint with what to write; an edited header is refused on the checkpoint too."""
    from safetensors.torch import save_file

    from vitbench.models.specs import get_spec
    from vitbench.models.torch import build_torch_model
    from vitbench.study import parse_study

    ck = _tiny_checkpoint(tmp_path / "ck1.safetensors")
    implied = parse_study(f"name: c\naxes: {{task: [fewshot, finetune, inspect], checkpoint: ['{ck}']}}\n")
    named = parse_study(f"name: c\naxes: {{task: [fewshot, finetune, inspect], checkpoint: ['{ck}'], "
                        "model: [ViT-Nano/4]}\n")
    assert [t.config for t in implied.trials] == [t.config for t in named.trials]
    assert [t.config["model"] for t in implied.trials] == ["ViT-Nano/4"] * 3
    assert [t.key for t in implied.trials] == [t.key for t in named.trials]
    save_file(build_torch_model(get_spec("ViT-Nano/4")).state_dict(), str(tmp_path / "timm.safetensors"))
    bad = _tiny_checkpoint(tmp_path / "edited.safetensors", resolution=64)
    for path, says in ((tmp_path / "timm.safetensors", "its weights do not say their model (not a vitbench "
                        "checkpoint): set the trial's model beside it (model: NAME; a timm state dict: model: "
                        "timm:NAME)"),
                       (bad, "its vitbench metadata's resolution is 64, but its weights are of 32 px")):
        with pytest.raises(ConfigError) as e:
            parse_study(f"name: c\ndefaults: {{checkpoint: '{path}'}}\naxes: {{task: [fewshot]}}\n")
        said = " ".join(str(e.value).split())
        assert f"defaults.checkpoint: for task 'fewshot': checkpoint {path}: {says}" in said, said
