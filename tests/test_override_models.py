"""Architecture overrides built on both backends: parity, conversion both ways, analytic = counted params and
MACs, timm's parameter counts where timm has the configuration, position-embedding resizing, named rows unchanged.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from vitbench.errors import ConfigError
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import all_specs, get_spec
from vitbench.models.torch import build_torch_model, feature_forward
from tolerances_fp import resample_bound

# A grid over every override on the tiny rows: each head, each posemb kind at each place it allows, shapes, the
# hybrid and BiT ResNet overrides, and a distilled model's shape overrides.
GRID = [
    "ViT-Nano/4[classifier=gap]",
    "ViT-Nano/4[rep_size=16]",
    "ViT-Nano/4[posemb=none]",
    "ViT-Nano/4[posemb=learned_2d]",
    "ViT-Nano/4[posemb=sincos2d]",
    "ViT-Nano/4[posemb=relative]",
    "ViT-Nano/4[posemb_at=every_layer]",
    "ViT-Nano/4[posemb_at=every_layer_shared]",
    "ViT-Nano/4[classifier=gap,posemb=learned_2d,posemb_at=every_layer]",
    "ViT-Nano/4[posemb=sincos2d,posemb_at=every_layer_shared,rep_size=8]",
    "ViT-Nano/4[classifier=gap,posemb=relative]",
    "ViT-Nano/4[depth=3,width=48,mlp_dim=64,heads=3,patch=8]",
    "R-Nano+ViT-Micro/8[classifier=gap,posemb=relative,blocks=1x1x1]",
    "R-Nano+ViT-Micro/8[posemb=learned_2d,posemb_at=every_layer_shared,rep_size=8,width_factor=2]",
    "DeiT-Nano/4-dist[depth=3,heads=4]",
    "R-Nano[blocks=2x1x1,width_factor=2]",
]


def _random_torch(spec, resolution: int | None = None) -> torch.nn.Module:
    """Every parameter random and non-zero (the head too), activations O(1)."""
    torch.manual_seed(0)
    model = build_torch_model(spec, resolution).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            z = torch.randn(p.shape, generator=g)
            p.copy_(z / p[0].numel() ** 0.5 if p.ndim >= 2 and "pos_emb" not in name else 0.3 * z + (
                1.0 if name.endswith("norm1.weight") or name.endswith("norm2.weight") else 0.0))
    return model


@pytest.mark.parametrize("name", GRID)
def test_torch_params_and_counted_macs_equal_the_analytic_ones(name):
    from vitbench.backends.base import get_backend

    spec = get_spec(name)
    a = analytic_counts(spec)
    assert sum(p.numel() for p in build_torch_model(spec).parameters()) == a.params
    counted = get_backend("torch").count_flops(spec, spec.resolution, spec.num_classes)
    assert counted["torch_flop_counter"]["macs"] == a.macs  # every matmul/conv, relative logits included


def test_overrides_change_the_counts_as_the_architecture_says():
    base = analytic_counts(get_spec("ViT-Nano/4"))
    d, n = 32, 64
    assert base.params - analytic_counts(get_spec("ViT-Nano/4[posemb=none]")).params == (n + 1) * d
    assert analytic_counts(get_spec("ViT-Nano/4[posemb=sincos2d]")).params == base.params - (n + 1) * d
    assert analytic_counts(get_spec("ViT-Nano/4[posemb=learned_2d]")).params == base.params - (n + 1) * d + 16 * 16
    rel = analytic_counts(get_spec("ViT-Nano/4[posemb=relative]"))
    t = n + 1
    assert rel.macs - base.macs == 2 * t * (2 * t - 1) * d  # two layers, the query against 2T-1 offsets
    gap = analytic_counts(get_spec("ViT-Nano/4[classifier=gap]"))
    assert base.params - gap.params == 2 * d  # no class token, one fewer position
    rep = analytic_counts(get_spec("ViT-Nano/4[rep_size=16]"))
    assert rep.params - base.params == (d * 16 + 16) + (16 * 10 + 10) - (d * 10 + 10)


# ---- timm's own models, where timm has the configuration ---------------------------------------------------
def _timm_vit(spec, **kw):
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=spec.resolution, patch_size=spec.arch.patch, num_classes=spec.num_classes,
                             embed_dim=spec.arch.width, depth=spec.arch.depth, num_heads=spec.arch.heads,
                             mlp_ratio=spec.arch.mlp_dim / spec.arch.width, **kw)


@pytest.mark.parametrize("name, timm_kwargs", [
    ("ViT-Nano/4[classifier=gap]", dict(class_token=False, global_pool="avg")),
    ("ViT-Nano/4[posemb=none]", dict(pos_embed="none")),
    ("ViT-Nano/4[classifier=gap,posemb=none]", dict(class_token=False, global_pool="avg", pos_embed="none")),
    ("ViT-Nano/4[depth=3,width=48,mlp_dim=96,heads=3,patch=8]", {}),
    ("ViT-B/16[depth=6,heads=16]", {}),
])
def test_parameter_count_equals_timms(name, timm_kwargs):
    spec = get_spec(name)
    with torch.device("meta"):
        timm_model = _timm_vit(spec, **timm_kwargs)
    assert sum(p.numel() for p in timm_model.parameters()) == analytic_counts(spec).params


@pytest.mark.parametrize("name", ["R50x1[blocks=2x2x2x2,width_factor=2]", "R-Nano[blocks=2x1x1,width_factor=3]"])
def test_bit_parameter_count_equals_timms_resnetv2(name):
    from timm.layers import GroupNormAct, StdConv2d
    from timm.models.resnetv2 import ResNetV2

    spec = get_spec(name)
    with torch.device("meta"):
        timm_model = ResNetV2(layers=list(spec.arch.layers), channels=spec.arch.channels[: len(spec.arch.layers)],
                              num_classes=spec.num_classes, width_factor=spec.arch.width_factor,
                              stem_chs=spec.arch.stem_chs,
                              stem_type="fixed", conv_layer=partial(StdConv2d, eps=1e-8),
                              norm_layer=partial(GroupNormAct, num_groups=spec.arch.gn_groups))
    assert sum(p.numel() for p in timm_model.parameters()) == analytic_counts(spec).params


# ---- position embeddings at a new resolution ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["ViT-Nano/4", "ViT-Nano/4[posemb=learned_2d]", "ViT-Nano/4[posemb=sincos2d]",
                                  "ViT-Nano/4[posemb=none]", "ViT-Nano/4[posemb_at=every_layer,classifier=gap]",
                                  "ViT-Nano/4[posemb=learned_2d,posemb_at=every_layer_shared]"])
def test_position_embeddings_of_every_kind_resize_to_a_new_resolution(name):
    from vitbench.models.posemb_resize import resize_state_dict_pos_embed

    spec = get_spec(name)
    sd = _random_torch(spec, 32).state_dict()
    resized = resize_state_dict_pos_embed(sd, spec, 48)
    model = build_torch_model(spec, 48)
    model.load_state_dict(resized, strict=True)  # every table now has the 12x12 grid's shape
    with torch.no_grad():
        assert torch.isfinite(model(torch.randn(1, 3, 48, 48))).all()
    assert resize_state_dict_pos_embed(sd, spec, 32).keys() == sd.keys()


def test_relative_position_embeddings_refuse_a_new_resolution_clearly():
    from vitbench.models.posemb_resize import resize_state_dict_pos_embed

    spec = get_spec("ViT-Nano/4[posemb=relative]")
    sd = build_torch_model(spec).state_dict()
    with pytest.raises(ConfigError, match="relative position embeddings.*pre-training resolution"):
        resize_state_dict_pos_embed(sd, spec, 48)
    assert resize_state_dict_pos_embed(sd, spec, 32)["blocks.0.attn.rel_embedding"] is sd[
        "blocks.0.attn.rel_embedding"]


# ---- the named rows ------------------------------------------------------------------------------------
def test_named_rows_are_unchanged():
    """Every row's analytic counts and spec fields are what they were before overrides existed (the file was
    written by the code before them); the new fields are there with their defaults."""
    before = json.loads((Path(__file__).parent / "data" / "named_rows.json").read_text())
    rows = [s for s in all_specs() if s.family in ("vit", "bit", "hybrid")]  # plug-in families came later
    assert sorted(before) == sorted(s.name for s in rows)
    for spec in rows:
        row, c, d = before[spec.name], analytic_counts(spec), spec.to_dict()
        assert (c.params, c.macs) == (row["params"], row["macs"]), spec.name
        assert json.loads(json.dumps({k: d[k] for k in row["to_dict"]})) == row["to_dict"], spec.name
        assert set(d) - set(row["to_dict"]) == {"classifier", "rep_size", "posemb", "posemb_at"}


def test_rows_build_plain_timm_models():
    from timm.models.vision_transformer import VisionTransformer

    from vitbench.models.families.vit.torch_variants import VariantViT

    assert type(build_torch_model(get_spec("ViT-Nano/4"))) is VisionTransformer
    assert isinstance(build_torch_model(get_spec("ViT-Nano/4[posemb=none]")), VariantViT)


# ---- JAX / Flax ----------------------------------------------------------------------------------------
@pytest.mark.jax
@pytest.mark.parametrize("name", GRID)
def test_flax_matches_torch_and_weights_convert_both_ways(name):
    pytest.importorskip("flax")
    import jax
    import jax.numpy as jnp

    from vitbench.models.convert import flax_to_torch, torch_to_flax
    from vitbench.models.flax import build_flax_model

    spec = get_spec(name)
    tm = _random_torch(spec)
    assert all(bool((p != 0).all()) for p in tm.parameters())
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits_t, feats_t = tm(x).numpy(), feature_forward(tm, x).numpy()
    params = torch_to_flax(tm.state_dict(), spec)
    fm = build_flax_model(spec)
    xj = jnp.asarray(x.numpy().transpose(0, 2, 3, 1))
    logits_j = np.asarray(fm.apply({"params": params}, xj))
    feats_j = np.asarray(fm.apply({"params": params}, xj, pre_logits=True))
    from tolerances_fp import forward_parity

    tol = forward_parity(spec, 32)  # max|torch - jax| / max|torch|: fp32 rounding along the forward
    assert np.abs(logits_t - logits_j).max() <= tol * np.abs(logits_t).max()
    assert np.abs(feats_t - feats_j).max() <= tol * np.abs(feats_t).max()
    back = flax_to_torch(params, spec)
    assert back.keys() == tm.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in tm.state_dict().items())
    assert sum(v.size for v in jax.tree_util.tree_leaves(params)) == analytic_counts(spec).params


@pytest.mark.jax
@pytest.mark.parametrize("name", ["ViT-Nano/4[posemb=relative]", "ViT-Nano/4[classifier=gap,rep_size=0]",
                                  "ViT-Nano/4[posemb=learned_2d,posemb_at=every_layer,rep_size=8]"])
def test_xla_counts_at_least_the_analytic_macs(name):
    """XLA counts every matmul of the analytic formula plus elementwise work (norms, softmax, GELU, adds)."""
    pytest.importorskip("flax")
    from vitbench.backends.base import get_backend

    spec = get_spec(name)
    macs = get_backend("jax").count_flops(spec, 32, 10)["xla"]["macs"]
    assert analytic_counts(spec).macs <= macs <= 1.4 * analytic_counts(spec).macs


@pytest.mark.jax
@pytest.mark.parametrize("name", ["ViT-Nano/4[posemb=learned_2d,posemb_at=every_layer]",
                                  "ViT-Nano/4[classifier=gap]", "ViT-Nano/4[posemb=sincos2d]"])
def test_flax_resize_agrees_with_torch_resize(name):
    pytest.importorskip("flax")
    from vitbench.models.convert import flax_to_torch, torch_to_flax
    from vitbench.models.posemb_resize import resize_params_pos_embed, resize_state_dict_pos_embed

    spec = get_spec(name)
    sd = _random_torch(spec).state_dict()
    via_torch = resize_state_dict_pos_embed(sd, spec, 48)
    via_flax = flax_to_torch(resize_params_pos_embed(torch_to_flax(sd, spec), spec, 48), spec)
    assert via_flax.keys() == via_torch.keys()
    n_in = spec.resolution // spec.arch.patch  # the source grid's side
    for k, v in via_torch.items():
        # torch and numpy/JAX resample in fp32 in their own orders (tests/tolerances_fp.py resample_bound: 2 n_in
        # roundings of terms summing to <= 1.5 max|table|); every other tensor is carried unchanged (bound >= 0)
        assert float((via_flax[k] - v).abs().max()) <= resample_bound(sd[k].numpy(), n_in), k


def test_position_tables_of_every_kind_are_not_weight_decayed():
    """timm's no_weight_decay convention (pos_embed, tokens) extends to every position-embedding table."""
    from vitbench.backends.torch.training import decays

    model = build_torch_model(get_spec("ViT-Nano/4[posemb=learned_2d,posemb_at=every_layer]"))
    rel = build_torch_model(get_spec("ViT-Nano/4[posemb=relative]"))
    tables = {n: tuple(p.shape) for m in (model, rel) for n, p in m.named_parameters() if "_embedding" in n}
    assert tables and not any(decays(n, s) for n, s in tables.items())
    assert decays("blocks.0.attn.qkv.weight", (96, 32))
