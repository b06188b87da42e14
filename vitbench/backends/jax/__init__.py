"""The JAX/Flax backend: Flax linen models with vit_jax parameter names, jit compiled ahead of time.

This module only registers the backend (nothing of jax is imported); the implementation is
`vitbench.backends.jax.backend.JaxBackend` (client start-up in `client.py`, training in `training.py`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vitbench.backends.base import BackendSpec, Capability, DeviceKind, register_backend
from vitbench.backends.kinds import TF32_OFF_GPU, Parallelism

NAME = "jax"
_DEVICE = re.compile(r"^(cpu|gpu|cuda|rocm|tpu)(:\d+)?$")


def _check(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = []
    device = str(fields.get("device") or "cpu")
    if not _DEVICE.match(device):
        out.append(("device", f"backend {NAME!r} runs on cpu, gpu|cuda[:N] or tpu[:N]"))
    if fields.get("devices", 1) > 1 and ":" in device:
        out.append(("device", "with devices > 1, device names the kind (cpu, gpu or tpu): the mesh takes the "
                              "first N devices of that kind"))
    if fields.get("precision") == "tf32" and not device.startswith(("gpu", "cuda")):
        out.append(("precision", TF32_OFF_GPU))
    if fields.get("precision") == "fp16":
        if device.startswith("cpu"):
            out.append(("precision", "fp16 is not available on the jax backend's CPU device (XLA's CPU dot has "
                                     "no fp16 x fp16 -> fp32 form); use bf16, or fp16 on a GPU"))
        if fields.get("task") == "train" or fields.get("mode") == "train":
            out.append(("precision", "fp16 is inference-only on the jax backend (fp16 training needs loss "
                                     "scaling); use bf16 for mixed-precision training"))
    return out


SPEC = register_backend(BackendSpec(
    name=NAME,
    implementation="vitbench.backends.jax.backend:JaxBackend",
    requires=("jax", "flax", "optax"),
    capabilities=frozenset(Capability) - {Capability.COMPILE},  # always compiled (jit, ahead of time)
    precisions=("fp32", "tf32", "bf16", "fp16"),
    devices="cpu | gpu|cuda[:N] | tpu[:N]",
    device_names=((DeviceKind.CPU, "cpu"), (DeviceKind.GPU, "gpu:{index}"), (DeviceKind.TPU, "tpu:{index}")),
    # Imported by this backend's fork server: importing jax starts no client (its thread pools, host device
    # count and XLA_FLAGS are read when a trial's setup creates it: client.py), so each trial still sizes its own.
    preload=("jax", "flax", "optax", "vitbench.backends.jax.backend"),
    distributions=("jax", "jaxlib", "flax", "optax"),
    # XLA_FLAGS (xla/debug_options_flags.cc) and the Python client's XLA_PYTHON_CLIENT_* (jax/_src/xla_bridge.py);
    # every jax.config option's environment form, JAX_<OPTION> (jax/_src/config.py)
    compiler_env=("XLA_", "JAX_"),
    check=_check,
    # one jitted step over a jax.sharding.Mesh of the local devices (mesh.py)
    parallelisms=(Parallelism.DP, Parallelism.FSDP),
    install="pip install 'vitbench[jax]'",
    description="JAX + Flax linen: jit compiled ahead of time (compile_s apart), explicit matmul precision, "
                "block_until_ready, XLA FLOPs",
))
