"""fp32 and bf16 rounding bounds: how far two programs computing the same maths in another order may differ
(issue 30: a tolerance tuned on one CPU fails on another, where XLA fuses differently or oneDNN picks another
kernel). The float64 bookkeeping and statistical bounds: tests/tolerances_stat.py.

fp32 rounding: one rounding of a value costs at most EPS32 / 2 of it; a sum of n terms, in any order, is off by at
most n * EPS32 * (sum of |terms|) (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., eq. 4.4:
gamma_n). Two programs computing the same maths in another order (XLA's fusions, eager torch, another SIMD width)
therefore agree to `n * EPS32` relative to the size of the terms, where n is the number of roundings along the
longest chain (`model_roundings`). Adam is the exception, and why equivalence checks run SGD: Adam divides by
sqrt(v) + 1e-8, so a gradient whose true value is near zero and whose two versions differ by rounding noise
(~1e-7) moves its weight by up to +-lr in either run, whichever way the noise falls. So an Adam path is checked
apart, fed the same gradients in both programs (`adam_update_bound`): Adam's arithmetic, with nothing to amplify.
bf16 (mixed precision): BF16_U per rounding, bf16_chain roundings along a forward.
"""

from __future__ import annotations

import numpy as np

from vitbench.transfer.schedules import lr_table

EPS32 = float(np.finfo(np.float32).eps)  # 2**-23 = 1.19e-7


