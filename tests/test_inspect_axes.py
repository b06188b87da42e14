"""Inspection of per-axis (axial) attention: known answers for the distance along one axis, the pixel step of an
Axial-ResNet's stages, torch and JAX on the same (converted) weights, the command, the JSON round trip, and what
does not apply."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vitbench.errors import ConfigError
from vitbench.insight import InspectResult, inspect_model, to_markdown
from vitbench.insight.axes import axis_distance_per_image, uniform_axis_distance_px
from vitbench.models.families import Axis, AxisLayer, family_plugin
from vitbench.models.specs import get_spec
from tolerances_fp import EPS32, attention_distance_bound

AXIAL = [("Axial-ViT-Nano/4", 16), ("Axial-R-Nano", 32)]


def _steps_away(length: int, k: int) -> np.ndarray:
    """(length, length): query i puts all its weight on position i + k, or i - k where i + k is off the axis."""
    a = np.zeros((length, length))
    for i in range(length):
        a[i, i + k if i + k < length else i - k] = 1.0
    return a


def _maps(layer: AxisLayer, ks: tuple[int, ...], images: int = 2) -> np.ndarray:
    """(images, sequences, heads, length, length): head h attends ks[h] steps away in every row (column)."""
    per_head = np.stack([_steps_away(layer.length, k) for k in ks])
    return np.broadcast_to(per_head, (images, layer.length, *per_head.shape)).copy()


def test_attention_k_steps_away_along_the_axis_is_k_pixel_steps():
    """Exact in float64 throughout: 0/1 (and 0.25) weights times integer pixel offsets, their sums and means are
    small multiples of powers of two (mass 1, means over 2^k positions or of equal values), so `==`."""
    for axis in Axis:
        layer = AxisLayer(axis, 6, 4, "block 1")
        d = axis_distance_per_image(_maps(layer, (0, 1, 3)), layer)
        np.testing.assert_array_equal(d, [[0.0, 4.0, 12.0]] * 2)
    uniform = AxisLayer(Axis.ROW, 4, 8, "x")
    assert uniform_axis_distance_px(uniform) == 8 * 20 / 16  # mean |i - j| over 4 x 4 pairs
    flat = np.full((1, 4, 1, 4, 4), 0.25)
    assert axis_distance_per_image(flat, uniform)[0, 0] == uniform_axis_distance_px(uniform)
    with pytest.raises(ConfigError, match=r"layer 1 \(row, x\) of shape .*expected \(images, 4, heads, 4, 4\)"):
        axis_distance_per_image(np.zeros((1, 4, 1, 5, 5)), uniform)


def test_row_and_column_layers_each_measure_along_their_own_axis_in_the_model():
    """A fake attention function: row layers attend 1 token away along x, column layers 2 along y (each map
    holds only its own axis, so nothing of the other axis can enter); Axial-ViT's tokens are 4 px apart."""
    spec = get_spec("Axial-ViT-Nano/4")
    layers = family_plugin(spec.family).attention_maps.axis_layers(spec, 16)
    assert [a.axis for a in layers] == [Axis.ROW, Axis.COLUMN] * spec.arch.depth

    def fake(weights, s, r, x):
        return [_maps(a, (1, 1) if a.axis is Axis.ROW else (2, 2), len(x)) for a in layers]

    r = inspect_model({}, spec, 16, np.zeros((3, 16, 16, 3), np.float32), fake)
    # one-hot maps x integer offsets, means of equal values: exact in float64
    np.testing.assert_array_equal(r.attention_distance_px, [[4, 4], [8, 8]] * spec.arch.depth)
    assert r.num_images == 3 and r.layout.num_prefix_tokens == 0 and r.axis_layers == layers


def test_an_axial_resnet_layer_steps_by_its_stages_stride():
    """Every layer attends to its neighbour: the distance is the pixel pitch of the map it attends over, 4 px in
    stages 1 and 2 (a block's stride comes after its attention), 8 in stage 3, 16 in stage 4."""
    spec = get_spec("Axial-R-Nano")
    layers = family_plugin(spec.family).attention_maps.axis_layers(spec, 32)
    assert [(a.axis, a.length, a.step_px) for a in layers[::2]] == [(Axis.COLUMN, 8, 4), (Axis.COLUMN, 8, 4),
                                                                    (Axis.COLUMN, 4, 8), (Axis.COLUMN, 2, 16)]
    r = inspect_model({}, spec, 32, np.zeros((2, 32, 32, 3), np.float32),
                      lambda w, s, res, x: [_maps(a, (1, 1), len(x)) for a in layers])
    np.testing.assert_array_equal(r.attention_distance_px[:, 0], [4, 4, 4, 4, 8, 8, 16, 16])  # exact, as above
    with pytest.raises(ConfigError, match="7 attention maps for the 8 attention layers"):
        inspect_model({}, spec, 32, np.zeros((1, 32, 32, 3), np.float32),
                      lambda w, s, res, x: [_maps(a, (1, 1), len(x)) for a in layers[:7]])


def _sharp_weights(name: str, resolution: int) -> dict[str, np.ndarray]:
    """Random weights with the attention logits scaled up, so the maps are far from uniform."""
    from vitbench.backends.base import get_backend

    import torch

    from vitbench.models.torch import build_torch_model

    be = get_backend("torch")
    spec = get_spec(name)
    torch.manual_seed(3)  # the builder's own draws (init_model draws as Flax: a model to train, not to inspect)
    w = be.weights(build_torch_model(spec, resolution, spec.num_classes))
    return {k: v * 3 if ".qkv." in k else v for k, v in w.items()}


