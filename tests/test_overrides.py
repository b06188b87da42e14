"""Architecture overrides: one parser/validator, canonical names, round-trips, and named rows unchanged."""

from __future__ import annotations

import pytest

from vitbench.errors import ConfigError
from vitbench.models.analytic import analytic_counts
from vitbench.models.overrides import FAMILY_KEYS, apply_overrides, override_order
from vitbench.models.specs import all_specs, get_spec, spec_from_dict


@pytest.mark.parametrize("name, canonical", [
    ("ViT-B/16[depth=6,posemb=none]", "ViT-B/16[depth=6,posemb=none]"),
    ("vit_base_patch16_224[ posemb = NONE , depth=06 ]", "ViT-B/16[depth=6,posemb=none]"),  # order, case, alias
    ("ViT-B/16[depth=12]", "ViT-B/16"),  # an override equal to the row's value is dropped
    ("R50x1[layers=2-2-2-2,width_factor=2]", "R50x1[width_factor=2,blocks=2x2x2x2]"),
    ("R50+ViT-B/16[blocks=3x4x6x3,heads=16]", "R50+ViT-B/16[heads=16,blocks=3x4x6x3]"),
    ("ViT-Nano/4[classifier=gap,posemb=sincos2d,posemb_at=every_layer_shared]",
     "ViT-Nano/4[classifier=gap,posemb=sincos2d,posemb_at=every_layer_shared]"),
])
def test_canonical_names_and_round_trips(name, canonical):
    spec = get_spec(name)
    assert spec.name == canonical
    assert get_spec(spec.name) == spec
    assert spec_from_dict(spec.to_dict()) == spec
    assert spec_from_dict(spec.with_classes(7).to_dict()).num_classes == 7
    assert list(spec.overrides) == [k for k in override_order() if k in spec.overrides]


def test_with_overrides_and_apply_overrides_agree():
    row = get_spec("ViT-Nano/4")
    a = row.with_overrides(depth=3, posemb="learned_2d")
    b = apply_overrides(row, {"depth": "3", "posemb": "LEARNED_2D"})
    assert a == b and a.arch.depth == 3 and a.arch.posemb == "learned_2d" and a.timm_id is None
    assert a.overrides == {"depth": 3, "posemb": "learned_2d"}
    # overriding a derived spec works from its row: back to the row's value drops the field
    assert a.with_overrides(depth=2).name == "ViT-Nano/4[posemb=learned_2d]"
    assert a.with_overrides(depth=2, posemb="learned") == row
    assert row.overrides == {} and row.override_keys == FAMILY_KEYS["vit"]


def test_gap_has_no_prefix_tokens():
    assert get_spec("ViT-Nano/4[classifier=gap]").num_prefix_tokens == 0
    assert get_spec("ViT-Nano/4").num_prefix_tokens == 1 and get_spec("DeiT-Nano/4-dist").num_prefix_tokens == 2


@pytest.mark.parametrize("name, field", [
    ("ViT-B/16[heads=5]", "heads"),
    ("ViT-B/16[foo=1]", "foo"),
    ("R50x1[depth=3]", "depth"),
    ("R50x1[posemb=none]", "posemb"),
    ("ViT-B/16[blocks=3x4]", "blocks"),
    ("ViT-B/16[posemb=abs]", "posemb"),
    ("ViT-B/16[classifier=mean]", "classifier"),
    ("ViT-B/16[posemb_at=output]", "posemb_at"),
    ("ViT-B/16[depth=0]", "depth"),
    ("ViT-B/16[depth=1e3]", "depth"),
    ("ViT-B/16[depth=100000]", "depth"),
    ("ViT-B/16[width=-8]", "width"),
    ("ViT-B/16[rep_size=x]", "rep_size"),
    ("ViT-Nano/4[patch=5]", "patch"),
    ("R-Nano+ViT-Micro/8[patch=3]", "patch"),
    ("R50x1[blocks=1x1x1x1x1]", "blocks"),
    ("R50x1[blocks=0x1]", "blocks"),
    ("R50x1[width_factor=0]", "width_factor"),
    ("ViT-B/16[posemb=relative,posemb_at=every_layer]", "posemb_at"),
    ("ViT-B/16[posemb=none,posemb_at=every_layer_shared]", "posemb_at"),
    ("ViT-B/16[posemb=sincos2d,posemb_at=every_layer]", "posemb_at"),
    ("DeiT-Ti/16-dist[classifier=gap]", "classifier"),
    ("DeiT-Ti/16-dist[posemb=none]", "posemb"),
    ("ViT-Nano/4[classifier=gap,rep_size=8]", "rep_size"),
    ("ViT-Nano/4[width=30,posemb=sincos2d]", "width"),
    ("ViT-Nano/4[width=33,heads=1,posemb=learned_2d]", "width"),
    ("ViT-B/16[depth=2,depth=3]", "depth"),
    ("ViT-B/16[depth]", "depth"),
    ("ViT-B/16[depth=6", "brackets"),
])
def test_bad_overrides_raise_config_error_naming_the_field(name, field):
    with pytest.raises(ConfigError) as e:
        get_spec(name)
    msg = str(e.value)
    assert field in msg and len(msg) < 400


