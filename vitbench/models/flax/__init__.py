"""Flax (linen) models built from the same ModelSpec rows as the PyTorch (timm) ones.

Why linen and not nnx: the original ViT/BiT checkpoints are nested dicts of arrays named by linen (pre-linen)
module paths; a linen model's `params` tree *is* that dict, so an original .npz loads by unflattening its keys,
with no object graph in between, and `jax.jit` takes the params as a plain pytree argument.

Images are NHWC float arrays (PyTorch's are NCHW); outputs are float32 logits, or the pre-logits representation
with ``model.apply(..., pre_logits=True)``; a distilled DeiT's two heads apart with
``model.apply(..., separate_heads=True)`` (vitbench.models.families.vit.flax_model). `dtype` is the compute dtype (bf16 for mixed
precision); parameters are always created in float32, as PyTorch autocast keeps them.
"""

from __future__ import annotations

import functools
import os

from vitbench.forkservers import env_default

# Before JAX creates a GPU client: allocate on demand instead of grabbing 75 % of the device up front, so that
# peaks and the largest batch are the model's (read by the backend, vitbench.backends.jax.client, and by code that
# uses the models without it, e.g. transfer engines). Defaults: a value the user set wins. Kept in forked trials
# (env_default): without the first a trial of the GPU check held 75 % of an H200 (docs/gpu.md).
# The second: XLA's BFC allocator caps itself at total memory x this fraction whether or not it preallocates
# (openxla's CreateBFCAllocator: "will use up to ..."; jaxlib's default 0.75), so JAX's largest batch would stop at
# 75 % of the device where torch's caching allocator may use all of it. 0.95 leaves room for what XLA allocates
# outside that pool (the CUDA context, cuBLAS/cuDNN workspaces). jaxlib refuses both spellings set at once
# (xla_client.generate_pjrt_gpu_plugin_options), so a user's deprecated XLA_PYTHON_CLIENT_MEM_FRACTION wins too.
PREALLOCATE_ENV, FRACTION_ENV, FRACTION_ENV_DEPRECATED = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_CLIENT_MEM_FRACTION",
                                                           "XLA_PYTHON_CLIENT_MEM_FRACTION")
GPU_MEMORY_ENV = {PREALLOCATE_ENV: "false", FRACTION_ENV: "0.95"}
for _name, _value in GPU_MEMORY_ENV.items():
    env_default(_name, _value, unless=(FRACTION_ENV_DEPRECATED,) if _name == FRACTION_ENV else ())


def gpu_memory_settings() -> dict[str, str | None]:
    """The GPU allocator's settings in force, for a row: preallocation and the pool's fraction of the device."""
    return {"xla_preallocate": os.environ.get(PREALLOCATE_ENV),
            "xla_mem_fraction": os.environ.get(FRACTION_ENV, os.environ.get(FRACTION_ENV_DEPRECATED))}

from typing import Any  # noqa: E402

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from vitbench.models.arch import arch_value  # noqa: E402
from vitbench.models.families import family_plugin  # noqa: E402
from vitbench.models.specs import ModelSpec, get_spec  # noqa: E402

__all__ = ["build_flax_model", "init_params"]


def build_flax_model(spec: ModelSpec | str, resolution: int | None = None, num_classes: int | None = None,
                     *, dtype: Any = jnp.float32, representation_size: int | None = None) -> nn.Module:
    """The Flax twin of `build_torch_model(spec, resolution, num_classes)` (no parameters yet: `init_params`).

    `resolution` is only validated here (the position-embedding length follows the input at init).
    """
    spec = get_spec(spec)
    resolution = spec.resolution if resolution is None else resolution
    num_classes = spec.num_classes if num_classes is None else num_classes
    spec.check_resolution(resolution)
    plugin = family_plugin(spec.family)  # each family builds its own (vitbench.models.families)
    if representation_size is None:
        return plugin.build_flax(spec, num_classes, dtype)
    distilled = arch_value(spec, "distilled")
    if not plugin.build.representation_size or distilled:
        raise ValueError(f"representation_size (pre_logits) does not apply to a {spec.family} model"
                         f"{' with a distillation token' if distilled else ''}")
    return plugin.build_flax(spec, num_classes, dtype, representation_size=representation_size)


def init_params(model: nn.Module, resolution: int, seed: int = 0) -> dict:
    """Random float32 parameters for `model` at `resolution` (jit-compiled init: fast even for ViT-B; compiled
    once per model and resolution in a process, see `_jitted_init`)."""
    x = jnp.zeros((1, resolution, resolution, 3), jnp.float32)
    variables = _jitted_init(model)(jax.random.PRNGKey(seed), x)
    return dict(variables["params"])


def _jitted_init(model: nn.Module):
    """`jax.jit(model.init)`, shared by equal models: linen modules compare and hash by their fields, so the same
    model built again (another seed, the transfer start of each run of a learning-rate grid) reuses the jitted
    function and its compiled executable instead of tracing and compiling its init again (~2.5 s for a tiny ViT
    on a CPU, each time). A module that cannot be hashed (a field that is not) is jitted afresh: lru_cache raises
    TypeError before calling."""
    try:
        return _shared_init(model)
    except TypeError:
        return jax.jit(model.init)


@functools.lru_cache(maxsize=16)
def _shared_init(model: nn.Module):
    return jax.jit(model.init)
