"""Checkpoints compute the function they were trained with: vit_jax .npz files against an independent numpy
forward written here from vit_jax's definitions, timm state dicts against timm's own logits, on both backends;
the loader infers the model, refuses weights of another model with the keys named."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch

pytest.importorskip("flax")  # the [jax] extra: both backends are checked in every test here
pytestmark = pytest.mark.jax

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import timm  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from timm.layers import GroupNormAct, HybridEmbed, StdConv2d, StdConv2dSame  # noqa: E402
from timm.models import ResNetV2  # noqa: E402

from vitbench.errors import ConfigError, UnsafeFileError  # noqa: E402
from vitbench.models.checkpoints import (  # noqa: E402
    Pretrained,
    check_weights,
    identify,
    load_pretrained,
    pretrained_from_weights,
)
from vitbench.models.flavours import Gelu, Origin, WeightStd  # noqa: E402
from vitbench.models.flax import build_flax_model, init_params  # noqa: E402
from vitbench.models.specs import get_spec  # noqa: E402
from vitbench.models.torch import build_torch_model, feature_forward, forward_heads  # noqa: E402
from tolerances_fp import EPS32, forward_parity, forward_roundings  # noqa: E402


def tol(spec, resolution: int = 32) -> float:
    """max|logits - reference| / max|reference| of vitbench's Flax model (fp32) against the reference (issue 10
    section 5): fp32 rounding along the model's forward (tests/tolerances_fp.py forward_parity; a float64 reference
    adds nothing, timm's fp32 forward is the other of the two fp32 programs the bound counts). ~1e-4 for the tiny
    rows: a wrong mapping moves the logits by O(1), a wrong convention (tanh GELU for erf: 1.3e-4) only just
    past it, which the torch side, in float64, resolves by orders of magnitude (tol64)."""
    return forward_parity(spec, resolution)


def tol64(spec, resolution: int = 32) -> float:
    """The same for vitbench's torch model run in float64 against a float64 reference: n EPS64, n the forward's
    roundings (~1e-13 for the tiny rows): any convention that differs (GELU, standardisation, eps) shows."""
    return forward_roundings(spec, resolution) * float(np.finfo(np.float64).eps)


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    yield


def rel(ref, x) -> float:
    ref, x = np.asarray(ref, np.float64), np.asarray(x, np.float64)
    assert ref.shape == x.shape
    return float(np.abs(ref - x).max() / np.abs(ref).max())


def _run_both(spec, resolution: int, num_classes: int, p: Pretrained, x_nchw: np.ndarray):
    """Logits and pre-logits of vitbench's torch (in float64: what the file holds, computed exactly enough to
    tell conventions apart) and Flax (float32) models of `spec` with the weights of `p`."""
    tm = build_torch_model(spec, resolution, num_classes).eval()
    tm.load_state_dict(p.state_dict(), strict=True)
    tm = tm.double()
    xt = torch.from_numpy(x_nchw.astype(np.float64))
    with torch.no_grad():
        t_logits, t_feats = tm(xt).numpy(), feature_forward(tm, xt).numpy()
    fm = build_flax_model(spec, resolution, num_classes)
    apply = jax.jit(fm.apply, static_argnames="pre_logits")
    xj = jnp.asarray(x_nchw.transpose(0, 2, 3, 1).astype(np.float32))
    variables = {"params": p.flax_params()}
    j_logits, j_feats = apply(variables, xj), apply(variables, xj, pre_logits=True)
    return (t_logits, t_feats), (np.asarray(j_logits), np.asarray(j_feats))


# =========================================================================================================
# 1. vit_jax: an independent numpy forward of vit_jax/models_vit.py + models_resnet.py, in float64
# =========================================================================================================
def _same_pads(n: int, k: int, s: int) -> tuple[int, int]:
    """TF/XLA 'SAME' padding (flax nn.Conv / nn.max_pool padding='SAME'): the extra pixel goes at the end."""
    total = max((-(-n // s) - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def np_conv(x, w, stride=1, padding="SAME", pad_value=0.0):
    """NHWC x HWIO, like flax nn.Conv(padding=...)."""
    kh, kw = w.shape[:2]
    if padding == "SAME":
        x = np.pad(x, ((0, 0), _same_pads(x.shape[1], kh, stride), _same_pads(x.shape[2], kw, stride), (0, 0)),
                   constant_values=pad_value)
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]
    return np.einsum("nhwcij,ijco->nhwo", win, w)


def np_max_pool_same(x, k=3, s=2):
    """flax nn.max_pool(x, (3, 3), strides=(2, 2), padding='SAME'): -inf padding."""
    x = np.pad(x, ((0, 0), _same_pads(x.shape[1], k, s), _same_pads(x.shape[2], k, s), (0, 0)),
               constant_values=-np.inf)
    return np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))[:, ::s, ::s].max(axis=(-2, -1))


def np_weight_standardize(w, eps=1e-5):
    """vit_jax models_resnet.weight_standardize: (w - mean) / (std + eps) over (kh, kw, cin)."""
    w = w - w.mean(axis=(0, 1, 2))
    return w / (w.std(axis=(0, 1, 2)) + eps)


def np_group_norm(x, scale, bias, groups, eps=1e-6):
    """flax nn.GroupNorm (default epsilon 1e-6): statistics over (H, W, channels of the group)."""
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(x.shape) * scale + bias


def np_layer_norm(x, scale, bias, eps=1e-6):
    """flax nn.LayerNorm (default epsilon 1e-6)."""
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def np_gelu_tanh(x):
    """flax nn.gelu(x) with its default approximate=True."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def np_vit_jax_forward(p: dict, x, cfg: dict):
    """vit_jax VisionTransformer(classifier='token', representation_size=None) at inference, from the source.
    Returns (logits, pre-logits)."""
    sw = partial(np_weight_standardize, eps=1e-5)  # models_resnet.StdConv
    gn = partial(np_group_norm, groups=cfg["gn_groups"])
    if "resnet" in cfg:
        x = np_conv(x, sw(p["conv_root/kernel"]), 2)
        x = np.maximum(gn(x, p["gn_root/scale"], p["gn_root/bias"]), 0)
        x = np_max_pool_same(x)
        for i, (blocks, out) in enumerate(cfg["resnet"], start=1):
            for j in range(1, blocks + 1):
                u, s = f"block{i}/unit{j}/", 2 if (i > 1 and j == 1) else 1
                residual = x
                if x.shape[-1] != out or s != 1:  # ResidualUnit.needs_projection
                    residual = gn(np_conv(x, sw(p[u + "conv_proj/kernel"]), s), p[u + "gn_proj/scale"],
                                  p[u + "gn_proj/bias"])
                y = np_conv(x, sw(p[u + "conv1/kernel"]))
                y = np.maximum(gn(y, p[u + "gn1/scale"], p[u + "gn1/bias"]), 0)
                y = np_conv(y, sw(p[u + "conv2/kernel"]), s)
                y = np.maximum(gn(y, p[u + "gn2/scale"], p[u + "gn2/bias"]), 0)
                y = gn(np_conv(y, sw(p[u + "conv3/kernel"])), p[u + "gn3/scale"], p[u + "gn3/bias"])
                x = np.maximum(residual + y, 0)
    patch = cfg["patch"]
    x = np_conv(x, p["embedding/kernel"], patch, "VALID") + p["embedding/bias"]
    n, h, w, c = x.shape
    x = np.concatenate([np.tile(p["cls"], (n, 1, 1)), x.reshape(n, h * w, c)], axis=1)
    x = x + p["Transformer/posembed_input/pos_embedding"]
    for i in range(cfg["depth"]):
        b = f"Transformer/encoderblock_{i}/"
        y = np_layer_norm(x, p[b + "LayerNorm_0/scale"], p[b + "LayerNorm_0/bias"])
        a = b + "MultiHeadDotProductAttention_1/"
        q, k, v = (np.einsum("ntd,dhk->nthk", y, p[a + f"{m}/kernel"]) + p[a + f"{m}/bias"]
                   for m in ("query", "key", "value"))
        s = np.einsum("nqhk,nthk->nhqt", q / np.sqrt(q.shape[-1]), k)
        s = np.exp(s - s.max(-1, keepdims=True))
        o = np.einsum("nhqt,nthk->nqhk", s / s.sum(-1, keepdims=True), v)
        x = x + np.einsum("nqhk,hkd->nqd", o, p[a + "out/kernel"]) + p[a + "out/bias"]
        y = np_layer_norm(x, p[b + "LayerNorm_2/scale"], p[b + "LayerNorm_2/bias"])
        m = b + "MlpBlock_3/"
        y = np_gelu_tanh(y @ p[m + "Dense_0/kernel"] + p[m + "Dense_0/bias"])
        x = x + y @ p[m + "Dense_1/kernel"] + p[m + "Dense_1/bias"]
    x = np_layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"])[:, 0]
    return x @ p["head/kernel"] + p["head/bias"], x


