"""Attention probabilities of a model (PyTorch), read by its family (vitbench.models.families:
`AttentionMaps.torch`, e.g. the vit family's hooks on timm's attention, the axial families' kept per-axis maps),
without changing the model. The backend's `attention_maps` (vitbench.backends.base.Backend).
"""

from __future__ import annotations

import numpy as np
import torch

from vitbench.errors import ConfigError
from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec
from vitbench.models.torch import build_torch_model


@torch.no_grad()
def attention_maps(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                   images: np.ndarray) -> np.ndarray | list[np.ndarray]:
    """(layers, images, heads, tokens, tokens) float32 attention probabilities of `spec` at `resolution` with
    timm-named `weights` on NHWC float32 `images` (fp32, eval mode, CPU); for a family with per-axis layers, a
    list of (images, sequences, heads, length, length), one per layer."""
    plugin = family_plugin(spec.family)
    if not plugin.attention_maps.torch:
        raise ConfigError(f"{spec.name}: family {spec.family} declares no attention maps to read")
    model = build_torch_model(spec, resolution, spec.num_classes).eval()
    model.load_state_dict({k: torch.from_numpy(np.array(v, np.float32)) for k, v in weights.items()}, strict=True)
    x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2), np.float32))
    maps = plugin.torch_attention_maps(model, x)
    if plugin.attention_maps.axis_layers is not None:
        return [m.numpy().astype(np.float32) for m in maps]
    return torch.stack(maps).numpy()
