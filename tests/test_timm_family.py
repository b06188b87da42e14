"""The timm family: any timm architecture as `timm:<name>`, built by timm with pretrained=False (nothing is
downloaded), torch only, counted as timm counts, measured by the same tasks as the table's rows."""

from __future__ import annotations

import pytest
import timm
import torch

from vitbench.backends.base import Step, StopRule
from vitbench.errors import ConfigError, UnknownModelError
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import get_spec
from vitbench.models.torch import build_torch_model
from tolerances_fp import EPS32

SMALL = ("timm:resnet18", "timm:convnext_atto", "timm:vit_tiny_patch16_224")
FAST = dict(warmup_steps=1, stop=StopRule(min_steps=2, min_seconds=0.01, max_seconds=60.0), threads=1)


def _timm_params(name: str, **kwargs) -> int:
    with torch.device("meta"):  # shapes only: nothing allocated
        return sum(p.numel() for p in timm.create_model(name, pretrained=False, **kwargs).parameters())


@pytest.mark.parametrize("name", SMALL)
def test_parameter_counts_are_timms_own(name):
    spec = get_spec(name)
    assert analytic_counts(spec).params == _timm_params(spec.timm_id)
    # the model vitbench builds at another input size has the parameters it counts there
    r = 2 * spec.stride
    built = build_torch_model(spec, r, 10, device="meta")
    assert sum(p.numel() for p in built.parameters()) == analytic_counts(spec, r, 10).params


def test_a_vit_like_model_is_built_for_the_resolution_asked():
    spec = get_spec("timm:vit_tiny_patch16_224")
    assert analytic_counts(spec, 32).params == _timm_params(spec.timm_id, img_size=32)  # 2x2 position table
    assert analytic_counts(spec, 32).params < analytic_counts(spec).params


def test_a_spec_takes_its_size_and_classes_from_timms_pretrained_config():
    spec = get_spec("TIMM:ResNet18 ")
    assert spec is get_spec("timm:resnet18") and spec.name == "timm:resnet18" and spec.family == "timm"
    assert (spec.resolution, spec.num_classes, spec.stride, spec.feature_dim) == (224, 1000, 32, 512)
    vit = get_spec("timm:vit_tiny_patch16_224")
    assert (vit.stride, vit.feature_dim) == (16, 192)
    with pytest.raises(ConfigError, match="multiple of 32"):
        spec.check_resolution(48)


def test_an_unknown_timm_name_lists_timms_close_names(cli):
    with pytest.raises(UnknownModelError, match="timm:resnet18"):
        get_spec("timm:resnet1B")
    r = cli("flops", "timm:convnext_tinny", "--no-count")
    assert r.exit_code == 2 and "Traceback" not in r.output and "timm:convnext_tiny" in r.output


def test_another_backend_is_refused_naming_the_one_that_builds_it(cli):
    r = cli("bench", "timm:resnet18", "--backend", "jax", "-r", "32")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "built by backend torch only, not 'jax'" in " ".join(r.output.split())


@pytest.mark.parametrize("timing", ["throughput", "latency"])
def test_bench_measures_a_timm_model_in_both_timing_modes(timing, one_torch_thread):
    from vitbench.measure.throughput import bench

    rec = bench(Step("timm:convnext_atto", batch_size=2, resolution=32), timing=timing, **FAST)
    assert rec.status == "ok" and rec.config["model"] == "timm:convnext_atto" and rec.config["timing"] == timing
    assert rec.metrics["img_per_s"] > 0 and rec.metrics["batch_size_achieved"] == 2


def test_reduced_precision_and_training_steps_run(one_torch_thread):
    from vitbench.measure.throughput import bench

    rec = bench(Step("timm:resnet18", mode="train", batch_size=2, resolution=32, precision="bf16"), **FAST)
    assert rec.status == "ok" and rec.metrics["autocast"] == "bfloat16"


