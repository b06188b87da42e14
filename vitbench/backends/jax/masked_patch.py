"""Masked patch prediction on JAX/Flax (ViT paper Sec. 4.6; the shared parts, corruption and targets, in
vitbench.transfer.masked_patch; the same maths as vitbench/backends/torch/masked_patch.py).

The corruption goes in by intercepting the model's `embedding` conv (a ViT's patch conv, a hybrid's 1x1
projection of the ResNet features): its output tokens are replaced by the [mask] embedding or another patch's
embedding before the class token and position embeddings are added; the encoder's output tokens (after the
final LayerNorm, the `Transformer` module's output) are read by intercepting that module. So every ViT/hybrid
vitbench.models.flax builds (overrides included) trains without a model of its own. The corruption and targets
are step arguments: one compiled step serves every batch.
"""

from __future__ import annotations

import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from vitbench.backends.base import TRANSFER_PRECISION
from vitbench.backends.jax.numerics import traced_at
from vitbench.backends.jax.training import FlaxModel, apply_update, make_tx
from vitbench.transfer import masked_patch as mpt
from vitbench.transfer.schedules import OptimConfig, lr_table


def to_params(init: dict[str, np.ndarray]) -> dict:
    """The objective's parameters as a Flax-style tree (Dense kernel (D, out): decayed as every kernel)."""
    return {"mask_token": jnp.asarray(init[mpt.MASK_KEY]),
            "head": {"kernel": jnp.asarray(init[mpt.HEAD_W].T), "bias": jnp.asarray(init[mpt.HEAD_B])}}


def from_params(p: dict) -> dict[str, np.ndarray]:
    host = jax.tree_util.tree_map(lambda v: np.array(v, np.float32), jax.device_get(p))
    return {mpt.MASK_KEY: host["mask_token"], mpt.HEAD_W: np.ascontiguousarray(host["head"]["kernel"].T),
            mpt.HEAD_B: host["head"]["bias"]}


def loss(outputs, targets, target: mpt.Target):
    """Mean over the corrupted positions (as the torch backend's `loss`)."""
    if target is mpt.Target.PIXELS_L2:
        return jnp.mean((outputs - targets) ** 2)
    logits = outputs.reshape(-1, mpt.CLASSES)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets.reshape(-1)).mean()


def predict(module, enc_params, obj, x, source, use_mask, positions, prefix: int):
    """The head's outputs (B, M, out) at the corrupted positions of corrupted images `x` (NHWC)."""
    captured = {}

    def intercept(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if context.method_name != "__call__":
            return out
        if context.module.name == "embedding" and isinstance(context.module, nn.Conv):
            b, h, w, d = out.shape
            taken = out.reshape(b * h * w, d)[source.reshape(-1)].reshape(b, h * w, d)
            m = use_mask[..., None]
            out = (m * obj["mask_token"] + (1 - m) * taken).reshape(b, h, w, d)
        elif context.module.name == "Transformer":
            captured["tokens"] = out
        return out

    with nn.intercept_methods(intercept):
        module.apply({"params": enc_params}, x, train=True)
    tokens = captured["tokens"][:, prefix:]
    picked = jnp.take_along_axis(tokens, positions[..., None], axis=1)
    return picked @ obj["head"]["kernel"] + obj["head"]["bias"]


def train(backend, model: FlaxModel, batches, opt: OptimConfig, mp: mpt.MaskedPatch, init: dict,
          prefix: int) -> tuple[FlaxModel, dict, list[float]]:
    """`opt.steps` masked-patch updates over `batches`; returns (model, the objective's final parameters, loss
    per step); compile time is added to `backend.compile_s`."""
    params = {"encoder": model.params, "objective": backend.put(to_params(init))}
    tx = make_tx(opt, params)
    opt_state = tx.init(params)
    module, target = model.module, mp.target

    def loss_fn(p, x, source, use_mask, positions, y):
        out = predict(module, p["encoder"], p["objective"], x, source, use_mask, positions, prefix)
        return loss(out, y, target)

    @jax.jit
    @traced_at(TRANSFER_PRECISION)
    def step(p, state, x, source, use_mask, positions, y, lr):
        value, grads = jax.value_and_grad(loss_fn)(p, x, source, use_mask, positions, y)
        p, state = apply_update(tx, grads, state, p, lr)
        return p, state, value

    lrs = lr_table(opt).astype(np.float32)
    run, losses = None, []
    for s, b in enumerate(batches):
        c = b.corruption
        args = tuple(backend.put(a) for a in (b.images, c.source, c.use_mask, c.positions, b.targets))
        if run is None:  # ahead-of-time compile, timed apart from the training steps
            t0 = time.perf_counter()
            run = step.lower(params, opt_state, *args, lrs[s]).compile()
            backend.compile_s += time.perf_counter() - t0
        params, opt_state, value = run(params, opt_state, *args, lrs[s])
        losses.append(value)
    model.params = params["encoder"]
    return model, from_params(params["objective"]), [float(v) for v in jax.device_get(losses)]
