"""Training with optax, for the benchmark's training step and the transfer protocols (one optimizer builder).

Optimiser mapping (identical in effect to the torch backend's training.py, one LR table from schedules.lr_table):
- adam: clip_by_global_norm(c) -> scale_by_adam(b1, b2, eps=1e-8) -> add_decayed_weights(wd, kernels) -> x(-lr)
        (optax.adamw's chain) == torch AdamW with decoupled decay lr * wd * p on kernels only; with wd = 0 it is
        the paper's Adam.
- sgd:  clip_by_global_norm(c) -> trace(momentum) -> add_decayed_weights(wd, kernels) -> x(-lr)
        == torch SGD(momentum, dampening 0) plus decoupled decay (fine-tuning uses wd = 0).
Kernels = Flax leaves named `kernel` (Dense/Conv weights; the attention's q/k/v/out kernels), the same set as
torch's ndim >= 2 weights without pos_embed/cls_token/dist_token. The learning rate multiplies the update inside
the step, so one compiled step serves a whole LR grid and any schedule.
Distillation (DeiT): `distillation_loss`, the one definition of its maths on this backend (see
vitbench.transfer.distill for the formulas and their sources); the teacher's logits, lambda and tau are step
arguments, so one compiled step per kind (hard, soft) serves any teacher and weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vitbench.backends.base import TRANSFER_PRECISION
from vitbench.backends.jax.numerics import traced_at
from vitbench.models.specs import ModelSpec
from vitbench.transfer.distill import Distill, Distillation
from vitbench.transfer.schedules import OptimConfig, lr_table


@dataclass
class FlaxModel:
    module: Any  # flax.linen.Module (stateless)
    params: dict
    spec: ModelSpec


def decay_mask(params: dict) -> dict:
    return jax.tree_util.tree_map_with_path(lambda path, _: getattr(path[-1], "key", None) == "kernel", params)


def make_tx(opt: OptimConfig, params: dict) -> optax.GradientTransformation:
    """Everything of the update except the learning rate, which the step multiplies in (-lr * update)."""
    clip = [optax.clip_by_global_norm(opt.clip_norm)] if opt.clip_norm is not None else []
    if opt.optimizer == "adam":
        core = optax.scale_by_adam(b1=opt.b1, b2=opt.b2, eps=1e-8)
    else:
        core = optax.trace(decay=opt.momentum, nesterov=False)
    decay = [optax.add_decayed_weights(opt.weight_decay, mask=decay_mask(params))] if opt.weight_decay else []
    return optax.chain(*clip, core, *decay)


def apply_update(tx, grads, opt_state, params, lr):
    """(new params, new optimizer state) after one update with learning rate `lr`."""
    updates, opt_state = tx.update(grads, opt_state, params)
    updates = jax.tree_util.tree_map(lambda u: -lr * u, updates)
    return optax.apply_updates(params, updates), opt_state


def distillation_loss(cls_logits, dist_logits, targets, teacher_logits, kind: Distillation, lam, tau):
    """(1 - lam) CE(cls, targets) + lam * (hard: CE(dist, argmax teacher); soft: tau^2 KL(teacher || dist) at
    temperature tau, per image, batch mean): DeiT eq. 2 / 3 (vitbench.transfer.distill). `targets`: the true
    labels one-hot (label smoothing, if any, already applied: it touches only this term, as deit's losses.py)."""
    base = optax.softmax_cross_entropy(cls_logits, targets).mean()
    teacher_logits = jax.lax.stop_gradient(teacher_logits)
    if kind is Distillation.HARD:
        kd = optax.softmax_cross_entropy_with_integer_labels(dist_logits, jnp.argmax(teacher_logits, -1)).mean()
    else:
        log_t = jax.nn.log_softmax(teacher_logits / tau, -1)
        log_s = jax.nn.log_softmax(dist_logits / tau, -1)
        kd = tau * tau * jnp.sum(jnp.exp(log_t) * (log_t - log_s), -1).mean()
    return (1.0 - lam) * base + lam * kd


_STEP_CACHE: dict = {}
_EXEC_CACHE: dict = {}  # (jitted step, batch shape) -> compiled executable


def _train_step(module, opt: OptimConfig, num_classes: int, params: dict, kind: Distillation | None = None):
    """(tx, jitted step) for this model and optimiser settings (the LR is a step argument), cached.

    step(params, opt_state, x, y, lr, kd): `kd` is () for plain training, (teacher logits, lambda, tau) when
    distilling (`kind`)."""
    key = (module, opt.optimizer, opt.b1, opt.b2, opt.momentum, opt.weight_decay, opt.clip_norm,
           opt.label_smoothing, num_classes, kind)
    if key in _STEP_CACHE:
        return _STEP_CACHE[key]
    tx = make_tx(opt, params)
    smoothing = opt.label_smoothing

    def loss_fn(p, x, y, kd):
        targets = jax.nn.one_hot(y, num_classes)
        if smoothing:
            targets = optax.smooth_labels(targets, smoothing)  # y (1 - a) + a / K, as torch's label_smoothing
        if kind is None:
            return optax.softmax_cross_entropy(module.apply({"params": p}, x, train=True), targets).mean()
        # DeiT: class head on the labels, distillation head on the teacher (the same head without the token)
        cls_logits, dist_logits = module.apply({"params": p}, x, train=True, separate_heads=True)
        teacher_logits, lam, tau = kd
        return distillation_loss(cls_logits, dist_logits, targets, teacher_logits, kind, lam, tau)

    @jax.jit
    @traced_at(TRANSFER_PRECISION)
    def step(p, opt_state, x, y, lr, kd):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y, kd)
        p, opt_state = apply_update(tx, grads, opt_state, p, lr)
        return p, opt_state, loss

    _STEP_CACHE[key] = (tx, step)
    return tx, step