def test_features_are_timms_pre_logits(one_torch_thread):
    import numpy as np

    from vitbench.backends.torch.backend import TorchBackend

    be = TorchBackend()
    be.setup("cpu", threads=1)
    spec = get_spec("timm:convnext_atto")
    model = be.init_model(spec, 32, 5, seed=0)
    x = np.random.default_rng(0).uniform(0, 1, (2, 32, 32, 3)).astype(np.float32)
    feats = be.features(model, x)
    want = model.forward_head(model.forward_features(torch.from_numpy(x).permute(0, 3, 1, 2)), pre_logits=True)
    assert feats.shape == (2, spec.feature_dim)
    # two fp32 forwards (the backend's path and timm's own): n EPS32 relative to the largest feature (Higham's
    # gamma_n, tests/tolerances_fp.py), n the roundings along convnext_atto's chain at 32 px: the 4x4x3 stem, per
    # block a 7x7 depthwise conv, a LayerNorm and an MLP over C and 4 C (2, 2, 6, 2 blocks of C = 40, 80, 160,
    # 320), the 2x2 downsamples (4 C), the head's norm (~1.3e4: 1.5e-3); another layer's output is off by O(1)
    n = 4 * 4 * 3 + sum(d * (49 + 6 * c) + 4 * c for d, c in zip((2, 2, 6, 2), (40, 80, 160, 320))) + 320
    want = want.detach().numpy()
    assert np.abs(feats - want).max() <= n * EPS32 * np.abs(want).max()


def test_flops_counts_the_built_model_and_says_how_it_counted():
    from vitbench.measure.flops import flops

    rec = flops("timm:resnet18", resolution=32)
    m = rec.metrics
    # an integer count / 1e6 * 1e6 is off by two float64 roundings (~1e-8 here): rounding gives the count back
    assert round(m["params_m"] * 1e6) == _timm_params("resnet18")
    # the meta-device count and the counter on the real model are the same counter on the same graph
    assert m["rel_diff_torch_flop_counter"] == 0 and m["gmacs_fvcore"] > 0
    assert "meta device" in rec.raw["excludes"]["analytic"]


def test_a_study_axis_mixes_timm_models_and_rows():
    from vitbench.study import parse_study

    s = parse_study("name: t\naxes:\n  model: [timm:resnet18, ViT-Nano/4]\n  task: [infer]\n"
                    "defaults: {resolution: 32}\n", "t.yaml")
    assert sorted(t.config["model"] for t in s.trials) == ["ViT-Nano/4", "timm:resnet18"]
    with pytest.raises(ConfigError, match="t.yaml.*built by backend torch only"):
        parse_study("name: t\naxes:\n  model: [timm:resnet18]\n  backend: [jax]\n  task: [infer]\n", "t.yaml")


def test_models_lists_timms_names_for_a_pattern():
    from vitbench.cli.models_cmd import model_rows

    rows = model_rows("timm", pattern="convnext_a*")
    assert [r["name"] for r in rows] == ["timm:" + n for n in timm.list_models("convnext_a*")]
    assert model_rows("vit", pattern="vit-nano*")[0]["name"] == "ViT-Nano/4"


def test_local_safetensors_load_and_transfer_keeps_what_precedes_timms_classifier(tmp_path):
    """A timm state dict on disk (made here) loads for its timm: name; transfer replaces timm's classifier only
    (ConvNeXt's head.fc), keeping head.norm, which forward_head(pre_logits=True) applies to the features."""
    import numpy as np
    from safetensors.torch import save_file

    from vitbench.backends.torch.backend import TorchBackend
    from vitbench.models.checkpoints import load_pretrained
    from vitbench.transfer.ops import from_weights

    model = timm.create_model("convnext_atto", pretrained=False, num_classes=7)
    with torch.no_grad():
        model.head.norm.weight.fill_(2.0)
    path = tmp_path / "convnext_atto.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    p = load_pretrained(path, "timm:convnext_atto", new_head=True)
    assert p.spec.name == "timm:convnext_atto" and "head.norm.weight" in p.weights
    assert not any(k.startswith("head.fc.") for k in p.weights)
    be = TorchBackend()
    be.setup("cpu", threads=1)
    started = from_weights(be, p.spec, p.weights, 32, 3, seed=0)
    assert (started.head.norm.weight == 2.0).all() and (started.head.fc.weight == 0).all()
    assert started.head.fc.weight.shape == (3, 320)
    with pytest.raises(ConfigError, match="missing"):
        load_pretrained(path, "timm:resnet18")
    assert np.isfinite(be.features(started, np.zeros((1, 32, 32, 3), np.float32))).all()
