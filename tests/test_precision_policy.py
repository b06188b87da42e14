"""Mixed precision means one computation on both backends: bf16 matmuls and convolutions, norms and the
transformer's residual stream in float32 (torch's CUDA autocast: layer_norm and group_norm are on its float32 list;
a bf16 patch embedding plus the float32 class token and position embeddings promotes to float32)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from vitbench.models.flax import build_flax_model, init_params
from vitbench.models.specs import get_spec


def _outputs(model: str) -> dict[str, str]:
    """{module path: dtype of its output} of the Flax model in bf16 on a batch of zeros."""
    f = build_flax_model(get_spec(model), 32, 5, dtype=jnp.bfloat16)
    # jitted: one compile of the whole forward, not one per op (here: the 5 norms tests 84 s eager, all 8 tests
    # 55 s jitted)
    forward = jax.jit(lambda p, x: f.apply({"params": p}, x, capture_intermediates=True,
                                           mutable=["intermediates"]))
    _, state = forward(init_params(f, 32), jnp.zeros((2, 32, 32, 3)))
    flat = jax.tree_util.tree_flatten_with_path(state["intermediates"])[0]
    return {jax.tree_util.keystr(path): str(v.dtype) for path, v in flat}


@pytest.mark.parametrize("model", ["ViT-Nano/4", "R-Nano", "R-Nano+ViT-Micro/8", "Axial-ViT-Nano/4", "Axial-R-Nano"])
def test_a_bf16_flax_model_keeps_its_norms_in_float32(model):
    out = _outputs(model)
    norms = {k: v for k, v in out.items() if any(t in k.lower() for t in ("norm", "'gn"))}
    assert norms and set(norms.values()) == {"float32"}, {k: v for k, v in norms.items() if v != "float32"}
    dense = {k: v for k, v in out.items() if "Dense_0" in k or "'query'" in k or "'fc1'" in k}
    assert not dense or set(dense.values()) == {"bfloat16"}  # the matmuls still in bf16


@pytest.mark.parametrize("model", ["ViT-Nano/4", "R-Nano+ViT-Micro/8"])
def test_a_bf16_vit_keeps_its_residual_stream_in_float32(model):
    """Each encoder block's output: float32 as torch's (x + attn(norm(x)) with x float32 promotes), not bf16."""
    blocks = {k: v for k, v in _outputs(model).items() if k.endswith("['__call__'][0]") and "encoderblock_" in k
              and k.count("['") == 3}
    assert blocks and set(blocks.values()) == {"float32"}, blocks


def test_torch_autocast_keeps_the_vit_residual_stream_and_layer_norms_in_float32():
    """The premise, on what runs here (CPU autocast; CUDA's float32 list holds group_norm too)."""
    import torch

    from vitbench.models.torch import build_torch_model

    m = build_torch_model(get_spec("ViT-Nano/4"), 32, 5).eval()
    seen = {}
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.LayerNorm) or type(mod).__name__ == "Block":
            mod.register_forward_hook(lambda mod, i, o, name=name: seen.__setitem__(name, o.dtype))
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        m(torch.zeros(2, 3, 32, 32))
    assert seen and set(seen.values()) == {torch.float32}, seen
