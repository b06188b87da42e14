"""Training with PyTorch, for the benchmark's training step and the transfer protocols (one optimizer builder).

Optimiser mapping (kept identical to the optax chain of the JAX backend, one LR table from schedules.lr_table):
- adam: torch.optim.AdamW(betas=(b1, b2), eps=1e-8), decoupled weight decay lr * wd * p on kernels only
  (matrices/convs; biases, norms, class token and position embeddings are not decayed, as big_vision does).
  With weight decay 0 this is Adam, the paper's pre-training optimiser.
- sgd:  torch.optim.SGD(momentum), buf = m * buf + g (no dampening, no Nesterov) == optax.sgd(momentum=m);
  weight decay, if any, is applied decoupled by hand.
- global-norm gradient clipping before the update (paper: norm 1).
The supervised training loop of the transfer protocols: `train` (masked patch prediction's: masked_patch.py).
Distillation (DeiT): `distillation_loss`, the one definition of its maths on this backend (see
vitbench.transfer.distill for the formulas and their sources).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vitbench.models.torch import forward_heads
from vitbench.transfer.distill import Distill, Distillation
from vitbench.transfer.schedules import OptimConfig, lr_table

# timm VisionTransformer.no_weight_decay, plus the other position-embedding tables (vitbench.models.posemb:
# learned_2d, every-layer, relative); the JAX backend decays only `kernel` leaves, which none of these is
_NO_DECAY = ("pos_embed", "cls_token", "dist_token", "pos_embedding", "pos_embedding_x", "pos_embedding_y",
             "rel_embedding")


def decays(name: str, shape: tuple[int, ...]) -> bool:
    """Whether weight decay applies: kernels (ndim >= 2) except position embeddings and the class and
    distillation tokens."""
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


def distillation_loss(cls_logits: torch.Tensor, dist_logits: torch.Tensor, labels: torch.Tensor,
                      teacher_logits: torch.Tensor, distill: Distill,
                      label_smoothing: float = 0.0) -> torch.Tensor:
    """(1 - lam) CE(cls, y) + lam * (hard: CE(dist, argmax teacher); soft: tau^2 KL(teacher || dist) at
    temperature tau, per image, batch mean): DeiT eq. 2 / 3 (vitbench.transfer.distill). Label smoothing only in
    the CE on the true labels, as deit's losses.py."""
    base = F.cross_entropy(cls_logits, labels, label_smoothing=label_smoothing)
    teacher_logits = teacher_logits.detach()
    if distill.kind is Distillation.HARD:
        kd = F.cross_entropy(dist_logits, teacher_logits.argmax(dim=1))
    else:
        tau = distill.tau
        kd = F.kl_div(F.log_softmax(dist_logits / tau, dim=1), F.log_softmax(teacher_logits / tau, dim=1),
                      reduction="batchmean", log_target=True) * tau * tau
    return (1.0 - distill.lam) * base + distill.lam * kd


def train(backend, model: torch.nn.Module, data, resolution: int, opt: OptimConfig, batch_size: int, seed: int,
          distill: Distill | None = None) -> tuple[torch.nn.Module, list[float]]:
    """`opt.steps` supervised updates of `model` on `data` (Backend.train) on `backend`'s device; returns (model,
    loss per step)."""
    from vitbench.transfer.data import batch_indices

    optim, decay, params = make_optimizer(opt, model)
    lrs = lr_table(opt)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=opt.label_smoothing)
    order = batch_indices(len(data), batch_size, opt.steps, seed)
    losses = []
    model.train()
    batches = data.steps(order, resolution)  # decoded ahead (data.workers), in order
    for step in range(opt.steps):
        x, y = next(batches)
        x, y = backend._tensor(x), torch.from_numpy(y).to(backend.device)
        if distill is None:
            loss = loss_fn(model(x), y)
        else:  # DeiT: class head on the labels, distillation head on the teacher (same head if no token)
            teacher = torch.from_numpy(distill.teacher_logits(order[step])).to(backend.device)
            loss = distillation_loss(*forward_heads(model, x), y, teacher, distill, opt.label_smoothing)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        update(optim, params, decay, opt, float(lrs[step]))
        losses.append(loss.detach())
    model.eval()
    return model, host_losses(losses)


def host_losses(losses: list[torch.Tensor]) -> list[float]:
    """The loss per step on the host, read once after the loop (no sync inside it); a non-finite one is the
    transfer protocols' divergence check (vitbench.transfer.ops.check_trained)."""
    return [float(v) for v in torch.stack(losses).cpu()] if losses else []
