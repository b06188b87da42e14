"""PyTorch Axial-ViT and Axial-ResNet (see the package docstring for the architecture and its sources).

Attention is written as explicit matmuls (q @ k^T, softmax, @ v) on channels-last (B, H, W, C) maps, so FLOP
counters see every product. `AxialAttention.keep` set: the last attention probabilities stay in `.maps`
(`attention_maps`, inspection's per-axis reader).
"""

from __future__ import annotations

import torch
from torch import nn

from vitbench.models.families import Axis
from vitbench.models.families.axial import grid, resnet_plan
from vitbench.models.layers.torch import GELUS
from vitbench.models.specs import ModelSpec


class AxialAttention(nn.Module):
    """Multi-head self-attention along one axis of a (B, H, W, C) map: Axis.ROW mixes along W (within each row),
    Axis.COLUMN along H. `length`: a relative query-logit table of 2*length-1 offsets (Axial-DeepLab, q term)."""

    def __init__(self, dim: int, heads: int, along: Axis, *, bias: bool = True, proj: bool = True,
                 length: int = 0) -> None:
        super().__init__()
        self.heads, self.along, self.keep, self.maps = heads, along, False, None
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias) if proj else None
        if length:
            self.rel_embedding = nn.Parameter(torch.randn(2 * length - 1, dim // heads) * 0.02)
        else:
            self.rel_embedding = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.along is Axis.COLUMN:
            x = x.transpose(1, 2)
        b, n, length, c = x.shape
        h, dh = self.heads, c // self.heads
        q, k, v = self.qkv(x).reshape(b, n, length, 3, h, dh).permute(3, 0, 1, 4, 2, 5).unbind(0)
        q = q * dh ** -0.5
        logits = q @ k.transpose(-1, -2)  # (b, n, heads, L, L)
        if self.rel_embedding is not None:
            if self.rel_embedding.shape[0] != 2 * length - 1:
                built = (self.rel_embedding.shape[0] + 1) // 2
                raise ValueError(f"axial layer built for axis length {built}, got {length}")
            pos = torch.arange(length, device=x.device)  # index q - k + L - 1 (posemb.relative_index), traceable
            table = self.rel_embedding[pos[:, None] - pos[None, :] + length - 1]  # (L, L, dh)
            logits = logits + torch.einsum("bnhld,lmd->bnhlm", q, table)
        attn = logits.softmax(dim=-1)
        if self.keep:
            self.maps = attn.detach()
        out = (attn @ v).permute(0, 1, 3, 2, 4).reshape(b, n, length, c)
        if self.proj is not None:
            out = self.proj(out)
        return out.transpose(1, 2) if self.along is Axis.COLUMN else out


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, act) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), act(), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class AxialBlock(nn.Module):
    """Pre-LN: x + attn(LN(x)) along one axis, then x + MLP(LN(x))."""

    def __init__(self, spec: ModelSpec, along: Axis, act) -> None:
        super().__init__()
        d = spec.arch.width
        self.norm1 = nn.LayerNorm(d, eps=spec.arch.ln_eps)
        self.attn = AxialAttention(d, spec.arch.heads, along)
        self.norm2 = nn.LayerNorm(d, eps=spec.arch.ln_eps)
        self.mlp = Mlp(d, spec.arch.mlp_dim, act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class AxialViT(nn.Module):
    def __init__(self, spec: ModelSpec, resolution: int, num_classes: int) -> None:
        super().__init__()
        d, g = spec.arch.width, grid(spec, resolution)
        act = GELUS[spec.flavour.gelu]
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, d, spec.arch.patch, spec.arch.patch)
        self.pos_embed = nn.Parameter(torch.randn(1, g, g, d) * 0.02)  # std 0.02 (ViT's position embeddings)
        self.blocks = nn.ModuleList(AxialBlock(spec, along, act)
                                    for _ in range(spec.arch.depth) for along in (Axis.ROW, Axis.COLUMN))
        self.norm = nn.LayerNorm(d, eps=spec.arch.ln_eps)
        self.num_features = d
        self.head = nn.Linear(d, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed.proj(x).permute(0, 2, 3, 1) + self.pos_embed  # (B, h, w, D)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = x.mean(dim=(1, 2))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


class Bottleneck(nn.Module):
    """conv1 1x1 -> GN -> ReLU -> height attention -> width attention -> [2x2 avg-pool] -> GN -> ReLU -> conv3 1x1
    -> GN, + shortcut (1x1 conv + GN on the first block), ReLU."""

    def __init__(self, spec: ModelSpec, cin: int, mid: int, cout: int, stride: int, h: int, project: bool) -> None:
        super().__init__()
        g, eps = spec.arch.gn_groups, spec.flavour.gn_eps
        self.conv1, self.norm1 = nn.Conv2d(cin, mid, 1, bias=False), nn.GroupNorm(g, mid, eps=eps)
        self.attn_h = AxialAttention(mid, spec.arch.heads, Axis.COLUMN, bias=False, proj=False, length=h)
        self.attn_w = AxialAttention(mid, spec.arch.heads, Axis.ROW, bias=False, proj=False, length=h)
        self.pool = nn.AvgPool2d(2) if stride == 2 else nn.Identity()
        self.norm2 = nn.GroupNorm(g, mid, eps=eps)
        self.conv3, self.norm3 = nn.Conv2d(mid, cout, 1, bias=False), nn.GroupNorm(g, cout, eps=eps)
        if project:
            self.downsample = nn.Module()
            self.downsample.conv = nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
            self.downsample.norm = nn.GroupNorm(g, cout, eps=eps)
        else:
            self.downsample = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm1(self.conv1(x))).permute(0, 2, 3, 1)
        y = self.attn_w(self.attn_h(y)).permute(0, 3, 1, 2)
        y = torch.relu(self.norm2(self.pool(y)))
        y = self.norm3(self.conv3(y))
        short = x if self.downsample is None else self.downsample.norm(self.downsample.conv(x))
        return torch.relu(y + short)