def vit_jax_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter of the vit_jax model described by `cfg`, by checkpoint key (pre-linen module names)."""
    d, m, h, k = cfg["width"], cfg["mlp"], cfg["heads"], cfg["classes"]
    out: dict[str, tuple[int, ...]] = {}
    cin = 3
    if "resnet" in cfg:
        out |= {"conv_root/kernel": (7, 7, 3, cfg["root"]), "gn_root/scale": (cfg["root"],),
                "gn_root/bias": (cfg["root"],)}
        cin = cfg["root"]
        for i, (blocks, cout) in enumerate(cfg["resnet"], start=1):
            mid = cout // 4
            for j in range(1, blocks + 1):
                u = f"block{i}/unit{j}/"
                convs = {"conv1": (1, 1, cin, mid), "conv2": (3, 3, mid, mid), "conv3": (1, 1, mid, cout)}
                if j == 1:
                    convs["conv_proj"] = (1, 1, cin, cout)
                for c, shape in convs.items():
                    gname = "gn_proj" if c == "conv_proj" else "gn" + c[-1]
                    out |= {u + c + "/kernel": shape, u + gname + "/scale": shape[-1:],
                            u + gname + "/bias": shape[-1:]}
                cin = cout
    grid = cfg["resolution"] // cfg["stride"]
    out |= {"embedding/kernel": (cfg["patch"], cfg["patch"], cin, d), "embedding/bias": (d,), "cls": (1, 1, d),
            "Transformer/posembed_input/pos_embedding": (1, grid * grid + 1, d),
            "Transformer/encoder_norm/scale": (d,), "Transformer/encoder_norm/bias": (d,),
            "head/kernel": (d, k), "head/bias": (k,)}
    for i in range(cfg["depth"]):
        b = f"Transformer/encoderblock_{i}/"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            out |= {b + ln + "/scale": (d,), b + ln + "/bias": (d,)}
        a = b + "MultiHeadDotProductAttention_1/"
        for q in ("query", "key", "value"):
            out |= {a + q + "/kernel": (d, h, d // h), a + q + "/bias": (h, d // h)}
        out |= {a + "out/kernel": (h, d // h, d), a + "out/bias": (d,),
                b + "MlpBlock_3/Dense_0/kernel": (d, m), b + "MlpBlock_3/Dense_0/bias": (m,),
                b + "MlpBlock_3/Dense_1/kernel": (m, d), b + "MlpBlock_3/Dense_1/bias": (d,)}
    return out


def random_vit_jax_params(shapes: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Non-zero everywhere (the head, gn3 and the class token too, which vit_jax zero-initialises).

    Dense kernels ~ N(0, 1/fan_in) so activations stay O(1) and GELU works in its non-linear range; norm scales
    1 + N(0, 0.2^2); biases N(0, 0.2^2); cls/pos-embed N(0, 0.5^2). Conv kernels get a per-filter scale in
    [1e-3, 1e-1]: standardisation removes it, but (w - mean)/(std + eps) and (w - mean)/sqrt(var + eps) then
    differ visibly, so the test can tell the two forms apart.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for k, shape in shapes.items():
        z = rng.standard_normal(shape)
        if k.endswith("/kernel") and len(shape) == 4 and not k.startswith("embedding"):
            z = z * 10 ** rng.uniform(-3, -1, size=shape[-1])
        elif k.endswith("/kernel"):
            fan_in = math.prod(shape[:-1]) if "/out/" not in k else shape[0] * shape[1]
            if any(s in k for s in ("/query/", "/key/", "/value/")):
                fan_in = shape[0]
            z = z / math.sqrt(fan_in)
        elif k.endswith("/scale"):
            z = 1 + 0.2 * z
        elif k in ("cls", "Transformer/posembed_input/pos_embedding"):
            z = 0.5 * z
        else:
            z = 0.2 * z
        out[k] = z
    return out


VIT_JAX_TINY = {  # the table's tiny rows, in vit_jax's model description
    "ViT-Nano/4": dict(width=32, depth=2, heads=2, mlp=128, patch=4, stride=4, classes=10, resolution=32,
                       gn_groups=32),
    "R-Nano+ViT-Micro/8": dict(width=64, depth=2, heads=4, mlp=256, patch=1, stride=8, classes=10, resolution=32,
                               root=16, resnet=[(1, 32), (1, 64)], gn_groups=8),
}


def _vit_jax_case(tmp_path, name: str, seed: int = 0):
    cfg = VIT_JAX_TINY[name]
    params = random_vit_jax_params(vit_jax_shapes(cfg), seed)
    path = tmp_path / f"{name.replace('/', '_')}.npz"
    np.savez(path, **{k: v.astype(np.float32) for k, v in params.items()})  # vit_jax's layout: '/'-joined keys
    x = np.random.default_rng(seed + 1).standard_normal((2, cfg["resolution"], cfg["resolution"], 3))
    f32 = {k: v.astype(np.float32).astype(np.float64) for k, v in params.items()}  # what the file holds
    logits, feats = np_vit_jax_forward(f32, x, cfg)
    assert np.abs(logits).max() > 0.1
    return path, x.transpose(0, 3, 1, 2), logits, feats


@pytest.mark.parametrize("name", list(VIT_JAX_TINY))
def test_vit_jax_checkpoint_gives_vit_jax_logits_on_both_backends(tmp_path, name):
    path, x, ref_logits, ref_feats = _vit_jax_case(tmp_path, name)
    p = load_pretrained(path)  # model inferred from names and shapes; origin from the file
    assert p.spec.name == name and p.origin is Origin.VIT_JAX and (p.resolution, p.num_classes) == (32, 10)
    assert p.spec.flavour.gelu is Gelu.TANH and p.spec.flavour.weight_std is WeightStd.STD_PLUS_EPS
    assert p.spec.to_dict()["flavour"]["gelu"] == "tanh"  # every row using it records the flavour
    (tl, tf), (jl, jf) = _run_both(p.spec, p.resolution, p.num_classes, p, x)
    assert rel(ref_logits, tl) <= tol64(p.spec) and rel(ref_logits, jl) <= tol(p.spec)
    assert rel(ref_feats, tf) <= tol64(p.spec) and rel(ref_feats, jf) <= tol(p.spec)


@pytest.mark.parametrize("name,wrong", [
    ("ViT-Nano/4", {"gelu": Gelu.ERF}),  # the issue: timm's exact GELU on a vit_jax checkpoint
    ("R-Nano+ViT-Micro/8", {"weight_std": WeightStd.SQRT_VAR}),  # and sqrt(var + eps) on its convs
])
def test_the_wrong_flavour_misses_the_reference(tmp_path, name, wrong):
    """The check above can fail: each convention alone moves the logits by far more than the tolerance."""
    path, x, ref_logits, _ = _vit_jax_case(tmp_path, name)
    p = load_pretrained(path)
    spec = p.spec.with_flavour(replace(p.spec.flavour, **wrong))
    (tl, _), (jl, _) = _run_both(spec, p.resolution, p.num_classes, p, x)
    # torch (float64): by orders of magnitude; JAX (float32): past its bound (the GELU's 1.3e-4 vs 7.8e-5)
    assert rel(ref_logits, tl) > 10 * tol64(p.spec) and rel(ref_logits, jl) > tol(p.spec)


@pytest.mark.parametrize("spoil, says", [(lambda a: np.full(a.shape, "a"), "<U1"),
                                         (lambda a: a.astype(np.complex64), "complex64")])
def test_an_npz_array_that_is_no_real_number_is_refused_naming_it(tmp_path, spoil, says):
    """An npz array of text was a ValueError traceback in the float32 cast; a complex one was cast in silence (its
    imaginary part dropped), where a safetensors file's is refused. Refused alike, naming the array."""
    params = random_vit_jax_params(vit_jax_shapes(VIT_JAX_TINY["ViT-Nano/4"]))
    params["cls"] = spoil(params["cls"])
    np.savez(tmp_path / "upstream.npz", **params)
    with pytest.raises(ConfigError, match=f"upstream.npz: tensor 'cls' is {says}, not a real number"):
        load_pretrained(tmp_path / "upstream.npz")


