"""A timm model's local `.safetensors` state dict as the upstream of fewshot and finetune, from the command line
(`--checkpoint FILE --model timm:NAME`: the weights alone do not name their model) and from a study (the trial's
`model` is the checkpoint's): the transfer starts from exactly these weights, classifier replaced. Nothing is
downloaded."""

from __future__ import annotations

import json

import numpy as np
import pytest
import timm
import torch
from records import job

from vitbench.trial import run_trial

SHORT = ["-r", "32", "--threads", "1"]


@pytest.fixture
def resnet18_file(tmp_path):
    torch.manual_seed(3)
    model = timm.create_model("resnet18", pretrained=False, num_classes=7)
    with torch.no_grad():
        model.conv1.weight.normal_()  # not timm's init: weights only this file has
    path = tmp_path / "resnet18.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path, model.state_dict()


@pytest.fixture
def started(monkeypatch):
    """The models transfer starts from (vitbench.transfer.ops.from_weights), as they were built."""
    from vitbench.transfer import ops

    models, build = [], ops.from_weights

    def spy(*args, **kwargs):
        m = build(*args, **kwargs)
        models.append({k: v.detach().clone() for k, v in m.state_dict().items()})
        return m

    monkeypatch.setattr(ops, "from_weights", spy)
    return models


def _same_body(started_sd, saved):
    """Every tensor but timm's classifier (fc.) is the file's, bit for bit; the classifier is a new zero one."""
    body = [k for k in saved if not k.startswith("fc.")]
    assert body and all(torch.equal(started_sd[k], saved[k]) for k in body)
    assert started_sd["fc.weight"].abs().sum() == 0 and started_sd["fc.weight"].shape[0] != 7


def test_an_integer_buffer_keeps_its_dtype_and_value_and_a_complex_tensor_is_refused(tmp_path):
    """BatchNorm's num_batches_tracked is int64: read as float32 it rounded above 2**24 (16777217 became
    16777216), and a vitbench checkpoint saved it so. It keeps its dtype through reading, the torch state dict,
    the model's weights and a vitbench checkpoint; a complex tensor (its imaginary part was dropped) is refused."""
    from safetensors.torch import save_file

    from vitbench.backends.base import get_backend
    from vitbench.errors import ConfigError
    from vitbench.models.checkpoints import load_pretrained
    from vitbench.transfer.checkpoint import load_checkpoint, save_checkpoint

    model = timm.create_model("resnet18", pretrained=False, num_classes=7)
    count = 2 ** 24 + 1
    model.bn1.num_batches_tracked.fill_(count)
    path = tmp_path / "resnet18.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    p = load_pretrained(path, "timm:resnet18")
    assert p.weights["bn1.num_batches_tracked"].dtype == np.int64
    assert p.weights["bn1.num_batches_tracked"] == count and p.weights["bn1.weight"].dtype == np.float32
    sd = p.state_dict()
    assert sd["bn1.num_batches_tracked"].dtype == torch.int64 and sd["bn1.num_batches_tracked"] == count
    be = get_backend("torch")
    rebuilt = be.load_weights(be.init_model(p.spec, 32, 7, 0), p.weights)
    assert be.weights(rebuilt)["bn1.num_batches_tracked"] == count
    saved = save_checkpoint(tmp_path / "ours.safetensors", be.weights(rebuilt), p.meta())
    assert load_checkpoint(saved).weights["bn1.num_batches_tracked"] == count
    from safetensors import safe_open

    with safe_open(str(saved), framework="numpy") as f:  # written as the model holds it: 0-d, not (1,)
        assert f.get_tensor("bn1.num_batches_tracked").shape == ()
    bad = {k: v.contiguous() for k, v in model.state_dict().items()}
    bad["fc.bias"] = torch.complex(bad["fc.bias"], bad["fc.bias"])
    save_file(bad, str(tmp_path / "complex.safetensors"))
    with pytest.raises(ConfigError, match=r"complex.safetensors: tensor 'fc.bias' is complex64, not a real"):
        load_pretrained(tmp_path / "complex.safetensors", "timm:resnet18")
    # said as what it is, by every reader: not 'not a readable safetensors file', not a ValueError traceback
    from vitbench.models.checkpoints import pretrained_from_weights

    from safetensors.numpy import save_file as save_numpy

    with safe_open(str(saved), framework="numpy") as f:  # a vitbench checkpoint edited to hold a complex tensor
        ours = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        ours["fc.bias"] = ours["fc.bias"].astype(np.complex64)
        save_numpy(ours, str(tmp_path / "ours_complex.safetensors"), metadata=f.metadata())
    for read in (lambda: load_pretrained(tmp_path / "complex.safetensors", "timm:resnet18"),
                 lambda: load_checkpoint(tmp_path / "ours_complex.safetensors"),
                 lambda: pretrained_from_weights(bad, "timm:resnet18", source="my weights")):
        with pytest.raises(ConfigError, match=r"tensor 'fc.bias' is complex64, not a real") as e:
            read()
        assert "not a readable" not in str(e.value), e.value