def test_bad_override_message_is_bounded():
    with pytest.raises(ConfigError) as e:
        get_spec("ViT-B/16[posemb=" + "x" * 5000 + "]")
    assert len(str(e.value)) < 400


def test_checkpoint_architecture_that_differs_is_refused():
    d = get_spec("ViT-Nano/4[depth=3]").to_dict()
    d["posemb"] = "none"
    with pytest.raises(ConfigError, match="posemb"):
        spec_from_dict(d)


def test_named_rows_keep_their_names_and_gain_only_default_fields():
    for spec in all_specs():
        d = spec.to_dict()
        assert get_spec(spec.name) is spec and spec.overrides == {}
        if spec.family in ("vit", "bit", "hybrid"):  # plug-in families set their own (axial ViT: a GAP head)
            assert (d["classifier"], d["rep_size"], d["posemb"], d["posemb_at"]) == ("token", 0, "learned", "input")
        assert analytic_counts(spec) == analytic_counts(spec.with_overrides())


def _own_key_family(name: str, *own):
    """A family registered from outside with override keys of its own (`new_override_keys`) beside `patch`."""
    from dataclasses import dataclass

    from vitbench.models.families import FamilyBuild, FamilyComputation, FamilyName, FamilyPlugin, register_family
    from vitbench.models.specs import ModelSpec

    @dataclass(frozen=True)
    class ToyArch:
        patch: int = 8
        kernel: int = 1
        pool: str = "mean"

    family = FamilyName(name)
    row = ModelSpec(name=f"{name}/8", family=family, tiny=True, resolution=32, num_classes=10, arch=ToyArch())
    register_family(FamilyPlugin(
        name=family, description="toy", rows=(row,), fields=("patch", "kernel", "pool"), override_keys=("patch",),
        new_override_keys=own, arch=ToyArch, build=FamilyBuild(torch=""),
        computation=FamilyComputation(counts=None, param_table=None, stride=lambda s: s.arch.patch,
                                      feature_dim=lambda s: 3, describe=lambda s: "toy")))
    return row


def test_a_family_declares_override_keys_of_its_own(scratch_registry):
    """A plug-in family adds keys no built-in family has (it could not: the keys were a closed set here)."""
    from vitbench.models.families import OverrideKey

    _own_key_family("ownkeys", OverrideKey("kernel", bounds=(1, 9)),
                    OverrideKey("pool", choices=("mean", "max"), aliases=("pooling",)))
    spec = get_spec("ownkeys/8[pooling=MAX,kernel=3,patch=4]")
    assert spec.name == "ownkeys/8[patch=4,kernel=3,pool=max]" and (spec.arch.kernel, spec.arch.pool) == (3, "max")
    assert get_spec(spec.name) == spec and spec_from_dict(spec.to_dict()) == spec
    assert {"kernel", "pool"} <= set(override_order()) and FAMILY_KEYS["ownkeys"] == ("patch", "kernel", "pool")
    with pytest.raises(ConfigError, match="kernel='10' must be an integer from 1 to 9"):
        get_spec("ownkeys/8[kernel=10]")
    with pytest.raises(ConfigError, match="pool='sum' is not allowed; allowed: mean, max"):
        get_spec("ownkeys/8[pool=sum]")
    with pytest.raises(ConfigError, match="field 'kernel' does not apply to a vit model"):
        get_spec("ViT-Nano/4[kernel=3]")
    with pytest.raises(ConfigError, match="'depth' does not apply to a ownkeys model; allowed: patch, kernel"):
        get_spec("ownkeys/8[depth=2]")


@pytest.mark.parametrize("own, says", [
    (("depth", (1, 4)), "override key 'depth' is already declared otherwise by vitbench's built-in keys"),
    (("stride", (1, 4)), "override key 'stride' sets 'stride', which its arch ToyArch has not"),
])
def test_a_wrong_own_key_refuses_that_familys_overrides_only(own, says, scratch_registry):
    from vitbench.models.families import OverrideKey

    name = f"badkeys_{own[0]}"
    _own_key_family(name, OverrideKey(own[0], bounds=own[1]))
    with pytest.raises(ConfigError, match=f"family '{name}': {says}"):
        get_spec(f"{name}/8[patch=4]")
    assert get_spec("ViT-Nano/4[depth=2]").arch.depth == 2  # every other family's overrides still work
