"""Whether inspection applies to a model, and if not, which of its views do not and why: asked of the model's
family per spec (vitbench.models.families: `attention_of`, `attention_maps`), so a family whose models differ (a
ViT-like timm model and a timm ResNet) answers per model."""

from __future__ import annotations

from vitbench.errors import ConfigError
from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec

# inspect's views and what each reads (vitbench.insight.run.inspect_model, vitbench.insight.per_axis)
MAP_VIEWS = ("mean attention distance per layer and head", "prefix-token attention share", "attention rollout")
TOKEN_VIEWS = ("position-embedding similarity", "patch-embedding filters")


def not_inspectable(spec: ModelSpec) -> str | None:
    """Why inspection does not apply to `spec` (naming the views that need what it lacks), or None when it does:
    its family lists per-axis attention layers, or says that this model's attention maps are tokens x tokens over
    the whole image."""
    plugin = family_plugin(spec.family)
    if plugin.attention_maps.axis_layers is not None:
        return None
    att = plugin.attention_of(spec)
    if att.token_maps:
        return None
    why = ("it has no self-attention layers" if not att.layers else
           "its attention is not one tokens x tokens map over the whole image (windowed, per stage, over "
           "channels or class-token only)")
    return (f"inspect does not apply to {spec.name} (family {plugin.name}): {why}. The views {', '.join(MAP_VIEWS)}"
            f" read such maps; {' and '.join(TOKEN_VIEWS)} read a ViT's one token sequence (its patch embedding "
            "and position table), which it does not have. Inspect a ViT, hybrid or axial model or a ViT-like "
            "one (see `vitbench models`)")


def require_inspectable(spec: ModelSpec) -> None:
    """ConfigError (exit 2) saying which views do not apply and why, unless inspection applies to `spec`."""
    why = not_inspectable(spec)
    if why is not None:
        raise ConfigError(why)
