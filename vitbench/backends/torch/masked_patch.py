"""Masked patch prediction on PyTorch (ViT paper Sec. 4.6; the shared parts, corruption and targets, in
vitbench.transfer.masked_patch).

The corruption goes in through a forward hook on the model's `patch_embed` (a ViT's conv, a hybrid's
ResNet + 1x1 projection, a ViT-like timm model's own patch embedding): its output tokens (B, N, D; or NHWC
(B, h, w, D), raster order alike) are replaced by the [mask] embedding or another patch's embedding before the
prefix tokens (class, distillation, register) and position embeddings are added, so every ViT/hybrid built by
vitbench.models.torch (overrides included) and every ViT-like timm model (vit_*, deit_*, eva*: `patch_embed`,
`forward_features` giving the prefix tokens then the patches' after the final norm) trains without a model of
its own. The head reads the encoder's output tokens (after the final LayerNorm) at the corrupted positions.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from vitbench.backends.torch.training import host_losses, make_optimizer, update
from vitbench.transfer import masked_patch as mpt
from vitbench.transfer.schedules import OptimConfig, lr_table


class Objective(torch.nn.Module):
    """The objective's own parameters: the [mask] embedding and the prediction head."""

    def __init__(self, init: dict[str, np.ndarray]):
        super().__init__()
        self.mask_token = torch.nn.Parameter(torch.from_numpy(init[mpt.MASK_KEY].copy()))
        w = init[mpt.HEAD_W]
        self.head = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            self.head.weight.copy_(torch.from_numpy(w))
            self.head.bias.copy_(torch.from_numpy(init[mpt.HEAD_B]))

    def state(self) -> dict[str, np.ndarray]:
        return {mpt.MASK_KEY: self.mask_token.detach().cpu().numpy().copy(),
                mpt.HEAD_W: self.head.weight.detach().cpu().numpy().copy(),
                mpt.HEAD_B: self.head.bias.detach().cpu().numpy().copy()}


def loss(outputs: torch.Tensor, targets: torch.Tensor, target: mpt.Target) -> torch.Tensor:
    """Mean loss over the corrupted positions: softmax CE over 512 colours (per grid cell for color_grid), or
    the mean squared error over the patch's values (pixels_l2)."""
    if target is mpt.Target.PIXELS_L2:
        return F.mse_loss(outputs, targets)
    return F.cross_entropy(outputs.reshape(-1, mpt.CLASSES), targets.reshape(-1))


def predict(model: torch.nn.Module, obj: Objective, x: torch.Tensor, c: mpt.Corruption, prefix: int,
            device) -> torch.Tensor:
    """The head's outputs (B, M, out) at the corrupted positions of corrupted images `x` (NCHW)."""
    source = torch.from_numpy(c.source.astype(np.int64)).to(device)
    use_mask = torch.from_numpy(c.use_mask).to(device)[..., None]

    def corrupt(_module, _inputs, out):
        b, d = out.shape[0], out.shape[-1]  # (B, N, D) tokens, or (B, h, w, D) from an NHWC patch embedding
        tokens = out.reshape(b, -1, d)
        n = tokens.shape[1]
        taken = tokens.reshape(b * n, d)[source.reshape(-1)].reshape(b, n, d)
        return (use_mask * obj.mask_token + (1 - use_mask) * taken).reshape(out.shape)

    handle = model.patch_embed.register_forward_hook(corrupt)
    try:
        out = model.forward_features(x)[:, prefix:]
    finally:
        handle.remove()
    pos = torch.from_numpy(c.positions.astype(np.int64)).to(device)
    picked = torch.gather(out, 1, pos[..., None].expand(-1, -1, out.shape[-1]))
    return obj.head(picked)


def train(backend, model: torch.nn.Module, batches, opt: OptimConfig, mp: mpt.MaskedPatch, init: dict,
          prefix: int) -> tuple[torch.nn.Module, dict, list[float]]:
    """`opt.steps` masked-patch updates over `batches` (vitbench.transfer.masked_patch.batches); returns (model,
    the objective's final parameters, loss per step). The encoder's classifier gets no gradient."""
    obj = Objective(init).to(backend.device)
    both = torch.nn.ModuleDict({"encoder": model, "objective": obj})
    optim, decay, params = make_optimizer(opt, both)
    lrs = lr_table(opt)
    losses = []
    model.train()
    for step, b in enumerate(batches):
        out = predict(model, obj, backend._tensor(b.images), b.corruption, prefix, backend.device)
        y = torch.from_numpy(b.targets).to(backend.device)
        value = loss(out, y, mp.target)
        optim.zero_grad(set_to_none=True)
        value.backward()
        update(optim, params, decay, opt, float(lrs[step]))
        losses.append(value.detach())
    model.eval()
    return model, obj.state(), host_losses(losses)
