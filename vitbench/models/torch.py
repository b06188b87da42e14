"""ModelSpec -> PyTorch model: its family's builder (vitbench.models.families: timm models with every architecture
argument explicit, no pretrained configs, no downloads), and what every timm-style model offers (unfused attention
for FLOP counters, pre-logits features, a distilled model's two heads).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec


def build_torch_model(spec: ModelSpec, resolution: int | None = None, num_classes: int | None = None,
                      device: str | torch.device = "cpu") -> torch.nn.Module:
    """Build `spec` at `resolution` (default: its native one) with random init, on `device`."""
    resolution = spec.resolution if resolution is None else resolution
    num_classes = spec.num_classes if num_classes is None else num_classes
    spec.check_resolution(resolution)
    with torch.device(device):
        return family_plugin(spec.family).build_torch(spec, resolution, num_classes)


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if hasattr(m, "fused_attn")]


@contextlib.contextmanager
def unfused_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run attention as explicit matmuls (q@k^T, softmax, @v) so FLOP counters see it.

    fvcore has no handle for aten::scaled_dot_product_attention and FlopCounterMode counts 0 for it on CPU.
    """
    mods = attention_modules(model)
    saved = [m.fused_attn for m in mods]
    try:
        for m in mods:
            m.fused_attn = False
        yield
    finally:
        for m, s in zip(mods, saved):
            m.fused_attn = s


def feature_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Pre-logits representation: the class token after the final norm (ViT/hybrid), the mean of the class and
    distillation tokens (distilled DeiT, as timm's forward_head(pre_logits=True)), or pooled features (BiT)."""
    return model.forward_head(model.forward_features(x), pre_logits=True)


def forward_heads(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(class-token logits, distillation-token logits), for training with distillation (DeiT Section 4).

    A distilled model's two heads, each on its own token after the final norm; `model(x)` is their mean. A model
    without a distillation token returns its logits twice (the same tensor), so a distillation loss then goes
    through the class token, DeiT's baseline without the token.
    """
    # imported here, not with the module: timm's import costs ~1.7 s, and what imports this module (the torch
    # backend, `vitbench env`, a peak probe) need not build a model; the backend's fork server preloads timm
    from timm.models.deit import VisionTransformerDistilled

    if isinstance(model, VisionTransformerDistilled):
        tokens = model.forward_features(x)
        return model.head(model.head_drop(tokens[:, 0])), model.head_dist(model.head_drop(tokens[:, 1]))
    logits = model(x)
    return logits, logits