def test_a_checkpoint_written_with_batchnorms_count_as_1_d_still_loads(cli, tmp_path):
    """vitbench before 2026-12-02 wrote a timm model's BatchNorm count (0-d) as (1,) float32, and its checkpoint
    did not fit its model ('mis-shaped bn1.num_batches_tracked (1,) (expected ())'): it is read as written."""
    from vitbench.backends.base import get_backend
    from vitbench.models.checkpoints import load_pretrained
    from vitbench.models.specs import get_spec
    from vitbench.transfer.checkpoint import load_checkpoint, save_checkpoint

    be, spec = get_backend("torch"), get_spec("timm:resnet18")
    weights = {k: np.full(1, 3.0, np.float32) if k.endswith("num_batches_tracked") else v
               for k, v in be.weights(be.init_model(spec, 32, 7, 0)).items()}
    meta = {"model": spec.name, "spec": spec.to_dict(), "resolution": 32, "num_classes": 7}
    old = save_checkpoint(tmp_path / "old.safetensors", weights, meta)
    assert load_checkpoint(old).weights["bn1.num_batches_tracked"].shape == ()
    assert load_pretrained(old).weights["bn1.num_batches_tracked"].shape == ()
    r = cli("fewshot", "-c", old, "--shots", "1", "--seeds", "1", *SHORT)
    assert r.exit_code == 0, r.output


