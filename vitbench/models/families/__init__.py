"""Model families as plug-ins: one module declares a family's rows, the ModelSpec fields it reads, its override
keys, its torch and Flax builders, its analytic counts and its weight-conversion table, and registers itself.

Shared code (models.specs, models.torch, models.flax, models.analytic, models.param_table, models.overrides,
the backends, inspection, reports) looks a family up here by the spec's `family` value and never names one. Every
family is written this way: vit (ViT and DeiT), bit, hybrid and the axial ones, one package each under
vitbench/models/families/. Outside code registers a family exactly as vitbench's own packages do (see
docs/plugins.md): a module on $VITBENCH_PLUGINS or an entry point that calls `register_family(FamilyPlugin(...))`;
the record's parts (FamilyBuild, FamilyComputation, AttentionMaps, FamilyWeights, Catalogue, PlotStyle) are one
idea each.

Registering is cheap: the builders are named as 'module:function' strings and imported only when a model is
built, so listing models or parsing a study never imports torch or jax.

Dependencies run one way: this package (its record and registry: plugin.py, re-exported here) imports no other
model module (not the model table, models.specs, nor the override rules, models.overrides); they read the
registered plug-ins (rows, override keys, validators) from here.
"""

from vitbench.models.families.plugin import (
    MOVED,
    AttentionMaps,
    Axis,
    AxisLayer,
    Catalogue,
    FamilyBuild,
    FamilyComputation,
    FamilyName,
    FamilyPlugin,
    FamilyWeights,
    ModelAttention,
    OverrideKey,
    PlotStyle,
    all_families,
    backend_problem,
    family_if_registered,
    family_modules,
    family_names,
    family_plugin,
    norm_name,
    register_family,
    resolve_open,
)

__all__ = ["MOVED", "AttentionMaps", "Axis", "AxisLayer", "Catalogue", "FamilyBuild", "FamilyComputation",
           "FamilyName", "FamilyPlugin", "FamilyWeights", "ModelAttention", "OverrideKey", "PlotStyle",
           "all_families",
           "backend_problem", "family_if_registered", "family_modules", "family_names", "family_plugin", "norm_name",
           "register_family", "resolve_open"]