@pytest.mark.parametrize("name, resolution", AXIAL)
def test_torch_and_jax_give_the_same_distances_on_the_same_weights(name, resolution, one_torch_thread):
    pytest.importorskip("flax")
    from vitbench.backends.base import get_backend

    spec = get_spec(name)
    weights = _sharp_weights(name, resolution)
    x = np.random.default_rng(1).normal(size=(3, resolution, resolution, 3)).astype(np.float32)
    torch_maps, jax_maps = get_backend("torch").attention_maps, get_backend("jax").attention_maps
    a, b = torch_maps(weights, spec, resolution, x), jax_maps(weights, spec, resolution, x)
    layers = family_plugin(spec.family).attention_maps.axis_layers(spec, resolution)
    assert [m.shape for m in a] == [m.shape for m in b] == [(3, n.length, spec.arch.heads, n.length, n.length)
                                                             for n in layers]
    # softmax (4 roundings) summed over the keys
    assert all(np.allclose(m.sum(-1), 1, rtol=0, atol=(m.shape[-1] + 4) * EPS32) for m in a)
    assert a[0].max(-1).mean() > 2 / a[0].shape[-1]  # not near-uniform maps, where agreement would say little
    ra = inspect_model(weights, spec, resolution, x, torch_maps)
    rb = inspect_model(weights, spec, resolution, x, jax_maps)
    # float64 numpy after the maps: the distances differ by what the maps' difference carries
    delta = max(float(np.abs(ma - mb).max()) for ma, mb in zip(a, b))
    dist = attention_distance_bound(delta, max(m.shape[-1] for m in a), resolution,
                                    min(float(m.sum(-1).min()) for m in a))  # every key a patch on an axis
    assert np.abs(ra.attention_distance_px - rb.attention_distance_px).max() <= dist
    # and far from uniform attention, where agreement would say little
    assert np.abs(ra.attention_distance_px - ra.uniform_distance_px[:, None]).max() > 10 * dist


def test_json_markdown_and_pictures_carry_the_axis(tmp_path):
    spec = get_spec("Axial-ViT-Nano/4")
    layers = family_plugin(spec.family).attention_maps.axis_layers(spec, 16)
    weights = _sharp_weights("Axial-ViT-Nano/4", 16)
    r = inspect_model(weights, spec, 16, np.zeros((2, 16, 16, 3), np.float32),
                      lambda w, s, res, x: [_maps(a, (1, 2), len(x)) for a in layers])
    back = InspectResult.from_json(json.loads(json.dumps(r.to_json())))
    assert back.axis_layers == r.axis_layers and back.axis_layers[1].axis is Axis.COLUMN
    # 4 tokens 4 px apart: 1.25 steps; exact (80 / 16 of integers, and JSON writes a float64's shortest repr,
    # which reads back the same float)
    np.testing.assert_array_equal(back.uniform_distance_px, [5.0] * 4)
    assert back.posemb_similarity.shape == (4, 4, 4, 4) and back.filters is not None  # a (1, h, w, D) table
    md = to_markdown(back)
    assert "| 2 | column | block 1 | 4 | 4.00 | 6.00 | 8.00 | 5.00 |" in md  # heads: 1 and 2 steps of 4 px
    assert "Not applicable, rollout: per-axis attention" in md
    assert {p.name for p in back.write_pictures(tmp_path).values()} == {
        "attention_distance.png", "posemb_similarity.png", "embedding_filters.png"}


def test_cli_prints_the_per_axis_table_for_both_axial_families(cli, one_torch_thread):
    r = cli("inspect", "Axial-ViT-Nano/4", "-r", "16", "--images", "2", "--threads", "1")
    assert r.exit_code == 0, r.output
    assert "row" in r.stdout and "column" in r.stdout and "step px" in r.stdout
    assert "not applicable, rollout: per-axis attention" in r.stdout
    r = cli("inspect", "Axial-R-Nano", "--images", "2", "--threads", "1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [(a["axis"], a["step_px"]) for a in doc["axis_layers"]][-2:] == [("column", 16), ("row", 16)]
    assert np.array(doc["attention_distance_px"]).shape == (8, 2) and doc["posemb_similarity"] is None
    assert set(doc["not_applicable"]) == {"embedding_filters", "posemb_similarity", "rollout"}
    assert doc["uniform_distance_px"][-1] == 8.0  # 2 cells 16 px apart: half the pairs at 16 px


def test_a_checkpoint_at_another_resolution_is_refused_and_the_study_task_accepts_axial_models(cli, tmp_path):
    from vitbench.study import parse_study
    from vitbench.transfer.checkpoint import save_checkpoint

    ckpt = save_checkpoint(tmp_path / "ax.safetensors", _sharp_weights("Axial-ViT-Nano/4", 16),
                           {"model": "Axial-ViT-Nano/4", "resolution": 16, "num_classes": 10})
    r = cli("inspect", ckpt, "--images", "2", "--threads", "1", "--json")  # loads at the 16 px it was made for
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["grid"] == [4, 4]
    r = cli("inspect", ckpt, "-r", "32", "--threads", "1")
    assert r.exit_code == 2 and "at its trained resolution, -r 16" in r.stderr and "Traceback" not in r.output
    study = parse_study("name: x\ndefaults: {resolution: 32, pretrain_resolution: 32}\n"
                        "axes: {model: [Axial-R-Nano], task: [inspect]}\n", "x.yaml")
    assert len(study.trials) == 1
