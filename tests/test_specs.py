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
    "Axial-ViT-B/32", "Axial-ViT-B/16", "Axial-ResNet-50",  # paper D.6 (plug-in families)
]
DEIT_DISTILLED = ["DeiT-Ti/16-dist", "DeiT-S/16-dist", "DeiT-B/16-dist"]  # DeiT Table 1, distilled (Section 4)


def test_every_paper_variant_is_listed_once():
    names = [s.name for s in all_specs(include_tiny=False)]
    assert sorted(names) == sorted(PAPER_NAMES + DEIT_DISTILLED)
    assert {s.family for s in all_specs()} == {"vit", "bit", "hybrid", "axial_vit", "axial_resnet"}
    assert all(s.tiny for s in all_specs() if s.name not in PAPER_NAMES + DEIT_DISTILLED)


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
    assert get_spec("R50+ViT-B/16").arch.layers == (3, 4, 9) and get_spec("R50+ViT-B/16").stride == 16
    assert get_spec("R50+ViT-B/32").arch.layers == (3, 4, 6, 3) and get_spec("R50+ViT-B/32").stride == 32
    assert get_spec("R50x1").stride == 32 and get_spec("ViT-H/14").stride == 14


@pytest.mark.parametrize("bad", [200, 0, -32, -16, 16.0, "32", True])
def test_resolution_must_be_a_positive_multiple_of_the_stride(bad):
    spec = get_spec("ViT-B/16")
    spec.check_resolution(384)
    with pytest.raises(ConfigError, match="must be a positive multiple of 16 "):
        spec.check_resolution(bad)


@pytest.mark.parametrize("bad", [0, -32])
def test_zero_and_negative_resolutions_are_refused_not_replaced(bad):
    """0 used to mean 'native' by accident (`resolution or native`); None is the only 'native'."""
    from vitbench.models.torch import build_torch_model

    spec = get_spec("ViT-Nano/4")
    assert analytic_counts(spec, None).macs == analytic_counts(spec, 32).macs
    with pytest.raises(ConfigError, match="must be a positive multiple of 4 "):
        analytic_counts(spec, bad)
    with pytest.raises(ConfigError, match="positive multiple"):
        build_torch_model(spec, bad, device="meta")


@pytest.mark.parametrize("family", ["VIT", "Vit", " bit ", "HYBRID"])
def test_family_lookup_ignores_case(family):
    want = family.strip().lower()
    assert [s.name for s in all_specs(family)] == [s.name for s in all_specs(want)]
    assert {s.family for s in all_specs(family)} == {want}


def test_unknown_family_names_the_allowed_ones():
    with pytest.raises(UnknownModelError, match="allowed: vit, bit, hybrid"):
        all_specs("deit")


def test_models_command_accepts_any_case(cli):
    res = cli("models", "--family", "VIT", "--no-tiny", "--json")
    assert res.exit_code == 0, res.output
    assert "ViT-B/16" in res.output and "R50x1" not in res.output


def test_tokens_and_num_classes_override():
    spec = get_spec("ViT-B/16", num_classes=37)
    assert spec.num_classes == 37 and spec.tokens(384) == 576


# Published parameter counts (M): ViT paper Table 1 (86M / 307M / 632M), DeiT Table 1 (5M / 22M), timm model
# cards (BiT; deit_*_distilled_patch16_224: 5.9M / 22.4M / 87.3M). Written as published (strings): a figure
# rounded to d decimals is within half a unit of its last digit, 0.5 x 10^-d M, of the exact count.
@pytest.mark.parametrize("name,published", [
    ("ViT-Ti/16", "5.7"), ("ViT-S/16", "22.05"), ("ViT-B/16", "86.57"),
    ("DeiT-Ti/16-dist", "5.91"), ("DeiT-S/16-dist", "22.4"), ("DeiT-B/16-dist", "87.3"),
    ("ViT-L/16", "304.33"), ("ViT-H/14", "632.05"), ("R50x1", "25.55"),
    ("R152x4", "936.53"), ("R50+ViT-B/16", "98.66"),
])
def test_published_parameter_counts_without_allocating(name, published):
    half_unit = 0.5 * 10.0 ** -len(published.partition(".")[2])
    assert abs(analytic_counts(get_spec(name)).params / 1e6 - float(published)) <= half_unit


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


# ---- DeiT ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alias,name", [
    ("DeiT-Ti", "ViT-Ti/16"), ("deit_small_patch16_224", "ViT-S/16"), ("DeiT-B/16", "ViT-B/16"),
    ("deit_tiny_distilled_patch16_224", "DeiT-Ti/16-dist"), ("DeiT-S-distilled", "DeiT-S/16-dist"),
    ("deit_base_distilled_patch16_224.fb_in1k", "DeiT-B/16-dist"), ("DeiT-Nano/4", "ViT-Nano/4"),
    ("ViT-Micro/4-dist", "DeiT-Micro/4-dist"),
])
def test_deit_names(alias, name):
    assert get_spec(alias).name == name


