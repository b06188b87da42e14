"""Attention probabilities of a timm ViT / hybrid (PyTorch), read without changing the model.

timm's `Attention` computes softmax(q k^T * scale) and passes it through `attn_drop` when it is not fused, so a
forward hook on every `attn_drop`, under `unfused_attention(model)`, sees exactly the probabilities the layer
multiplies with v. A plug-in family with per-axis attention layers (vitbench.models.families: `axis_layers`)
reads its own maps (`FamilyPlugin.torch_attention_maps`). The backend's `attention_maps`
(vitbench.backends.base.Backend).
"""

from __future__ import annotations

import numpy as np
import torch

from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec
from vitbench.models.torch import attention_modules, build_torch_model, unfused_attention


@torch.no_grad()
def attention_maps(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                   images: np.ndarray) -> np.ndarray | list[np.ndarray]:
    """(layers, images, heads, tokens, tokens) float32 attention probabilities of `spec` at `resolution` with
    timm-named `weights` on NHWC float32 `images` (fp32, eval mode, CPU); for a family with per-axis layers, a
    list of (images, sequences, heads, length, length), one per layer."""
    model = build_torch_model(spec, resolution, spec.num_classes).eval()
    model.load_state_dict({k: torch.from_numpy(np.array(v, np.float32)) for k, v in weights.items()}, strict=True)
    plugin = family_plugin(spec.family)
    if plugin.axis_layers is not None:
        x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2), np.float32))
        return [m.numpy().astype(np.float32) for m in plugin.torch_attention_maps(model, x)]
    captured: list[torch.Tensor] = []
    hooks = [m.attn_drop.register_forward_hook(lambda _m, inp, _out: captured.append(inp[0].detach().clone()))
             for m in attention_modules(model)]
    try:
        with unfused_attention(model):
            model(torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2), np.float32)))
    finally:
        for h in hooks:
            h.remove()
    return torch.stack(captured).numpy()