class AxialResNet(nn.Module):
    def __init__(self, spec: ModelSpec, resolution: int, num_classes: int) -> None:
        super().__init__()
        c0 = spec.arch.root_channels
        self.stem = nn.Module()
        self.stem.conv = nn.Conv2d(3, c0, 7, stride=2, padding=3, bias=False)
        self.stem.norm = nn.GroupNorm(spec.arch.gn_groups, c0, eps=spec.flavour.gn_eps)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.stages = nn.ModuleList(nn.Module() for _ in spec.arch.layers)
        for s in self.stages:
            s.blocks = nn.ModuleList()
        for b in resnet_plan(spec, resolution)[0]:
            self.stages[b.s].blocks.append(Bottleneck(spec, b.cin, b.mid, b.cout, b.stride, b.h, b.j == 0))
        self.num_features = spec.arch.stage_channels[-1]
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.stem.norm(self.stem.conv(x))))
        for stage in self.stages:
            for blk in stage.blocks:
                x = blk(x)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = x.mean(dim=(2, 3))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def flax_defaults_init(model: nn.Module) -> nn.Module:
    """`model`'s parameters drawn as its Flax twin draws them (flax.py: Flax's defaults, LeCun-normal kernels of
    every Dense and Conv, zero biases; position and relative embeddings normal(0.02)), where torch's defaults
    (Kaiming-uniform, a = sqrt(5): a std sqrt(3) smaller, random biases) made the two backends pre-train from
    different starts. Norm layers keep ones and zeros on both. The families' FamilyBuild.torch_init."""
    from timm.layers import lecun_normal_

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                lecun_normal_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for name, p in model.named_parameters():
            if name.rpartition(".")[2] in ("pos_embed", "rel_embedding"):
                nn.init.normal_(p, std=0.02)
    return model


def build_axial_vit(spec: ModelSpec, resolution: int, num_classes: int) -> nn.Module:
    return AxialViT(spec, resolution, num_classes)


def build_axial_resnet(spec: ModelSpec, resolution: int, num_classes: int) -> nn.Module:
    return AxialResNet(spec, resolution, num_classes)


def attention_maps(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The attention probabilities of every axial layer of `model` on NCHW `x`, in forward order (the order of
    the family's `axis_layers`): one (images, sequences, heads, length, length) tensor each. The model is left
    as it was (nothing kept)."""
    layers = [m for m in model.modules() if isinstance(m, AxialAttention)]  # registration = forward order
    for m in layers:
        m.keep = True
    try:
        with torch.no_grad():
            model(x)
        return [m.maps for m in layers]
    finally:
        for m in layers:
            m.keep, m.maps = False, None