def train(backend, model: FlaxModel, data, resolution: int, opt: OptimConfig, batch_size: int,
          seed: int, distill: Distill | None = None) -> tuple[FlaxModel, list[float]]:
    """`opt.steps` updates of `model` on `data` (an ImageSet), distilling from a teacher when `distill` is given;
    compile time is added to `backend.compile_s`."""
    from vitbench.transfer.data import batch_indices

    tx, step = _train_step(model.module, opt, data.num_classes, model.params,
                           distill.kind if distill is not None else None)
    params, opt_state = model.params, tx.init(model.params)
    order = batch_indices(len(data), batch_size, opt.steps, seed)
    lrs = lr_table(opt).astype(np.float32)

    def kd(s: int) -> tuple:
        if distill is None:
            return ()
        return (backend.put(distill.teacher_logits(order[s]).astype(np.float32)), np.float32(distill.lam),
                np.float32(distill.tau))

    batches = data.steps(order, resolution)  # decoded ahead (data.workers), in order

    def inputs(s: int) -> tuple:
        """Step `s`'s (x, y, lr, kd), on the device (the step does not donate them: step 0's are reused).
        Called once per step, in step order (`batches` is a stream)."""
        x, y = next(batches)
        return backend.put(x), backend.put(y.astype(np.int32)), lrs[s], kd(s)

    first = inputs(0)  # built once: used to lower the step and as the loop's step 0
    ckey = (step, first[0].shape)
    if ckey not in _EXEC_CACHE:  # ahead-of-time compile, timed apart from the training steps
        t0 = time.perf_counter()
        _EXEC_CACHE[ckey] = step.lower(params, opt_state, *first).compile()
        backend.compile_s += time.perf_counter() - t0
    run = _EXEC_CACHE[ckey]
    losses = []
    for s in range(opt.steps):
        params, opt_state, loss = run(params, opt_state, *(first if s == 0 else inputs(s)))
        losses.append(loss)
    model.params = params
    return model, [float(v) for v in jax.device_get(losses)]


_JIT_CACHE: dict = {}


def apply_compiled(module, pre_logits: bool):
    """A jitted forward (logits, or the pre-logits representation), cached per module."""
    key = (module, pre_logits)  # linen modules are frozen dataclasses: hashable by their fields
    if key not in _JIT_CACHE:
        _JIT_CACHE[key] = jax.jit(traced_at(TRANSFER_PRECISION)(
            lambda p, x: module.apply({"params": p}, x, pre_logits=pre_logits)))
    return _JIT_CACHE[key]


def host_array(x) -> np.ndarray:
    return np.asarray(jax.device_get(x), np.float32)