@pytest.mark.parametrize("size", ["tiny", "small", "base"])
def test_distilled_parameter_count_equals_timms(size):
    """timm's own deit_*_distilled_patch16_224 on the meta device (nothing allocated) vs the analytic formula."""
    import timm
    import torch

    with torch.device("meta"):
        ref = timm.create_model(f"deit_{size}_distilled_patch16_224", pretrained=False)
    spec = get_spec(f"deit_{size}_distilled_patch16_224")
    assert spec.arch.distilled and spec.num_prefix_tokens == 2
    assert analytic_counts(spec).params == sum(p.numel() for p in ref.parameters())


def test_distilled_twin_adds_exactly_a_token_an_embedding_a_head_and_their_macs():
    plain, dist = get_spec("ViT-Nano/4"), get_spec("DeiT-Nano/4-dist")
    d, k, n = plain.arch.width, plain.num_classes, plain.tokens(32)
    a, b = analytic_counts(plain), analytic_counts(dist)
    assert b.params - a.params == d + d + (d * k + k)  # dist token, its position embedding, head_dist
    # one more token through every block (T = N + 2 instead of N + 1), and one more head
    t0, t1 = n + 1, n + 2
    per_token_block = 4 * d * d + 2 * d * plain.arch.mlp_dim
    want = plain.arch.depth * ((t1 - t0) * per_token_block + 2 * (t1 * t1 - t0 * t0) * d) + d * k
    assert b.macs - a.macs == want


