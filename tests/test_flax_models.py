"""Flax models: vit_jax/bit_jax parameter names, sizes, and the same function as the timm models (fp32 parity)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("flax")  # the [jax] extra: jax, flax, optax
pytestmark = pytest.mark.jax

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from flax.traverse_util import flatten_dict  # noqa: E402

from vitbench.errors import VitbenchError  # noqa: E402
from vitbench.models.analytic import analytic_counts  # noqa: E402
from vitbench.models.convert import torch_to_flax  # noqa: E402
from vitbench.models.flax import build_flax_model  # noqa: E402
from vitbench.models.families.vit.flax_model import MlpBlock  # noqa: E402
from vitbench.models.specs import get_spec  # noqa: E402
from vitbench.models.torch import build_torch_model, feature_forward  # noqa: E402
from tolerances_fp import BF16_U, EPS32, bf16_chain, forward_parity  # noqa: E402

TINY = ["ViT-Nano/4", "R-Nano", "R-Nano+ViT-Micro/8", "DeiT-Nano/4-dist"]


def randomize_(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random, non-zero weights everywhere -- the head too (a zero head would make parity vacuous).

    Matrices ~ N(0, 1/fan_in) so activations stay O(1) (GELU, softmax and norms work in their non-linear
    range); norm scales 1 + N(0, 0.2^2); biases N(0, 0.2^2); class token / position embeddings N(0, 0.5^2).
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            z = torch.randn(p.shape, generator=g)
            z[z == 0] = 1.0  # randn does return an exact 0 now and then (about 1 in 5e6 draws)
            if name in ("cls_token", "pos_embed"):
                p.copy_(0.5 * z)
            elif p.ndim >= 2:
                p.copy_(z / p[0].numel() ** 0.5)
            elif name.endswith("weight"):
                p.copy_(1 + 0.2 * z)
            else:
                p.copy_(0.2 * z)
    return model


def nhwc(x: torch.Tensor) -> jnp.ndarray:
    return jnp.asarray(x.numpy().transpose(0, 2, 3, 1))


def rel_diff(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(a).max())


def _keys(params) -> dict[str, tuple]:
    return {k: tuple(v.shape) for k, v in flatten_dict(params, sep="/").items()}


@pytest.fixture(scope="module")
def tiny_params():
    """Parameter shapes of each tiny model (jax.eval_shape: no compilation, nothing allocated)."""
    x = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    return {n: jax.eval_shape(build_flax_model(n).init, jax.random.PRNGKey(0), x)["params"] for n in TINY}


# ---- names: the original checkpoint layouts ------------------------------------------------------------
def test_vit_parameter_tree_is_the_vit_jax_checkpoint_layout(tiny_params):
    spec = get_spec("ViT-Nano/4")
    d, h, m, p = spec.arch.width, spec.arch.heads, spec.arch.mlp_dim, spec.arch.patch
    want = {"cls": (1, 1, d), "embedding/kernel": (p, p, 3, d), "embedding/bias": (d,),
            "Transformer/posembed_input/pos_embedding": (1, (32 // p) ** 2 + 1, d),
            "Transformer/encoder_norm/scale": (d,), "Transformer/encoder_norm/bias": (d,),
            "head/kernel": (d, 10), "head/bias": (10,)}
    for i in range(spec.arch.depth):
        b = f"Transformer/encoderblock_{i}"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            want |= {f"{b}/{ln}/scale": (d,), f"{b}/{ln}/bias": (d,)}
        a = f"{b}/MultiHeadDotProductAttention_1"
        for qkv in ("query", "key", "value"):
            want |= {f"{a}/{qkv}/kernel": (d, h, d // h), f"{a}/{qkv}/bias": (h, d // h)}
        want |= {f"{a}/out/kernel": (h, d // h, d), f"{a}/out/bias": (d,)}
        want |= {f"{b}/MlpBlock_3/Dense_0/kernel": (d, m), f"{b}/MlpBlock_3/Dense_0/bias": (m,),
                 f"{b}/MlpBlock_3/Dense_1/kernel": (m, d), f"{b}/MlpBlock_3/Dense_1/bias": (d,)}
    assert _keys(tiny_params["ViT-Nano/4"]) == want


def test_hybrid_resnet_names_are_vit_jax_models_resnet(tiny_params):
    keys = _keys(tiny_params["R-Nano+ViT-Micro/8"])
    assert keys["conv_root/kernel"] == (7, 7, 3, 16)
    assert keys["gn_root/scale"] == (16,)
    unit = {k.split("/", 2)[2] for k in keys if k.startswith("block1/unit1/")}
    assert unit == {f"{n}/{p}" for n in ("conv1", "conv2", "conv3", "conv_proj") for p in ("kernel",)} | {
        f"{n}/{p}" for n in ("gn1", "gn2", "gn3", "gn_proj") for p in ("scale", "bias")}
    assert keys["embedding/kernel"] == (1, 1, 64, 64)  # the 1x1 "patch" projection on the feature map
    assert "Transformer/posembed_input/pos_embedding" in keys and "cls" in keys


def test_bit_names_follow_bit_jax(tiny_params):
    keys = _keys(tiny_params["R-Nano"])
    assert keys["root_block/conv_root/kernel"] == (7, 7, 3, 16)
    assert {"norm-pre-head/scale", "norm-pre-head/bias", "head/kernel", "head/bias"} <= set(keys)
    for k in range(1, 5):
        unit = {n.split("/", 2)[2] for n in keys if n.startswith(f"block{k}/unit01/")}
        assert unit == {"gn1/scale", "gn1/bias", "conv1/kernel", "gn2/scale", "gn2/bias", "conv2/kernel",
                        "gn3/scale", "gn3/bias", "conv3/kernel", "conv_proj/kernel"}


@pytest.mark.parametrize("name", TINY)
def test_parameter_count_matches_torch_and_analytic(name, tiny_params):
    n_flax = sum(int(np.prod(v.shape)) for v in jax.tree_util.tree_leaves(tiny_params[name]))
    n_torch = sum(p.numel() for p in build_torch_model(get_spec(name)).parameters())
    assert n_flax == n_torch == analytic_counts(get_spec(name)).params


def test_distilled_vit_has_a_distillation_token_its_position_embedding_and_head(tiny_params):
    keys, plain = _keys(tiny_params["DeiT-Nano/4-dist"]), _keys(tiny_params["ViT-Nano/4"])
    d, n = 32, (32 // 4) ** 2
    assert keys["dist"] == (1, 1, d) and keys["head_dist/kernel"] == (d, 10) and keys["head_dist/bias"] == (10,)
    assert keys["Transformer/posembed_input/pos_embedding"] == (1, n + 2, d)
    assert set(keys) - set(plain) == {"dist", "head_dist/kernel", "head_dist/bias"}


def test_build_rejects_a_resolution_the_stride_does_not_divide():
    with pytest.raises(VitbenchError, match="must be a positive multiple of 4 "):
        build_flax_model("ViT-Nano/4", resolution=30)


# ---- parity with the PyTorch models ----------------------------------------------------------------------
def _parity(name: str, resolution: int, batch: int = 2) -> tuple[float, float]:
    spec = get_spec(name)
    torch.manual_seed(0)
    tm = randomize_(build_torch_model(spec, resolution).eval(), seed=1)
    assert all(bool((p != 0).all()) for p in tm.parameters()), "weights must be non-zero everywhere (head too)"
    x = torch.randn(batch, 3, resolution, resolution, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits_t, feats_t = tm(x).numpy(), feature_forward(tm, x).numpy()
    params = {"params": torch_to_flax(tm.state_dict(), spec)}
    fm = build_flax_model(spec, resolution)
    apply = jax.jit(fm.apply, static_argnames="pre_logits")
    logits_j = apply(params, nhwc(x))
    feats_j = apply(params, nhwc(x), pre_logits=True)
    assert logits_j.shape == logits_t.shape and logits_j.dtype == jnp.float32
    # a real signal, not ~0 logits (rel_diff divides by their largest): 1e-2, orders above fp32's absolute
    # rounding of a chain of unit-scale activations (forward_parity ~1e-4)
    assert np.abs(logits_t).max() > 1e-2
    return rel_diff(logits_t, logits_j), rel_diff(feats_t, feats_j)


@pytest.mark.parametrize("name", TINY)
def test_torch_and_flax_compute_the_same_function(name):
    from tolerances_fp import forward_parity

    logits, feats = _parity(name, 32)
    tol = forward_parity(get_spec(name), 32)  # max|torch - jax| / max|torch|: fp32 rounding along the forward
    assert logits <= tol
    assert feats <= tol  # pre-logits representation (few-shot features) too


@pytest.mark.slow
def test_vit_b16_parity_at_224():
    from tolerances_fp import forward_parity

    logits, _ = _parity("ViT-B/16", 224, batch=2)
    assert logits <= forward_parity(get_spec("ViT-B/16"), 224)


def test_mlp_uses_the_exact_erf_gelu_like_torch():
    """Block-level check, tighter than the model bound: tanh-GELU differs from erf-GELU by up to ~2e-4 (absolute)
    for inputs of a few units, which forward_parity on whole-model logits (~1e-4 relative) can miss."""
    from timm.layers import Mlp

    torch.manual_seed(0)
    tm = randomize_(Mlp(16, 16, act_layer=torch.nn.GELU), seed=3)
    with torch.no_grad():  # fc2 a permutation (not symmetric: a transposed mapping shows): the activations exposed
        tm.fc2.weight.copy_(torch.eye(16)[torch.randperm(16, generator=torch.Generator().manual_seed(1))])
    x = 3 * torch.randn(4, 7, 16)
    with torch.no_grad():
        ref = tm(x).numpy()
    params = {"Dense_0": {"kernel": tm.fc1.weight.detach().numpy().T, "bias": tm.fc1.bias.detach().numpy()},
              "Dense_1": {"kernel": tm.fc2.weight.detach().numpy().T, "bias": tm.fc2.bias.detach().numpy()}}
    out = MlpBlock(16).apply({"params": params}, jnp.asarray(x.numpy()))
    # fp32 rounding (absolute), each of the two programs: fc1's 16 + 1 terms (error <= 17 EPS32 (|x||W1| + |b1|),
    # carried through GELU' <= 1.13), GELU's erf (10 ulps of |GELU(h)|), fc2 by a permutation (exact: products by
    # 0 and 1, sums of zeros) plus its bias (1 ulp of |y|)
    x64 = x.numpy().astype(np.float64)
    w1, b1, w2, b2 = (params[d][k].astype(np.float64) for d in ("Dense_0", "Dense_1") for k in ("kernel", "bias"))
    h = x64 @ w1 + b1
    gelu = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    err = (1.13 * 17 * (np.abs(x64) @ np.abs(w1) + np.abs(b1)) + 10 * np.abs(gelu)) @ np.abs(w2)
    bound = 2 * EPS32 * float((err + np.abs(gelu @ w2 + b2)).max())
    assert np.abs(np.asarray(out) - ref).max() <= bound
    # ...and the check can fail: the tanh approximation lies outside the bound (4.7e-4 vs 7.9e-5 on this draw)
    h = jnp.asarray(x.numpy()) @ params["Dense_0"]["kernel"] + params["Dense_0"]["bias"]
    approx = jax.nn.gelu(h, approximate=True) @ params["Dense_1"]["kernel"] + params["Dense_1"]["bias"]
    assert np.abs(np.asarray(approx) - ref).max() > bound


def test_bf16_compute_stays_close_to_fp32():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 32, 32, 3))
    spec = get_spec("ViT-Nano/4")
    params = {"params": torch_to_flax(randomize_(build_torch_model(spec)).state_dict(), spec)}
    f32 = jax.jit(build_flax_model(spec).apply)(params, x)
    b16 = jax.jit(build_flax_model(spec, dtype=jnp.bfloat16).apply)(params, x)
    assert b16.dtype == jnp.float32  # logits always float32
    # bf16 really computed: further apart than two fp32 programs can be (forward_parity), and close: within the
    # bf16 roundings along the chain (bf16_chain x 2**-8; 0.006 on this draw)
    assert forward_parity(spec, 32) < rel_diff(f32, b16) <= bf16_chain(spec) * BF16_U