def test_npz_with_pre_logits_needs_the_head_swap(tmp_path):
    cfg = VIT_JAX_TINY["ViT-Nano/4"]
    shapes = vit_jax_shapes(cfg) | {"pre_logits/kernel": (32, 32), "pre_logits/bias": (32,)}
    path = tmp_path / "upstream.npz"
    np.savez(path, **random_vit_jax_params(shapes))
    with pytest.raises(ConfigError, match="pre_logits.*new_head=True"):
        load_pretrained(path)
    p = load_pretrained(path, new_head=True)
    assert p.num_classes is None and not any(k.startswith("head") for k in p.weights)
    assert "head" not in p.flax_params() and "cls" in p.flax_params()


def test_npz_with_pre_logits_loads_into_a_model_with_that_rep_size(tmp_path):
    cfg = VIT_JAX_TINY["ViT-Nano/4"]
    shapes = vit_jax_shapes(cfg) | {"pre_logits/kernel": (32, 32), "pre_logits/bias": (32,)}
    path = tmp_path / "upstream.npz"
    arrays = random_vit_jax_params(shapes)
    np.savez(path, **arrays)
    with pytest.raises(ConfigError, match=r"rep_size=32"):
        load_pretrained(path)
    p = load_pretrained(path, "ViT-Nano/4[rep_size=32]")
    assert p.spec.name == "ViT-Nano/4[rep_size=32]" and p.spec.arch.rep_size == 32
    np.testing.assert_array_equal(p.weights["pre_logits.weight"], arrays["pre_logits/kernel"].T.astype(np.float32))
    model = build_torch_model(p.spec, p.resolution)
    model.load_state_dict(p.state_dict(), strict=True)


