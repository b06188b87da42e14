"""Every model family is a plug-in: vit, bit and hybrid declare what shared code reads, and shared code never
names a family (the rule docs/architecture.md states; issue 31)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vitbench.errors import ConfigError
from vitbench.models.families import family_names, family_plugin, register_family
from vitbench.models.flavours import flavour_for
from vitbench.models.specs import ModelSpec, all_specs, get_spec

PACKAGE = Path(__file__).resolve().parent.parent / "vitbench"


def test_family_names_live_only_in_their_packages():
    """No module outside vitbench/models/families/ compares a family or names one as a string in code."""
    import importlib.util

    # a family named after its library (timm) shares the name with the package that backends require and
    # import; such a string names the package, so the check covers the families whose name is only a family's
    names = "|".join(re.escape(n) for n in family_names() if importlib.util.find_spec(n) is None)
    pattern = re.compile(rf"""family\s*(==|!=|in\b|not in\b)|["']({names})["']""")
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("models/families/"):
            continue
        code = re.sub(r'""".*?"""', "", path.read_text(), flags=re.S)  # docstrings may say 'vit'
        for i, line in enumerate(code.splitlines(), 1):
            if pattern.search(line.split("#")[0]):
                offenders.append(f"{rel}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_paper_families_are_registered_plugins_with_their_rows():
    assert family_names()[:3] == ("vit", "bit", "hybrid")  # registry order: the table lists them so
    for fam, row in (("vit", "ViT-B/16"), ("vit", "DeiT-S/16-dist"), ("bit", "R50x1"), ("hybrid", "R50+ViT-B/16")):
        assert get_spec(row) in family_plugin(fam).rows
        assert get_spec(row) in all_specs(fam)


def test_declared_properties_decide_what_used_to_be_name_checks():
    vit, bit, hybrid = (family_plugin(f) for f in ("vit", "bit", "hybrid"))
    assert (vit.attention, bit.attention, hybrid.attention) == (True, False, True)
    assert (vit.build.channels_last, bit.build.channels_last, hybrid.build.channels_last) == (False, True, True)
    npz_origins = (vit.weights.npz_origin, bit.weights.npz_origin, hybrid.weights.npz_origin)
    assert npz_origins == ("vit_jax", "big_transfer", "vit_jax")
    assert bit.weights.posemb_tables(get_spec("R50x1"), 224) == []
    assert [t.torch_key for t in vit.weights.posemb_tables(get_spec("ViT-B/16"), 224)] == ["pos_embed"]


def test_an_origin_without_the_family_names_the_families_it_has():
    with pytest.raises(ConfigError, match=r"origin 'big_transfer' has no 'vit' models \(it has: bit\)"):
        flavour_for("big_transfer", "vit")
    with pytest.raises(ConfigError, match=r"origin 'vit_jax' has no 'bit' models \(it has: vit, hybrid"):
        flavour_for("vit_jax", "bit")


def test_a_family_cannot_take_a_row_name_of_another_or_register_a_distilled_row_it_cannot_read():
    from dataclasses import replace as with_fields

    from vitbench.models.arch import ResNetArch, TransformerArch
    from vitbench.models.families import FamilyBuild, FamilyComputation, FamilyName, FamilyPlugin

    def plugin(row):
        return FamilyPlugin(name=FamilyName("copycat"), description="", rows=(row,), fields=("patch",),
                            override_keys=(), build=FamilyBuild(torch=""),
                            computation=FamilyComputation(counts=None, param_table=None,
                                                          stride=lambda s: s.arch.patch,
                                                          feature_dim=lambda s: 3, describe=lambda s: ""))

    with pytest.raises(ConfigError, match="the name 'ViT-B_16' is taken by ViT-B/16"):
        register_family(plugin(ModelSpec(name="Copy", family=FamilyName("copycat"), aliases=("ViT-B_16",),
                                         arch=TransformerArch(patch=8))))
    with pytest.raises(ConfigError, match="distillation token"):
        register_family(plugin(ModelSpec(name="Copy", family=FamilyName("copycat"),
                                         arch=TransformerArch(patch=8, distilled=True))))
    with pytest.raises(ConfigError, match=r"rows \['Copy'\] have no ResNetArch in `arch`"):
        register_family(with_fields(plugin(ModelSpec(name="Copy", family=FamilyName("copycat"),
                                                     arch=TransformerArch(patch=8))), arch=ResNetArch))
    assert "copycat" not in family_names()


def test_a_family_written_with_the_flat_fields_of_the_old_record_still_registers_the_same_record():
    """docs/plugins.md, 'Moved fields': a plug-in written against the flat record (before issue 52 grouped it)
    gets the grouped record it means, and a DeprecationWarning naming where each flat field went."""
    from vitbench.models.families import (
        MOVED,
        AttentionMaps,
        Catalogue,
        FamilyBuild,
        FamilyComputation,
        FamilyName,
        FamilyPlugin,
        FamilyWeights,
        PlotStyle,
    )

    def fn(*a):  # one function object for every callable field: the records compare equal field by field
        return None

    common = dict(name=FamilyName("flat"), description="", rows=(), fields=("patch",), override_keys=())
    flat = {k: fn for k in MOVED}
    flat.update(torch_builder="m:t", flax_builder="m:f", representation_size=True, channels_last=False,
                backends=("torch",), counts_note="by hand", token_attention_maps=True, torch_attention="m:a",
                flax_attention="m:b", origins={"timm": None}, npz_origin="timm", catalogue=fn,
                plot_style=("o", "Blues", "Flat"), extra={})
    with pytest.warns(DeprecationWarning, match=r"torch_builder -> build\.torch, .*catalogue -> catalogue\.names"):
        old = FamilyPlugin(**common, **flat)
    grouped = FamilyPlugin(
        **common,
        build=FamilyBuild(torch="m:t", flax="m:f", representation_size=True, channels_last=False, backends=("torch",)),
        computation=FamilyComputation(counts=fn, param_table=fn, stride=fn, feature_dim=fn, describe=fn,
                                      counts_note="by hand"),
        attention_maps=AttentionMaps(token_maps=True, axis_layers=fn, torch="m:a", flax="m:b"),
        weights=FamilyWeights(origins={"timm": None}, npz_origin="timm", posemb_tables=fn, resolution_of=fn,
                              head_prefixes=fn),
        catalogue=Catalogue(resolve=fn, names=fn), plot_style=PlotStyle("o", "Blues", "Flat"))
    assert old == grouped
    with pytest.raises(TypeError, match="no_such_field"):  # anything else is still refused
        FamilyPlugin(**common, build=FamilyBuild(torch="m:t"), computation=grouped.computation, no_such_field=1)
