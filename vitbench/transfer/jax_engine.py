"""JAX/Flax transfer engine: vitbench.models.flax models, optax optimisers, weights through models.convert.

Optimiser mapping (identical in effect to torch_engine.py, one LR table from schedules.lr_table):
- adam: clip_by_global_norm(c) -> scale_by_adam(b1, b2, eps=1e-8) -> add_decayed_weights(wd, kernels) -> x(-lr)
        (optax.adamw's chain) == torch AdamW with decoupled decay lr * wd * p on kernels only.
- sgd:  clip_by_global_norm(c) -> trace(momentum) -> add_decayed_weights(wd, kernels) -> x(-lr)
        == torch SGD(momentum, dampening 0) plus decoupled decay (fine-tuning uses wd = 0).
Kernels = Flax leaves named `kernel` (Dense/Conv weights; the attention's q/k/v/out kernels), the same set
as torch's ndim >= 2 weights without pos_embed/cls_token.

Checkpoints stay in timm naming: `weights()` converts params -> timm state dict and `load_weights()` back
(vitbench.models.convert), so a torch-pretrained checkpoint fine-tunes here and vice versa.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vitbench.models.convert import flax_to_torch, torch_to_flax
from vitbench.models.flax import build_flax_model, init_params
from vitbench.models.specs import ModelSpec
from vitbench.transfer.data import ImageSet, batch_indices
from vitbench.transfer.engine import TransferEngine
from vitbench.transfer.schedules import OptimConfig, lr_table


@dataclass
class FlaxModel:
    module: Any  # flax.linen.Module (stateless)
    params: dict
    spec: ModelSpec


def _decay_mask(params: dict) -> dict:
    return jax.tree_util.tree_map_with_path(
        lambda path, _: getattr(path[-1], "key", None) == "kernel", params)


def make_tx(opt: OptimConfig, mask: dict) -> optax.GradientTransformation:
    """Everything of the update except the learning rate, which the step multiplies in (-lr * update).

    adam: scale_by_adam -> add_decayed_weights -> (x -lr)  is optax.adamw's own chain;
    sgd:  trace(momentum) -> add_decayed_weights -> (x -lr)  is optax.sgd plus decoupled decay.
    Passing the LR as an argument lets one compiled step serve a whole LR grid and any schedule.
    """
    clip = [optax.clip_by_global_norm(opt.clip_norm)] if opt.clip_norm is not None else []
    if opt.optimizer == "adam":
        core = optax.scale_by_adam(b1=opt.b1, b2=opt.b2, eps=1e-8)
    else:
        core = optax.trace(decay=opt.momentum, nesterov=False)
    decay = [optax.add_decayed_weights(opt.weight_decay, mask=mask)] if opt.weight_decay else []
    return optax.chain(*clip, core, *decay)


_STEP_CACHE: dict = {}
_EXEC_CACHE: dict = {}  # (jitted step, batch shape) -> compiled executable


def _train_step(module, opt: OptimConfig, num_classes: int, params: dict):
    """(tx, jitted step) for this model and optimiser settings (the LR is a step argument), cached."""
    key = (module, opt.optimizer, opt.b1, opt.b2, opt.momentum, opt.weight_decay, opt.clip_norm,
           opt.label_smoothing, num_classes)
    if key in _STEP_CACHE:
        return _STEP_CACHE[key]
    tx = make_tx(opt, _decay_mask(params))
    smoothing = opt.label_smoothing

    def loss_fn(p, x, y):
        logits = module.apply({"params": p}, x, train=True)
        targets = jax.nn.one_hot(y, num_classes)
        if smoothing:
            targets = optax.smooth_labels(targets, smoothing)  # y (1 - a) + a / K, as torch's label_smoothing
        return optax.softmax_cross_entropy(logits, targets).mean()

    @jax.jit
    def step(p, opt_state, x, y, lr):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, opt_state = tx.update(grads, opt_state, p)
        updates = jax.tree_util.tree_map(lambda u: -lr * u, updates)
        return optax.apply_updates(p, updates), opt_state, loss

    _STEP_CACHE[key] = (tx, step)
    return tx, step


class JaxEngine(TransferEngine):
    name = "jax"

    def __init__(self) -> None:
        self.device = None

    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        try:
            from vitbench.backends.jax import JaxBackend
        except ImportError:  # backend module absent: plain default device
            self.device = jax.devices()[0]
            return {"backend": "jax", "device": str(self.device), "threads": None}
        be = JaxBackend()
        info = be.setup(device, threads)
        self.device = be.device
        return info

    def _put(self, x):
        return jax.device_put(x, self.device) if self.device is not None else jnp.asarray(x)

    def init_model(self, spec: ModelSpec, resolution: int, num_classes: int, seed: int) -> FlaxModel:
        module = build_flax_model(spec, resolution, num_classes)
        return FlaxModel(module, self._put(init_params(module, resolution, seed)), spec)

    def weights(self, model: FlaxModel) -> dict[str, np.ndarray]:
        host = jax.tree_util.tree_map(np.array, jax.device_get(model.params))  # writable copies for torch
        state = flax_to_torch(host, model.spec)
        return {k: v.numpy().copy() for k, v in state.items()}

    def load_weights(self, model: FlaxModel, weights: dict[str, np.ndarray]) -> FlaxModel:
        model.params = self._put(torch_to_flax(weights, model.spec))
        return model

    def train(self, model: FlaxModel, data: ImageSet, resolution: int, opt: OptimConfig, batch_size: int,
              seed: int) -> tuple[FlaxModel, list[float]]:
        tx, step = _train_step(model.module, opt, data.num_classes, model.params)
        params, opt_state = model.params, tx.init(model.params)
        order = batch_indices(len(data), batch_size, opt.steps, seed)
        lrs = lr_table(opt).astype(np.float32)
        x0, y0 = data.batch(order[0], resolution)
        args = (params, opt_state, self._put(x0), self._put(y0.astype(np.int32)), lrs[0])
        ckey = (step, x0.shape)
        if ckey not in _EXEC_CACHE:  # ahead-of-time compile, timed apart from the training steps
            t0 = time.perf_counter()
            _EXEC_CACHE[ckey] = step.lower(*args).compile()
            self.compile_s += time.perf_counter() - t0
        run = _EXEC_CACHE[ckey]
        losses = []
        for s in range(opt.steps):
            x, y = data.batch(order[s], resolution)
            params, opt_state, loss = run(params, opt_state, self._put(x), self._put(y.astype(np.int32)), lrs[s])
            losses.append(loss)
        model.params = params
        return model, [float(v) for v in jax.device_get(losses)]

    def _apply(self, model: FlaxModel, x: np.ndarray, pre_logits: bool) -> np.ndarray:
        fn = _compiled(model.module, pre_logits)
        return np.asarray(jax.device_get(fn(model.params, self._put(x))), np.float32)

    def features(self, model: FlaxModel, x: np.ndarray) -> np.ndarray:
        return self._apply(model, x, True)

    def logits(self, model: FlaxModel, x: np.ndarray) -> np.ndarray:
        return self._apply(model, x, False)


_JIT_CACHE: dict = {}


def _compiled(module, pre_logits: bool):
    key = (module, pre_logits)  # linen modules are frozen dataclasses: hashable by their fields
    if key not in _JIT_CACHE:
        _JIT_CACHE[key] = jax.jit(lambda p, x: module.apply({"params": p}, x, pre_logits=pre_logits))
    return _JIT_CACHE[key]