def model_roundings(spec, resolution: int, batch: int) -> int:
    """Roundings along the longest chain of a ViT's forward + backward, a bound on n above: every block has a
    reduction over the batch's tokens (weight gradients: batch x tokens terms), over the width and over the MLP
    (matmuls), forward and backward (x 2), for `depth` blocks plus embedding and head (+ 2)."""
    tokens = (resolution // spec.arch.patch) ** 2 + 1 + int(spec.arch.distilled)
    return (batch * tokens + spec.arch.width + spec.arch.mlp_dim) * 2 * (spec.arch.depth + 2)


def sgd_weight_bound(opt, gradient_error: float) -> float:
    """How far two SGD runs from the same weights can end apart when every step's gradient components differ by
    at most `gradient_error`: the update is linear in the gradient, so step k's error reaches the end through
    lr_s * momentum**(s - k) for every later step s (decoupled weight decay only shrinks it). The second-order
    feedback (the next gradient seeing the weights' own difference, lr * |Hessian| << 1 on these tiny models) is
    covered by a factor 2."""
    lrs = lr_table(opt)
    reach = sum(lrs[s] * opt.momentum ** (s - k) for s in range(len(lrs)) for k in range(s + 1))
    return 2 * reach * gradient_error


def adam_ratio_bound(opt, step: int) -> float:
    """max |m_hat / sqrt(v_hat)| at 0-based `step` over every gradient history: Adam's normalisation (Kingma & Ba,
    "Adam", sec. 2.1: the effective step is bounded by about the learning rate). m_hat = sum_k a_k g_k and
    v_hat = sum_k b_k g_k^2 with a_k = (1 - b1) b1^(t-k) / (1 - b1^t), b_k = (1 - b2) b2^(t-k) / (1 - b2^t), so by
    Cauchy-Schwarz |m_hat| <= sqrt(sum a_k^2 / b_k) sqrt(v_hat): 1 at the first step, ~1.003 after 4 (betas
    0.9 / 0.999)."""
    t = step + 1
    k = np.arange(1, t + 1)
    a = (1 - opt.b1) * opt.b1 ** (t - k) / (1 - opt.b1**t)
    b = (1 - opt.b2) * opt.b2 ** (t - k) / (1 - opt.b2**t)
    return float(np.sqrt((a * a / b).sum()))


def adam_update_bound(opt, weight_start: float) -> float:
    """How far two fp32 implementations of the same AdamW (torch.optim.AdamW with vitbench's decoupled decay, and
    optax's chain) can end apart when fed the *same* gradients, below the clipping norm (clipping then multiplies
    by exactly 1 or is skipped). No noise reaches Adam's division, so only its own roundings count: at step s the
    moments hold s + 1 terms of 3 roundings each (m's terms cross zero: error relative to sum_k a_k |g_k|, which
    the same Cauchy-Schwarz bounds by adam_ratio_bound * sqrt(v_hat); v's are positive), the bias corrections,
    square root, + eps and division ~6 more, so the ratio m_hat / (sqrt(v_hat) + eps) is off by at most
    (6 (s + 1) + 6) EPS32 * adam_ratio_bound; the weight's update (decay multiply, lr multiply, subtract) rounds
    3 times a value of at most the weight, which starts at most `weight_start` (max |w|) and moves by at most
    lr * adam_ratio_bound a step (decay only shrinks it). Identical gradients make the weights' own difference
    irrelevant to the ratio, and the decay factor (1 - lr wd) only shrinks it. Both programs round: x 2."""
    lrs = lr_table(opt)
    total, weight = 0.0, weight_start
    for s, lr in enumerate(lrs):
        c = adam_ratio_bound(opt, s)
        weight += lr * c
        total += lr * c * (6 * (s + 1) + 6) * EPS32 + 3 * EPS32 * weight
    return 2 * total


def clipped_gradient_error(opt, roundings: int) -> float:
    """Rounding difference of one gradient component between two fp32 programs: every component of a gradient
    clipped at global norm c is at most c, and is off by at most roundings * EPS32 of that."""
    assert opt.clip_norm is not None, "the bound needs clipped gradients (|g_i| <= clip_norm)"
    return roundings * EPS32 * opt.clip_norm


def forward_roundings(spec, resolution: int) -> int:
    """Roundings along the longest chain of one image's forward, the n of a forward parity bound: a ViT block
    reduces over the tokens (attention), the width (q.k, projections: 3x) and the MLP; a BiT block is a bottleneck
    (1x1 over C_in, 3x3 over 9 C/4, 1x1 over C/4) with GroupNorms over its map (H W C / 32 terms each, 3); the
    stem's 7x7x3 conv (ViT: the patch's 3 p^2); a hybrid runs its stages, then its ViT blocks on their tokens."""
    n, side = 0, resolution
    if spec.family in ("bit", "hybrid"):
        n, side, c_in = 7 * 7 * 3, resolution // 4, spec.arch.stem_chs * spec.arch.width_factor
        for stage, blocks in enumerate(spec.arch.layers):
            c = spec.arch.channels[stage] * spec.arch.width_factor
            side = side if stage == 0 else max(1, side // 2)
            n += blocks * (c_in + 10 * c // 4 + 3 * side * side * c // 32)
            c_in = c
        if spec.family == "bit":
            return n + c_in  # the head over the pooled features
        n += c_in  # the hybrid's 1x1 patch projection
    else:
        n, side = 3 * spec.arch.patch**2, resolution // spec.arch.patch
    tokens = side * side + 1 + int(spec.arch.distilled)
    return n + spec.arch.depth * (tokens + 3 * spec.arch.width + spec.arch.mlp_dim) + spec.arch.width


def forward_parity(spec, resolution: int) -> float:
    """max |a - b| / max |a| for two fp32 forwards of the same model (torch eager vs XLA, one CPU path vs another):
    n * EPS32 with n = forward_roundings (Higham's gamma_n, each layer's error carried through at gain ~1: residual
    connections and normalisation keep activations at the logits' scale)."""
    return forward_roundings(spec, resolution) * EPS32


def resample_bound(values, n_in: int, eps: float = EPS32) -> float:
    """A position-embedding grid resampled separably (vitbench.models.convert.interp_matrix: two dense passes,
    each a sum over the n_in source rows) by two programs in two orders: 2 n_in roundings of terms whose
    magnitudes sum to at most sum|w| max|values|, sum|w| <= 1.5 for the bicubic kernel (Keys, a = -0.75: 1.25 at
    worst) and 1 for bilinear."""
    return 2 * n_in * eps * 1.5 * float(np.abs(np.asarray(values, np.float64)).max())


def attention_distance_bound(delta: float, keys: int, resolution: int, min_mass: float) -> float:
    """|D_a - D_b| (px) of the mean attention distance of two attention maps `delta` apart entrywise (float64
    arithmetic after: vitbench.insight.distance): per query D = N / M with N = sum_k a_k d_k over `keys` patch
    keys and M = sum_k a_k, so |dN| <= delta keys max d, |dM| <= delta keys and |d(N / M)| <= (|dN| + D |dM|) /
    (M - |dM|) <= 2 delta keys max d / (min_mass - delta keys); max d <= the image's diagonal."""
    return 2 * delta * keys * resolution * 2**0.5 / (min_mass - delta * keys)


def rollout_bound(delta: float, layers: int, tokens: int) -> float:
    """|R_a - R_b| entrywise of two attention rollouts (vitbench.insight.rollout, float64) from maps `delta` apart:
    each layer's row-normalised 0.5 mean_h A + 0.5 I moves by at most tokens * delta in row-sum norm (the entries
    and the normaliser), and a product of row-stochastic matrices adds its factors' errors in that norm."""
    return layers * tokens * delta


BF16_U = 2.0**-8  # bfloat16's unit roundoff: 8 significant bits (7 stored), one rounding costs <= 2**-8 of a value


def bf16_chain(spec) -> int:
    """bf16 roundings along a ViT's forward in mixed precision (Flax, dtype=bfloat16): the dots accumulate in fp32
    (XLA's CPU backend computes bf16 dots in f32; x86's bf16 dot instructions, AVX512-BF16's VDPBF16PS and AMX,
    accumulate in fp32), so a layer rounds its kernel (once) and its output (once) to bf16, not its n terms (an
    fp32 accumulation is off by n EPS32, negligible here). Per block: LayerNorm 1, qkv 2, the
    logits q.k 1, softmax 1, the weighted values 1, the projection 2, the residual add 1, LayerNorm 1, fc1 2,
    GELU 1, fc2 2, the add 1 (16); the input 1, the patch embedding 2, + position 1, the final LayerNorm 1 and the
    head 2.
    Each rounding's error is carried to the logits at gain ~1 (forward_parity's assumption), so two such forwards,
    one in fp32, differ by at most bf16_chain * BF16_U relative to the largest logit."""
    return 16 * spec.arch.depth + 7
