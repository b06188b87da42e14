"""Model table: lookup, close matches, resolutions, parameter counts of the real variants (meta device)."""

from __future__ import annotations

import pytest

from vitbench.errors import ConfigError, UnknownModelError
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import all_specs, get_spec

PAPER_NAMES = [
    "ViT-Ti/16", "ViT-S/16", "ViT-B/32", "ViT-B/16", "ViT-B/8", "ViT-L/32", "ViT-L/16", "ViT-H/14",
    "R50x1", "R50x2", "R50x3", "R101x1", "R101x3", "R152x1", "R152x2", "R152x4", "R200x3",
    "R50+ViT-B/32", "R50+ViT-B/16", "R50+ViT-L/32", "R50+ViT-L/16",
]


def test_every_paper_variant_is_listed_once():
    names = [s.name for s in all_specs(include_tiny=False)]
    assert sorted(names) == sorted(PAPER_NAMES)
    assert {s.family for s in all_specs()} == {"vit", "bit", "hybrid"}
    assert all(s.tiny for s in all_specs() if s.name not in PAPER_NAMES)


@pytest.mark.parametrize("alias", ["ViT-B/16", "vit-b/16", "ViT-B_16", "vit_base_patch16_224",
                                   "VIT_BASE_PATCH16_224.augreg_in21k", " vit-b-16 "])
def test_forgiving_lookup(alias):
    assert get_spec(alias).name == "ViT-B/16"


def test_bit_and_hybrid_aliases():
    assert get_spec("resnetv2_50x1_bit").name == "R50x1"
    assert get_spec("bit-m-r152x4").name == "R152x4"
    assert get_spec("vit_base_r50_s16_224").name == "R50+ViT-B/16"
    assert get_spec("r50+vit-l_32").name == "R50+ViT-L/32"


def test_unknown_name_lists_close_matches():
    with pytest.raises(UnknownModelError) as e:
        get_spec("ViT-B/17")
    assert "ViT-B/16" in str(e.value)


def test_hybrid_stage_layout_follows_total_stride():
    # Paper D.4: /16 drops stage 4 and moves its blocks into stage 3; /32 keeps all four R50 stages.
    assert get_spec("R50+ViT-B/16").layers == (3, 4, 9) and get_spec("R50+ViT-B/16").stride == 16
    assert get_spec("R50+ViT-B/32").layers == (3, 4, 6, 3) and get_spec("R50+ViT-B/32").stride == 32
    assert get_spec("R50x1").stride == 32 and get_spec("ViT-H/14").stride == 14


def test_resolution_must_be_divisible_by_stride():
    spec = get_spec("ViT-B/16")
    spec.check_resolution(384)
    with pytest.raises(ConfigError, match="multiple of 16"):
        spec.check_resolution(200)


def test_tokens_and_num_classes_override():
    spec = get_spec("ViT-B/16", num_classes=37)
    assert spec.num_classes == 37 and spec.tokens(384) == 576


# Published parameter counts (M): ViT paper Table 1 (86M / 307M / 632M), DeiT (5.7M / 22M), timm BiT cards.
@pytest.mark.parametrize("name,params_m,tol", [
    ("ViT-Ti/16", 5.7, 0.01), ("ViT-S/16", 22.05, 0.01), ("ViT-B/16", 86.57, 0.001),
    ("ViT-L/16", 304.33, 0.001), ("ViT-H/14", 632.05, 0.001), ("R50x1", 25.55, 0.001),
    ("R152x4", 936.53, 0.001), ("R50+ViT-B/16", 98.66, 0.001),
])
def test_published_parameter_counts_without_allocating(name, params_m, tol):
    assert analytic_counts(get_spec(name)).params / 1e6 == pytest.approx(params_m, rel=tol)


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.name)
def test_analytic_params_equal_the_built_model(spec):
    """Every variant, ViT-H and R152x4 included, built on the meta device: no memory is allocated."""
    from vitbench.models.torch import build_torch_model

    model = build_torch_model(spec, device="meta")
    assert sum(p.numel() for p in model.parameters()) == analytic_counts(spec).params


@pytest.mark.parametrize("name", ["ViT-Nano/4", "R-Nano", "R-Nano+ViT-Micro/8"])
def test_tiny_variants_run_at_other_resolutions_and_classes(name):
    import torch

    from vitbench.models.torch import build_torch_model

    spec = get_spec(name)
    res = spec.resolution + spec.stride * 2
    model = build_torch_model(spec, res, num_classes=3).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, res, res)).shape == (2, 3)
