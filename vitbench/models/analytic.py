"""Analytic parameter and MAC counts per family, from the architecture alone (no framework, no allocation).

Convention: 1 MAC = 2 FLOPs. Counted: every matmul/conv MAC (patch embedding, qkv, attention scores and
weighted sum, projections, MLP, head; ResNet convs incl. projection shortcuts). Not counted: LayerNorm,
GroupNorm, weight standardisation, softmax, GELU/ReLU, residual adds, pooling, biases — the usual convention
(fvcore and timm's published GMACs do the same, up to small norm terms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vitbench.models import posemb
from vitbench.models.specs import ModelSpec


@dataclass(frozen=True)
class Counts:
    params: int
    macs: int

    @property
    def gmacs(self) -> float:
        return self.macs / 1e9

    @property
    def gflops(self) -> float:
        return 2 * self.macs / 1e9


def _encoder(spec: ModelSpec, tokens: int) -> Counts:
    """Transformer encoder (Vaswani et al.; ViT eq. 2-3): L pre-LN blocks on T = tokens + the class token
    (+ the distillation token of a distilled DeiT)."""
    d, m, t, layers = spec.width, spec.mlp_dim, tokens + spec.num_prefix_tokens, spec.depth
    block_params = (3 * d * d + 3 * d) + (d * d + d) + (d * m + m) + (m * d + d) + 4 * d  # qkv, proj, mlp, 2 LN
    block_macs = 4 * t * d * d + 2 * t * t * d + 2 * t * d * m  # qkv+proj, QK^T and AV, MLP
    return Counts(layers * block_params + 2 * d, layers * block_macs)  # + final LN


def _resnet(spec: ModelSpec, resolution: int, *, preact: bool) -> tuple[Counts, int]:
    """Bottleneck ResNet (v2 pre-activation for BiT, v1.5 for hybrid stems). Returns counts and final H."""
    c0 = spec.root_channels
    h = resolution // 2  # 7x7/2 root conv
    params = 49 * 3 * c0 + (0 if preact else 2 * c0)  # root GN only in the non-preact (vit_jax) root
    macs = h * h * 49 * 3 * c0
    h //= 2  # 3x3/2 max-pool
    cin = c0
    for s, (blocks, cout) in enumerate(zip(spec.layers, spec.stage_channels)):
        mid = cout // 4
        for b in range(blocks):
            stride = 2 if (b == 0 and s > 0) else 1
            hout = h // stride
            params += cin * mid + 9 * mid * mid + mid * cout  # conv1 1x1, conv2 3x3, conv3 1x1 (no bias)
            params += 2 * (cin if preact else mid) + 2 * mid + 2 * (mid if preact else cout)  # three GNs
            macs += h * h * cin * mid + hout * hout * (9 * mid * mid + mid * cout)
            if b == 0:  # projection shortcut (1x1, stride); non-preact adds a GN after it
                params += cin * cout + (0 if preact else 2 * cout)
                macs += hout * hout * cin * cout
            cin, h = cout, hout
    if preact:
        params += 2 * cin  # final GN before the head
    return Counts(params, macs), h


def analytic_counts(spec: ModelSpec, resolution: int | None = None, num_classes: int | None = None) -> Counts:
    """Params and forward MACs of one image at `resolution` (default: native)."""
    r = spec.resolution if resolution is None else resolution
    k = spec.num_classes if num_classes is None else num_classes
    spec.check_resolution(r)
    if spec.family == "bit":
        body, _ = _resnet(spec, r, preact=True)
        c = spec.stage_channels[-1]
        return Counts(body.params + c * k + k, body.macs + c * k)
    n = spec.tokens(r)
    d = spec.width
    enc = _encoder(spec, n)
    if spec.family == "vit":
        p = spec.patch
        embed = Counts(p * p * 3 * d + d, n * p * p * 3 * d)
    else:
        body, _ = _resnet(spec, r, preact=False)
        c = spec.stage_channels[-1]
        embed = Counts(body.params + c * d + d, body.macs + n * c * d)  # 1x1 "patch" projection
    pos, head = _position(spec, r, n), _head(spec, k)
    prefix = spec.num_prefix_tokens  # class token (+ distillation token); none with GAP
    return Counts(embed.params + prefix * d + pos.params + enc.params + head.params,
                  embed.macs + pos.macs + enc.macs + head.macs)


def _position(spec: ModelSpec, resolution: int, n: int) -> Counts:
    """Position embeddings (vitbench.models.posemb): absolute tables (adds not counted); relative: a table of
    2T-1 offsets per layer and the query against every offset, T(2T-1)D MACs per layer."""
    params = sum(math.prod(t.shape) for t in posemb.tables(spec, resolution))
    if spec.posemb == "relative":
        t = n + spec.num_prefix_tokens
        return Counts(params, spec.depth * t * posemb.relative_offsets(t) * spec.width)
    return Counts(params, 0)


def _head(spec: ModelSpec, k: int) -> Counts:
    """Head(s): one per prefix token (DeiT: class and distillation heads), one after GAP; rep_size adds the
    pre-logits Dense (+ tanh) before it (vit_jax's pre-training head)."""
    d, rep = spec.width, spec.rep_size
    heads = max(spec.num_prefix_tokens, 1)
    pre = Counts(d * rep + rep, d * rep) if rep else Counts(0, 0)
    into = rep or d
    return Counts(pre.params + heads * (into * k + k), pre.macs + heads * into * k)


def train_flops_per_image(spec: ModelSpec, resolution: int | None = None, num_classes: int | None = None) -> float:
    """Training FLOPs per image: forward + backward = 3x forward (backward ~ 2x forward), 2 FLOPs per MAC."""
    return 3 * 2 * analytic_counts(spec, resolution, num_classes).macs