@pytest.mark.parametrize("name", ["DeiT-Nano/4-dist", "DeiT-Micro/4-dist"])
def test_distilled_macs_equal_torchs_flop_counter(name):
    """The analytic formula against torch's FlopCounterMode (2 FLOPs per MAC) on the built model, both heads."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from vitbench.models.torch import build_torch_model, unfused_attention

    spec = get_spec(name)
    model = build_torch_model(spec).eval()
    with torch.no_grad(), unfused_attention(model), FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 3, 32, 32))
    assert counter.get_total_flops() == 2 * analytic_counts(spec).macs


def test_only_transformers_can_be_distilled():
    from dataclasses import replace

    with pytest.raises(TypeError, match="distilled"):
        replace(get_spec("R-Nano").arch, distilled=True)  # a ResNet's arch has no such field
    axial = get_spec("Axial-ViT-Nano/4")  # a TransformerArch, of a family that does not read `distilled`
    with pytest.raises(ValueError, match="distillation token"):
        replace(axial, arch=replace(axial.arch, distilled=True))


# ---- flavours ---------------------------------------------------------------------------------------------
def test_default_specs_keep_the_conventions_every_earlier_number_used():
    from vitbench.models.flavours import Gelu, WeightStd

    for s in all_specs():
        assert s.flavour.gelu is Gelu.ERF and s.flavour.weight_std is WeightStd.SQRT_VAR
    assert (get_spec("R50x1").flavour.weight_std_eps, get_spec("R50x1").flavour.gn_eps) == (1e-8, 1e-5)
    hybrid = get_spec("R50+ViT-B/16").flavour
    assert (hybrid.weight_std_eps, hybrid.gn_eps) == (1e-5, 1e-6)


def test_origins_set_the_flavour_and_to_dict_records_it():
    import json

    from vitbench.models.specs import spec_from_dict

    vj = get_spec("R50+ViT-B/16").with_origin("vit_jax")
    d = json.loads(json.dumps(vj.to_dict()))  # JSON-ready: plain strings and numbers
    assert d["flavour"] == {"gelu": "tanh", "weight_std": "std_plus_eps", "weight_std_eps": 1e-5, "gn_eps": 1e-6}
    assert spec_from_dict(d) == vj
    assert get_spec("R50x1").with_origin("big_transfer").to_dict()["flavour"]["weight_std_eps"] == 1e-10
    assert get_spec("ViT-B/16").with_origin("timm").to_dict()["flavour"]["gelu"] == "erf"
    with pytest.raises(ConfigError, match="no 'bit' models"):
        get_spec("R50x1").with_origin("vit_jax")
    with pytest.raises(ConfigError, match="allowed: timm, vit_jax"):
        get_spec("R50x1").with_origin("caffe")


def test_spec_from_dict_refuses_another_architecture_and_bad_flavours():
    from vitbench.models.specs import spec_from_dict

    d = get_spec("ViT-Nano/4").to_dict()
    with pytest.raises(ConfigError, match="width=48"):
        spec_from_dict({**d, "width": 48})
    with pytest.raises(ConfigError, match="gelu.*allowed: erf, tanh"):
        spec_from_dict({**d, "flavour": {**d["flavour"], "gelu": "relu"}})
    old = {k: v for k, v in d.items() if k != "flavour"}  # stored before flavours existed
    assert spec_from_dict(old) == get_spec("ViT-Nano/4")


# The view of a spec the value and graph caches hash (ModelSpec.flat) and checkpoint metadata stores (to_dict), as
# it was when ModelSpec held every family's fields flat (issue 52, item 3). Derived specs of each family too.
_PINNED = PAPER_NAMES + DEIT_DISTILLED + [
    "ViT-Nano/4", "ViT-Micro/4", "ViT-Mini/4", "DeiT-Nano/4-dist", "DeiT-Micro/4-dist", "R-Nano", "R-Micro",
    "R-Nano+ViT-Micro/8", "Axial-ViT-Nano/4", "Axial-ViT-Micro/4", "Axial-R-Nano",
    "ViT-Nano/4[depth=3,posemb=sincos2d]", "R-Nano[width_factor=2,blocks=1x2]",
    "R-Nano+ViT-Micro/8[heads=2,blocks=2x1]", "Axial-ViT-Nano/4[depth=1]"]
_HYBRID_FLAT = (  # R-Nano+ViT-Micro/8: every field of the transformer and of the ResNet
    '{"aliases":[],"channels":[32,64,128,256],"classifier":"token","depth":2,"distilled":false,"family":"hybrid",'
    '"flavour":{"gelu":"erf","gn_eps":1e-06,"weight_std":"sqrt_var","weight_std_eps":1e-05},"gn_groups":8,'
    '"heads":4,"layers":[1,1],"ln_eps":1e-06,"mlp_dim":256,"name":"R-Nano+ViT-Micro/8","num_classes":10,"patch":1,'
    '"posemb":"learned","posemb_at":"input","rep_size":0,"resolution":32,"stem_chs":16,"timm_id":null,"tiny":true,'
    '"width":64,"width_factor":1}')
# R-Nano's metadata as a checkpoint of this version writes it: a ResNet's spec carries the transformer's defaults
_BIT_META = {
    "name": "R-Nano", "family": "bit", "aliases": [], "timm_id": None, "resolution": 32, "num_classes": 10,
    "tiny": True, "patch": 0, "width": 0, "depth": 0, "mlp_dim": 0, "heads": 0, "ln_eps": 1e-06, "distilled": False,
    "layers": [1, 1, 1, 1], "width_factor": 1, "channels": [32, 64, 128, 256], "stem_chs": 16, "gn_groups": 8,
    "flavour": {"gelu": "erf", "weight_std": "sqrt_var", "weight_std_eps": 1e-08, "gn_eps": 1e-05},
    "classifier": "token", "rep_size": 0, "posemb": "learned", "posemb_at": "input", "stride": 32}


def test_the_view_the_caches_hash_is_pinned():
    """A change in what ModelSpec.flat gives (its keys or values) changes the flops, jax parameter-shape and graph
    cache keys: every cached entry is rebuilt. Pinned so that a restructuring of ModelSpec keeps it (or says so)."""
    import hashlib

    from vitbench.value_cache import _canonical

    assert _canonical(get_spec("R-Nano+ViT-Micro/8").flat()) == _HYBRID_FLAT
    h = hashlib.sha256()
    for name in _PINNED:
        h.update(_canonical(get_spec(name).flat()).encode() + b"\n")
    assert h.hexdigest() == "cc00acfd76153196bda0e07942336bbf41e654bd1f86302a84917dba01485ce4"


def test_flat_metadata_of_this_version_reads_back_and_is_what_to_dict_writes():
    import json

    from vitbench.models.specs import spec_from_dict

    assert json.loads(json.dumps(get_spec("R-Nano").to_dict())) == _BIT_META
    assert spec_from_dict(_BIT_META) == get_spec("R-Nano")
    with pytest.raises(ConfigError, match="layers=.*table"):
        spec_from_dict({**_BIT_META, "layers": [2, 2, 2, 2]})


def test_the_flat_fields_of_before_the_split_still_build_and_read_with_a_warning():
    """docs/plugins.md, 'Moved fields': ModelSpec(width=...) and spec.width, for code written before issue 52 split
    ModelSpec into its core and `arch`; the spec is the same for the caches (its flat view)."""
    from dataclasses import replace

    from vitbench.models.specs import ModelSpec

    row = get_spec("R-Nano+ViT-Micro/8")
    flat = {k: v for k, v in row.flat().items() if k != "flavour"}
    with pytest.warns(DeprecationWarning, match=r"flat fields of before issue 52 \(patch, width, .*\) go in `arch=`"):
        old = ModelSpec(**flat, flavour=row.flavour)
    assert old == row and old.flat() == row.flat()
    with pytest.warns(DeprecationWarning, match=r"ModelSpec.width moved to ModelSpec.arch.width"):
        assert row.width == 64
    with pytest.warns(DeprecationWarning, match="moved to ModelSpec.arch.stage_channels"):
        assert row.stage_channels == (32, 64)
    with pytest.warns(DeprecationWarning):  # dataclasses.replace with a flat field: that field of the arch
        assert replace(row, depth=3).arch == replace(row.arch, depth=3)
    with pytest.raises(AttributeError, match="no attribute 'width'"):
        get_spec("R-Nano").width  # noqa: B018 (a ResNet's arch has none)
