"""Attention of a timm model is answered per model, not per family: a ViT-like timm model has tokens, an attention
kernel and attention maps inspection reads; a timm CNN has none of them, and inspection says which views do not
apply and why."""

from __future__ import annotations

import json

import numpy as np
import pytest
import timm
import torch

from vitbench.backends.base import Step, StopRule
from vitbench.models.families import family_plugin
from vitbench.models.specs import get_spec
from tolerances_fp import EPS32

FAST = dict(warmup_steps=1, stop=StopRule(min_steps=2, min_seconds=0.01, max_seconds=60.0), threads=1)
VIT = "timm:deit_tiny_distilled_patch16_224"  # class and distillation tokens: 2 before the patches


def _attention(name):
    spec = get_spec(name)
    return family_plugin(spec.family).attention_of(spec)


@pytest.mark.parametrize("name", ["timm:resnet18", "timm:convnext_atto", "timm:seresnet18"])
def test_a_timm_cnn_has_no_attention_and_no_tokens(name):
    """Channel attention (SE gates) is no self-attention."""
    from vitbench.measure.flops import flops

    att = _attention(name)
    assert not att.layers and not att.token_maps and att.prefix_tokens is None
    assert flops(name, resolution=32, count=False).metrics["tokens"] is None


@pytest.mark.parametrize("name", [VIT, "timm:vit_tiny_patch16_224", "timm:eva02_tiny_patch14_224"])
def test_a_vit_like_timm_model_has_timms_prefix_tokens_and_its_sequence(name):
    from vitbench.measure.flops import flops

    spec = get_spec(name)
    att = _attention(name)
    with torch.device("meta"):
        model = timm.create_model(spec.timm_id, pretrained=False)
    assert att.layers and att.token_maps and att.prefix_tokens == model.num_prefix_tokens
    r = 2 * spec.stride  # a 2 x 2 grid
    assert flops(name, resolution=r, count=False).metrics["tokens"] == 4 + model.num_prefix_tokens


def test_windowed_attention_has_layers_but_no_whole_image_maps():
    att = _attention("timm:swin_tiny_patch4_window7_224")
    assert att.layers and not att.token_maps and att.prefix_tokens is None


def test_a_model_handing_a_parameter_to_a_block_is_read_and_counted():
    """CaiT hands its class token, a parameter, to its class-attention blocks: FlopCounterMode's module tracker
    cannot hook such an input under no_grad, so the meta models hold no parameter that requires grad."""
    from vitbench.models.analytic import analytic_counts

    spec = get_spec("timm:cait_xxs24_224")
    att = _attention(spec.name)
    assert att.layers and not att.token_maps  # class attention: the class token over the patches, per block
    with torch.device("meta"):
        want = sum(p.numel() for p in timm.create_model(spec.timm_id, pretrained=False).parameters())
    counts = analytic_counts(spec)
    assert counts.params == want and counts.macs > 0


def test_bench_reads_an_attention_kernel_only_where_the_model_has_attention(one_torch_thread):
    from vitbench.measure.throughput import bench

    cnn = bench(Step("timm:resnet18", batch_size=1, resolution=32), **FAST)
    vit = bench(Step("timm:vit_tiny_patch16_224", batch_size=1, resolution=32), **FAST)
    assert cnn.metrics["attention_kernel"] == "none"
    assert vit.metrics["attention_kernel"] not in ("none", None)


def test_the_maps_are_timms_attention_probabilities(one_torch_thread):
    """The first layer's maps equal softmax(q k^T / sqrt(d)) computed here from the block's own qkv projection."""
    from vitbench.backends.torch.attention import attention_maps

    spec = get_spec("timm:vit_tiny_patch16_224")
    torch.manual_seed(0)
    model = timm.create_model(spec.timm_id, pretrained=False, img_size=32, num_classes=3).eval()
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    maps = attention_maps(weights, spec.with_classes(3), 32, images)
    assert maps.shape == (12, 2, 3, 5, 5)  # layers, images, heads, 1 + 2x2 tokens
    with torch.no_grad():
        x = model.norm_pre(model._pos_embed(model.patch_embed(torch.from_numpy(images).permute(0, 3, 1, 2))))
        blk = model.blocks[0]
        q, k, _ = blk.attn.qkv(blk.norm1(x)).reshape(2, 5, 3, 3, 64).permute(2, 0, 3, 1, 4)
        want = torch.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1).numpy()  # head dim 64: scale 1/8
    # the same fp32 products in the same order as timm's unfused path, up to the summation order inside the
    # matmul: logits of 64-term sums of |q k| < 1 differ by <= 64 x 2^-24 (2^-24 = EPS32 / 2, fp32's unit
    # roundoff) = 3.8e-6, and softmax is 1-Lipschitz
    np.testing.assert_allclose(maps[0], want, atol=64 * EPS32 / 2, rtol=0)


def test_inspect_reads_a_vit_like_timm_model(cli):
    r = cli("inspect", VIT, "-r", "32", "-n", "2", "--rollout", "1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["model"] == VIT and doc["grid"] == [2, 2] and doc["num_prefix_tokens"] == 2
    dist = np.array(doc["attention_distance_px"])
    assert dist.shape == (12, 3) and np.isfinite(dist).all() and (dist > 0).all()
    assert doc["not_applicable"] == {}  # a class token (rollout) and a learned table (similarity)


def test_inspect_reads_a_table_without_prefix_rows(cli):
    """DeiT-III's position table covers the patches only (timm's no_embed_class)."""
    r = cli("inspect", "timm:deit3_small_patch16_224", "-r", "32", "-n", "1", "--rollout", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["posemb_similarity"] is not None


@pytest.mark.parametrize("name, why", [("timm:resnet18", "it has no self-attention layers"),
                                       ("timm:swin_tiny_patch4_window7_224", "not one tokens x tokens map")])
def test_inspect_of_a_model_without_token_maps_says_which_views_do_not_apply(cli, name, why):
    r = cli("inspect", name, "-r", "64")
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"inspect does not apply to {name}" in out and why in out
    assert "mean attention distance" in out and "position-embedding similarity" in out


def test_a_study_refuses_inspecting_a_timm_cnn_and_accepts_a_vit():
    from vitbench.errors import ConfigError
    from vitbench.study import parse_study

    with pytest.raises(ConfigError, match="inspect does not apply to timm:resnet18"):
        parse_study("name: t\naxes:\n  model: [timm:resnet18]\n  task: [inspect]\n", "t.yaml")
    s = parse_study(f"name: t\naxes:\n  model: [{VIT}]\n  task: [inspect]\ndefaults: {{resolution: 32}}\n",
                    "t.yaml")
    assert [t.config["model"] for t in s.trials] == [VIT]


def test_a_study_inspects_a_timm_vit_it_pre_trained(tmp_path, monkeypatch):
    from records import job

    from vitbench.study import parse_study
    from vitbench.trial import run_trial

    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path))
    s = parse_study("name: t\ncalibration: false\naxes:\n  model: [timm:deit_tiny_patch16_224]\n  task: [inspect]\n"
                    "defaults: {resolution: 32, pretrain_resolution: 32, pretrain_steps: 2, pretrain_warmup_steps: 1,"
                    " pretrain_batch_size: 8, inspect_images: 2, inspect_rollout: 1, threads: 1}\n", "t.yaml")
    (trial,) = s.trials
    rec = run_trial(job(trial.config, "x"))
    assert rec.status == "ok", rec.error
    assert rec.metrics["attention_distance_first_layer_px"] > 0 and rec.raw["num_prefix_tokens"] == 1