def test_a_vit_jax_file_read_for_transfer_keeps_its_pre_logits_layer(tmp_path):
    """Few-shot on an original vit_jax file (the ImageNet-21k ones have a 768-wide tanh pre-logits layer) read its
    class token: the loader dropped the layer with the head, where big_vision's few-shot (and the paper) read the
    pre-logits output. Read with no model asked, the file is the model with that rep_size, its layer kept; a
    model asked without one keeps the old behaviour (the layer dropped: the paper's fine-tuning head swap)."""
    from vitbench.transfer.checkpoint import load_checkpoint

    cfg = VIT_JAX_TINY["ViT-Nano/4"]
    shapes = vit_jax_shapes(cfg) | {"pre_logits/kernel": (32, 16), "pre_logits/bias": (16,)}
    path = tmp_path / "upstream.npz"
    arrays = random_vit_jax_params(shapes)
    np.savez(path, **arrays)
    ck = load_checkpoint(path)
    assert ck.spec.name == "ViT-Nano/4[rep_size=16]"
    np.testing.assert_array_equal(ck.weights["pre_logits.weight"], arrays["pre_logits/kernel"].T.astype(np.float32))
    asked = load_checkpoint(path, "ViT-Nano/4")
    assert asked.spec.name == "ViT-Nano/4" and not any(k.startswith("pre_logits") for k in asked.weights)