def test_a_float64_past_float32s_range_is_refused_as_such_without_a_numpy_warning(tmp_path):
    """A float64 weight of 1e300 becomes inf in float32: refused with the non-finite weights, saying why a
    finite number is among them ('NaN or infinite' alone was wrong of this file), and without a warning."""
    import warnings

    from safetensors.torch import save_file

    from vitbench.errors import ConfigError
    from vitbench.transfer.checkpoint import load_checkpoint

    sd = {k: v.contiguous() for k, v in timm.create_model("resnet18", num_classes=7).state_dict().items()}
    sd["conv1.weight"] = sd["conv1.weight"].double()
    sd["conv1.weight"][0, 0, 0, 0] = 1e300
    save_file(sd, str(tmp_path / "big.safetensors"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError, match=r"1 of \d+ tensors hold NaN or infinite values \(or values past "
                                              r"float32's range, 3.4e\+38\) \(conv1.weight\)"):
            load_checkpoint(tmp_path / "big.safetensors", "timm:resnet18")


def test_fewshot_from_a_timm_state_dict_on_the_command_line(cli, resnet18_file, started, tmp_path):
    path, saved = resnet18_file
    r = cli("fewshot", "--checkpoint", str(path), "--model", "timm:resnet18", "--shots", "1", "--seeds", "1",
            "--json", *SHORT)
    assert r.exit_code == 0, r.output
    assert len(started) == 1
    _same_body(started[0], saved)


def test_finetune_from_a_timm_state_dict_on_the_command_line(cli, resnet18_file, started):
    path, saved = resnet18_file
    r = cli("finetune", "--checkpoint", str(path), "--model", "timm:resnet18", "--steps", "1", "--warmup-steps",
            "0", "--lr-grid", "0.01", "--seeds", "1", "--no-refit", "-b", "8", "--json", *SHORT)
    assert r.exit_code == 0, r.output
    assert started
    _same_body(started[0], saved)


def test_a_timm_state_dict_without_its_model_or_with_another_exits_2_naming_the_way_out(cli, resnet18_file):
    path, _ = resnet18_file
    r = cli("fewshot", "--checkpoint", str(path), "--shots", "1", "--seeds", "1", *SHORT)
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output and "--model NAME" in out
    r = cli("fewshot", "--checkpoint", str(path), "--model", "timm:convnext_atto", "--shots", "1", *SHORT)
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "do not fit timm:convnext_atto" in out


def test_a_study_trial_starts_from_a_timm_state_dict_as_its_model(resnet18_file, started, tmp_path, monkeypatch):
    from vitbench.study import parse_study

    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    path, saved = resnet18_file
    study = parse_study(f"name: t\ncalibration: false\naxes:\n  model: [timm:resnet18]\n  task: [fewshot]\n"
                        f"defaults: {{resolution: 32, checkpoint: {path}, shots: 1, fewshot_seeds: 1, threads: 1}}\n",
                        "t.yaml")
    (trial,) = study.trials
    rec = run_trial(job(trial.config, "x"))
    assert rec.status == "ok", rec.error
    assert rec.config["model"] == "timm:resnet18" and rec.metrics["accuracy"] > 0
    _same_body(started[0], saved)
    assert not list((tmp_path / "ckpt").glob("*.safetensors"))  # nothing pre-trained: the file was used


def test_model_beside_a_vitbench_checkpoint_must_be_its_own(cli, tmp_path):
    """A vitbench checkpoint says its model: --model naming another is refused naming what differs."""
    from vitbench.backends.base import get_backend
    from vitbench.models.specs import get_spec
    from vitbench.transfer.checkpoint import save_checkpoint

    spec = get_spec("ViT-Nano/4")
    be = get_backend("torch")
    be.setup("cpu", 1)
    meta = {"model": spec.name, "spec": spec.with_classes(5).to_dict(), "resolution": 16, "num_classes": 5,
            "backend": "torch", "config": None, "metrics": {}}
    path = save_checkpoint(tmp_path / "nano.safetensors", be.weights(be.init_model(spec, 16, 5, 0)), meta)
    for cmd in ("fewshot", "finetune"):
        r = cli(cmd, "--checkpoint", str(path), "--model", "timm:resnet18", "--threads", "1")
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert "--model timm:resnet18" in out and "checkpoint ViT-Nano/4" in out, out


def test_inspect_a_timm_vit_state_dict_named_by_model(cli, tmp_path, monkeypatch):
    """The file's weights are the ones inspected: its attention maps are the model's own on the same images."""
    from safetensors.torch import save_file

    from vitbench.backends.torch import attention as torch_attention

    torch.manual_seed(0)
    model = timm.create_model("deit_tiny_patch16_224", pretrained=False, num_classes=3)
    path = tmp_path / "deit.safetensors"
    saved = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(saved, str(path))
    seen = []
    real = torch_attention.attention_maps

    def spy(weights, spec, resolution, images):
        seen.append(weights)
        return real(weights, spec, resolution, images)

    monkeypatch.setattr(torch_attention, "attention_maps", spy)
    r = cli("inspect", str(path), "--model", "timm:deit_tiny_patch16_224", "-r", "32", "-n", "1", "--rollout",
            "0", "--threads", "1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["source"] == str(path) and doc["trained_resolution_px"] == 224 and doc["grid"] == [2, 2]
    (weights,) = seen  # the file's, with the position table resampled from 14 x 14 to 2 x 2 (ViT Sec. 3.2)
    differ = sorted(k for k in saved if not np.array_equal(weights[k], saved[k].numpy()))
    assert differ == ["head.bias", "head.weight", "pos_embed"]  # the head: read as for transfer, zeroed
    assert not weights["head.weight"].any()
    assert weights["pos_embed"].shape == (1, 5, 192)
    r = cli("inspect", str(path), "--model", "timm:resnet18", "--threads", "1")  # (a model inspect refuses first)
    assert r.exit_code == 2 and "inspect does not apply to timm:resnet18" in " ".join(r.output.split())


@pytest.mark.parametrize("name, prefix_rows", [("deit_tiny_distilled_patch16_224", 2),  # class + distillation
                                               ("deit3_small_patch16_224", 0)])  # no_embed_class: patches only
def test_a_timm_vit_file_at_its_own_size_transfers_at_another(cli, tmp_path, started, name, prefix_rows):
    """The file's size is read from its position table (2 x 2 grid: 32 px); at -r 64 the table is resampled to
    4 x 4 as for fine-tuning (ViT Sec. 3.2), timm's prefix rows kept as they are."""
    from safetensors.torch import save_file

    model = timm.create_model(name, pretrained=False, img_size=32)
    path = tmp_path / "vit.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    r = cli("fewshot", "--checkpoint", str(path), "--model", f"timm:{name}", "--shots", "1", "--seeds", "1",
            "-r", "64", "--threads", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["upstream_resolution"] == 32
    table, saved = started[0]["pos_embed"], model.pos_embed.detach()
    assert table.shape == (1, prefix_rows + 16, saved.shape[-1])
    assert torch.equal(table[:, :prefix_rows], saved[:, :prefix_rows])


@pytest.mark.parametrize("name, prefix_rows", [("test_vit", 1), ("deit3_small_patch16_224", 0)])
def test_a_timm_vit_file_with_a_rectangular_grid_exits_2_naming_model_and_grid(cli, tmp_path, name, prefix_rows):
    """A file made for a 32 x 64 input holds a 2 x 4 grid: 8 patch rows, which could as well be 4 x 2 (or 1 x 8).
    timm builds no such grid for the model (vitbench's inputs are square), so the file is refused naming the
    model, the rows and timm's own grid, not read as some grid; the same model at a square size transfers."""
    from safetensors.torch import save_file

    for size, ok in (((32, 64), False), (48, True)):
        model = timm.create_model(name, pretrained=False, img_size=size, num_classes=3)
        path = tmp_path / f"vit-{ok}.safetensors"
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
        r = cli("fewshot", "--checkpoint", str(path), "--model", f"timm:{name}", "--shots", "1", "--seeds", "1",
                "-r", "32", "--threads", "1", "--json")
        if ok:
            assert r.exit_code == 0, r.output
            assert json.loads(r.stdout)["config"]["upstream_resolution"] == 48
            continue
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "Traceback" not in r.output, out
        assert f"timm:{name}" in out and str(path) in out, out
        assert f"holds {prefix_rows} prefix row(s) and 8 patch rows, not a square grid" in out, out
        with torch.device("meta"):  # timm's native grid of the model, named
            h, w = timm.create_model(name, pretrained=False).patch_embed.grid_size
        assert f"{h} x {w}" in out, out
