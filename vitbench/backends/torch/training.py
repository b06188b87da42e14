"""Training with PyTorch, for the benchmark's training step and the transfer protocols (one optimizer builder).

Optimiser mapping (kept identical to the optax chain of the JAX backend, one LR table from schedules.lr_table):
- adam: torch.optim.AdamW(betas=(b1, b2), eps=1e-8), decoupled weight decay lr * wd * p on kernels only
  (matrices/convs; biases, norms, class token and position embeddings are not decayed, as big_vision does).
  With weight decay 0 this is Adam, the paper's pre-training optimiser.
- sgd:  torch.optim.SGD(momentum), buf = m * buf + g (no dampening, no Nesterov) == optax.sgd(momentum=m);
  weight decay, if any, is applied decoupled by hand.
- global-norm gradient clipping before the update (paper: norm 1).
"""

from __future__ import annotations

import torch

from vitbench.transfer.schedules import OptimConfig

_NO_DECAY = ("pos_embed", "cls_token")


def decays(name: str, shape: tuple[int, ...]) -> bool:
    """Whether weight decay applies: kernels (ndim >= 2) except position embeddings / class token."""
    return len(shape) >= 2 and name.split(".")[-1] not in _NO_DECAY


def make_optimizer(opt: OptimConfig, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, list, list]:
    """(optimizer, parameters that decay, all trainable parameters) for `opt` on `model`; the LR is `opt.lr`
    until the caller sets another per step."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in named if decays(n, tuple(p.shape))]
    rest = [p for n, p in named if not decays(n, tuple(p.shape))]
    groups = [{"params": decay}, {"params": rest}]
    if opt.optimizer == "adam":
        optim = torch.optim.AdamW(groups, lr=opt.lr, betas=(opt.b1, opt.b2), eps=1e-8, weight_decay=0.0)
    else:
        optim = torch.optim.SGD(groups, lr=opt.lr, momentum=opt.momentum, weight_decay=0.0)
    return optim, decay, [p for _, p in named]


def update(optim: torch.optim.Optimizer, params: list, decay: list, opt: OptimConfig, lr: float,
           scaler: torch.amp.GradScaler | None = None) -> None:
    """One optimiser update after backward: unscale (fp16), clip at the global norm, set the LR, decoupled
    weight decay (p <- p - lr * wd * p, before the gradient step, as AdamW), step."""
    if scaler is not None:
        scaler.unscale_(optim)  # clip the true gradients, not the scaled ones
    if opt.clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, opt.clip_norm)
    for g in optim.param_groups:
        g["lr"] = lr
    if opt.weight_decay:
        with torch.no_grad():
            torch._foreach_mul_(decay, 1.0 - lr * opt.weight_decay)
    if scaler is not None:
        scaler.step(optim)
        scaler.update()
    else:
        optim.step()