# ---- big_transfer BiT: the original files keep TensorFlow names; bit_jax/models.py defines the function ----
def np_bit_forward(p: dict, x, groups: int, stages: list[tuple[int, int]]):
    """big_transfer bit_jax ResNet (v2) at inference, from the source, on big_transfer's TF-named arrays."""
    def std(w, axis, eps):  # bit_jax standardize: (x - mean) / sqrt(mean((x - mean)^2) + eps)
        w = w - w.mean(axis=axis, keepdims=True)
        return w / np.sqrt((w**2).mean(axis=axis, keepdims=True) + eps)

    def conv(x, name, stride=1):
        return np_conv(x, std(p[name + "standardized_conv2d/kernel"], (0, 1, 2), 1e-10), stride, "VALID")

    def gn(x, name):  # bit_jax GroupNorm: standardize over (H, W, group channels), eps 1e-5
        n, h, w, c = x.shape
        y = std(x.reshape(n, h, w, groups, c // groups), (1, 2, 4), 1e-5).reshape(x.shape)
        return y * p[name + "group_norm/gamma"] + p[name + "group_norm/beta"]

    pad = lambda x, k: np.pad(x, ((0, 0), ((k - 1) // 2, k // 2), ((k - 1) // 2, k // 2), (0, 0)))  # noqa: E731
    x = conv(pad(x, 7), "resnet/root_block/", 2)  # fixed_padding, then VALID
    x = np.lib.stride_tricks.sliding_window_view(pad(x, 3), (3, 3), axis=(1, 2))[:, ::2, ::2].max(axis=(-2, -1))
    for i, (blocks, cout) in enumerate(stages, start=1):
        for j in range(1, blocks + 1):
            u, s = f"resnet/block{i}/unit{j:02d}/", 2 if (i > 1 and j == 1) else 1
            shortcut = x
            y = np.maximum(gn(x, u + "a/"), 0)
            if x.shape[-1] != cout or s != 1:  # needs_projection
                shortcut = conv(y, u + "a/proj/", s)
            y = np.maximum(gn(conv(y, u + "a/"), u + "b/"), 0)
            y = np.maximum(gn(conv(pad(y, 3), u + "b/", s), u + "c/"), 0)
            x = conv(y, u + "c/") + shortcut
    x = np.maximum(gn(x, "resnet/"), 0).mean(axis=(1, 2))
    return x @ p["resnet/head/conv2d/kernel"][0, 0] + p["resnet/head/conv2d/bias"], x


def test_big_transfer_bit_checkpoint_gives_bit_jax_logits_on_both_backends(tmp_path):
    root, stages, groups, k = 16, [(1, 32), (1, 64), (1, 128), (1, 256)], 8, 10  # the R-Nano row
    shapes = {"resnet/root_block/standardized_conv2d/kernel": (7, 7, 3, root), "resnet/group_norm/gamma": (256,),
              "resnet/group_norm/beta": (256,), "resnet/head/conv2d/kernel": (1, 1, 256, k),
              "resnet/head/conv2d/bias": (k,)}
    cin = root
    for i, (_, cout) in enumerate(stages, start=1):
        u, mid = f"resnet/block{i}/unit01/", cout // 4
        for g, (ci, co, kk) in zip("abc", [(cin, mid, 1), (mid, mid, 3), (mid, cout, 1)]):
            shapes |= {f"{u}{g}/standardized_conv2d/kernel": (kk, kk, ci, co), f"{u}{g}/group_norm/gamma": (ci,),
                       f"{u}{g}/group_norm/beta": (ci,)}  # pre-activation: the norm before each conv
        shapes[f"{u}a/proj/standardized_conv2d/kernel"] = (1, 1, cin, cout)
        cin = cout
    rng = np.random.default_rng(4)
    params = {}
    for key, shape in shapes.items():
        z = rng.standard_normal(shape)
        if key.endswith("kernel") and "head" not in key:
            z = z * 10 ** rng.uniform(-3, -1, size=shape[-1])
        params[key] = (1 + 0.2 * z if key.endswith("gamma") else z / 16 if "head" in key else 0.2 * z
                       if key.endswith(("beta", "bias")) else z).astype(np.float32)
    path = tmp_path / "BiT-M-R-Nano.npz"
    np.savez(path, **params)
    x = rng.standard_normal((2, 32, 32, 3))
    ref_logits, ref_feats = np_bit_forward({k: v.astype(np.float64) for k, v in params.items()}, x, groups, stages)
    p = load_pretrained(path)
    assert p.spec.name == "R-Nano" and p.origin is Origin.BIG_TRANSFER and p.num_classes == k
    assert p.spec.flavour.weight_std_eps == 1e-10 and p.spec.flavour.gn_eps == 1e-5
    (tl, tf), (jl, jf) = _run_both(p.spec, 32, k, p, x.transpose(0, 3, 1, 2))
    assert rel(ref_logits, tl) <= tol64(p.spec) and rel(ref_logits, jl) <= tol(p.spec)
    assert rel(ref_feats, tf) <= tol64(p.spec) and rel(ref_feats, jf) <= tol(p.spec)


# =========================================================================================================
# 2. timm state dicts: timm's own modules and logits
# =========================================================================================================
def _tiny_timm(kind: str) -> torch.nn.Module:
    """timm models at the tiny rows' sizes, with timm's own conventions (its defaults, the eps its model
    constructors pass); weights then set to random non-zero values everywhere so every mapping is exercised."""
    vit = dict(pretrained=False, img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=2, num_classes=10)
    if kind == "vit":
        m = timm.create_model("vit_base_patch16_224", **vit)
    elif kind == "deit":
        m = timm.create_model("deit_tiny_distilled_patch16_224", **vit)
    elif kind == "bit":  # as timm resnetv2._create_resnetv2_bit: 'fixed' stem, StdConv2d(eps=1e-8)
        m = ResNetV2(layers=[1, 1, 1, 1], channels=(32, 64, 128, 256), stem_chs=16, num_classes=10,
                     stem_type="fixed", conv_layer=partial(StdConv2d, eps=1e-8),
                     norm_layer=partial(GroupNormAct, num_groups=8))
    else:  # as timm vision_transformer_hybrid._resnetv2 + _create_vision_transformer_hybrid
        backbone = ResNetV2(layers=[1, 1], channels=(32, 64), stem_chs=16, num_classes=0, global_pool="",
                            preact=False, stem_type="same", conv_layer=partial(StdConv2dSame, eps=1e-8),
                            norm_layer=partial(GroupNormAct, num_groups=8))
        m = timm.create_model("vit_base_patch16_224", embed_layer=partial(HybridEmbed, backbone=backbone),
                              **(vit | dict(patch_size=1, embed_dim=64, num_heads=4)))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, prm in m.named_parameters():
            z = torch.randn(prm.shape, generator=g)
            if prm.ndim == 4:  # conv kernels: per-filter scale 1e-3..1e-1 (see random_vit_jax_params)
                z = z * 10 ** (-3 + 2 * torch.rand(prm.shape[0], 1, 1, 1, generator=g))
            elif prm.ndim >= 2 and name not in ("cls_token", "dist_token", "pos_embed"):
                z = z / prm[0].numel() ** 0.5
            elif name.endswith("weight") and prm.ndim == 1:
                z = 1 + 0.2 * z
            else:
                z = (0.5 if prm.ndim == 3 else 0.2) * z
            prm.copy_(z)
    return m.eval()


TINY_TIMM = {"vit": "ViT-Nano/4", "deit": "DeiT-Nano/4-dist", "bit": "R-Nano", "hybrid": "R-Nano+ViT-Micro/8"}


def _check_timm(ref: torch.nn.Module, want: str, resolution: int, tmp_path, batch: int = 2) -> Pretrained:
    path = tmp_path / "timm.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))  # as timm/HF hub files are
    p = load_pretrained(path)
    assert p.spec.name == want and p.origin is Origin.TIMM and p.resolution == resolution
    assert p.spec.flavour.gelu is Gelu.ERF and p.spec.flavour.weight_std is WeightStd.SQRT_VAR
    x = np.random.default_rng(7).standard_normal((batch, 3, resolution, resolution)).astype(np.float32)
    ref = ref.double()  # timm in float64 too: the torch sides compare at n EPS64, the Flax one at forward_parity
    with torch.no_grad():
        xt = torch.from_numpy(x.astype(np.float64))
        ref_logits = ref(xt).numpy()
        ref_feats = ref.forward_head(ref.forward_features(xt), pre_logits=True).numpy()
    (tl, tf), (jl, jf) = _run_both(p.spec, p.resolution, p.num_classes, p, x)
    assert rel(ref_logits, tl) <= tol64(p.spec, resolution), "torch"
    assert rel(ref_logits, jl) <= tol(p.spec, resolution), "jax"
    assert rel(ref_feats, tf) <= tol64(p.spec, resolution) and rel(ref_feats, jf) <= tol(p.spec, resolution)
    return p


@pytest.mark.parametrize("kind", list(TINY_TIMM))
def test_timm_state_dicts_give_timms_logits(tmp_path, kind):
    _check_timm(_tiny_timm(kind), TINY_TIMM[kind], 32, tmp_path)


def test_timm_eps_matter_for_the_hybrid(tmp_path):
    """vitbench's default hybrid uses vit_jax's epsilons; timm's hybrid uses 1e-8 / 1e-5, which the timm origin
    sets. With the default flavour the same weights miss timm's logits."""
    ref = _tiny_timm("hybrid")
    p = pretrained_from_weights(ref.state_dict())
    assert (p.spec.flavour.weight_std_eps, p.spec.flavour.gn_eps) == (1e-8, 1e-5)
    x = np.random.default_rng(7).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        want = ref.double()(torch.from_numpy(x.astype(np.float64))).numpy()
    default = get_spec("R-Nano+ViT-Micro/8")
    (tl, _), (jl, _) = _run_both(default, 32, 10, p, x)
    assert rel(want, tl) > 10 * tol(default) and rel(want, jl) > 10 * tol(default)


def test_distilled_heads_apart_match_timms_distilled_training_outputs():
    ref = _tiny_timm("deit")
    p = pretrained_from_weights(ref.state_dict())
    x = np.random.default_rng(8).standard_normal((2, 3, 32, 32)).astype(np.float32)
    ref.set_distilled_training(True)
    ref.train()  # timm returns the two heads apart only when training in distilled mode (no dropout: rates 0)
    with torch.no_grad():
        want_cls, want_dist = (t.numpy() for t in ref(torch.from_numpy(x)))
    tm = build_torch_model(p.spec, 32, 10).eval()
    tm.load_state_dict(p.state_dict())
    with torch.no_grad():
        cls, dist = (t.numpy() for t in forward_heads(tm, torch.from_numpy(x)))
        avg = tm(torch.from_numpy(x)).numpy()
    assert rel(want_cls, cls) <= tol(p.spec) and rel(want_dist, dist) <= tol(p.spec)
    assert rel(want_cls, want_dist) > 0.1
    # inference: the mean of the two heads; the heads' matmuls (over the width) may run as other kernels here
    np.testing.assert_allclose(avg, (cls + dist) / 2,
                               atol=(p.spec.arch.width + 2) * EPS32 * np.abs(np.concatenate([cls, dist])).max())
    fm = build_flax_model(p.spec, 32, 10)
    apply = jax.jit(partial(fm.apply, separate_heads=True))
    jcls, jdist = apply({"params": p.flax_params()}, jnp.asarray(x.transpose(0, 2, 3, 1)))
    assert rel(want_cls, jcls) <= tol(p.spec) and rel(want_dist, jdist) <= tol(p.spec)


def test_heads_apart_of_a_model_without_distillation_token_are_its_logits_twice():
    spec = get_spec("ViT-Nano/4")
    tm = build_torch_model(spec).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        a, b = forward_heads(tm, x)
        assert a is b and torch.equal(a, tm(x))
    fm = build_flax_model(spec)
    params = {"params": init_params(fm, 32)}
    ja, jb = jax.jit(partial(fm.apply, separate_heads=True))(params, jnp.ones((2, 32, 32, 3)))
    np.testing.assert_array_equal(ja, jb)


# ---- real sizes: timm.create_model(name, pretrained=False), timm's init as is, batch 1, one thread ---------
@pytest.mark.slow
@pytest.mark.parametrize("timm_name,row", [
    ("vit_base_patch16_224", "ViT-B/16"), ("resnetv2_50x1_bit", "R50x1"), ("vit_base_r50_s16_224", "R50+ViT-B/16"),
    ("deit_tiny_distilled_patch16_224", "DeiT-Ti/16-dist"), ("deit_small_distilled_patch16_224", "DeiT-S/16-dist"),
    ("deit_base_distilled_patch16_224", "DeiT-B/16-dist"),
])
def test_real_timm_state_dicts_give_timms_logits(tmp_path, timm_name, row):
    torch.manual_seed(0)
    ref = timm.create_model(timm_name, pretrained=False, num_classes=1000).eval()
    # forward_parity at 224 (8e-3 for ViT-B/16 to 8e-2 for R50+ViT-B/16, the n EPS32 worst case of ~1e5 to 7e5
    # roundings) checks the mapping at real size (a wrong or transposed weight moves the logits by O(1)); the
    # conventions, which move them less, are resolved by the tiny rows above, at ~1e-4
    _check_timm(ref, row, 224, tmp_path, batch=1)


# =========================================================================================================
# 3. The loader: inference, refusals, vitbench checkpoints
# =========================================================================================================
def test_weights_of_another_model_are_a_clear_error_naming_keys_and_the_model_they_are(tmp_path):
    nano = build_torch_model(get_spec("ViT-Nano/4")).state_dict()
    with pytest.raises(ConfigError) as e:
        check_weights(nano, "ViT-Micro/4")
    msg = str(e.value)
    assert "do not fit ViT-Micro/4" in msg and "missing [blocks.2." in msg
    assert "mis-shaped [blocks.0.attn.proj.bias (32,) (expected (64,))" in msg
    assert "They look like ViT-Nano/4 (32 px, 10 classes)" in msg
    bit = build_torch_model(get_spec("R-Nano")).state_dict()
    with pytest.raises(ConfigError, match=r"missing \[.*pos_embed.*unexpected \[.*stem.conv.weight.*R-Nano"):
        check_weights(bit, "ViT-Nano/4")
    path = tmp_path / "w.safetensors"
    save_file(bit, str(path))
    with pytest.raises(ConfigError, match="do not fit ViT-Nano/4.*look like R-Nano"):
        load_pretrained(path, "ViT-Nano/4")


def test_weights_that_fit_nothing_name_the_closest_rows():
    sd = build_torch_model(get_spec("ViT-Nano/4")).state_dict()
    sd["blocks.0.extra.weight"] = torch.zeros(3)
    assert identify(sd) == []
    with pytest.raises(ConfigError, match="fit no model.*closest.*ViT-Nano/4"):
        pretrained_from_weights(sd)


def test_identify_gives_resolution_and_classes():
    sd = build_torch_model(get_spec("DeiT-Nano/4-dist"), 48, 7).state_dict()
    (fit,) = identify(sd)
    assert (fit.spec.name, fit.resolution, fit.num_classes, fit.spec.num_classes) == ("DeiT-Nano/4-dist", 48, 7, 7)


def test_unsafe_and_unknown_files_are_refused(tmp_path):
    for name in ("model.pth", "model.bin", "model.ckpt"):
        (tmp_path / name).write_bytes(b"\x80\x04")
        with pytest.raises(UnsafeFileError, match="pickle"):
            load_pretrained(tmp_path / name)
    with pytest.raises(ConfigError, match="allowed: .safetensors, .npz"):
        load_pretrained(tmp_path / "model.h5")
    with pytest.raises(ConfigError, match="does not exist"):
        load_pretrained(tmp_path / "nope.npz")
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ConfigError, match="not a readable safetensors"):
        load_pretrained(tmp_path / "junk.safetensors")


def test_origin_can_be_overridden_for_converted_weights(tmp_path):
    """A timm state dict converted from a vit_jax checkpoint was trained with the tanh GELU."""
    path = tmp_path / "augreg.safetensors"
    save_file(build_torch_model(get_spec("ViT-Nano/4")).state_dict(), str(path))
    p = load_pretrained(path, origin="vit_jax")
    assert p.origin is Origin.VIT_JAX and p.spec.flavour.gelu is Gelu.TANH


def test_vitbench_checkpoints_round_trip_with_their_flavour(tmp_path):
    from vitbench.transfer.checkpoint import load_checkpoint, save_checkpoint

    path, *_ = _vit_jax_case(tmp_path, "R-Nano+ViT-Micro/8")
    p = load_pretrained(path)
    saved = save_checkpoint(tmp_path / "mine.safetensors", p.weights, {**p.meta(), "config": {}, "metrics": {}})
    assert load_checkpoint(saved).model == "R-Nano+ViT-Micro/8"
    back = load_pretrained(saved)
    assert back.origin is Origin.VITBENCH and back.spec == p.spec and back.spec.flavour == p.spec.flavour
    assert all(np.array_equal(back.weights[k], p.weights[k]) for k in p.weights)
    # metadata naming one model, weights of another (issue 10: "KeyError: 'pos_embed'")
    other = build_torch_model(get_spec("R-Nano")).state_dict()
    bad = save_checkpoint(tmp_path / "bad.safetensors", {k: v.numpy() for k, v in other.items()},
                          {**p.meta(), "config": {}, "metrics": {}})
    with pytest.raises(ConfigError, match="do not fit R-Nano\\+ViT-Micro/8.*look like R-Nano "):
        load_pretrained(bad)
