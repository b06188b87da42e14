"""The JAX backend's measured steps: a compiled forward or training step (JaxWorkload) and the peak probe's
matmul (Matmul), each synchronised by block_until_ready; built by JaxBackend.prepare / matmul_workload."""

from __future__ import annotations

import jax
import numpy as np

from vitbench.backends.base import MatmulWorkload, Workload


class JaxWorkload(Workload):
    """A compiled step and its device-resident arguments. `step()` returns without waiting (async dispatch)."""

    def __init__(self, executable, args: tuple, batch_size: int, mode: str, compile_s: float, lower_s: float,
                 settings: dict | None = None, has_attention: bool = False):
        self.executable, self.args, self.batch_size, self.mode = executable, args, batch_size, mode
        self.compile_s = compile_s  # lower (trace) + XLA compile, seconds
        self.lower_s = lower_s
        self.settings = settings or {}
        self.has_attention = has_attention
        self.temp_bytes = _temp_bytes(executable)  # XLA's planned scratch of one step (activations)

    def step(self):
        if self.mode == "infer":
            return self.executable(*self.args)
        state, loss = self.executable(*self.args)  # args = (state, x, y); state is donated
        self.args = (state, *self.args[1:])
        return state, loss

    def sync(self, out) -> None:
        jax.block_until_ready(out)

    def sync_window(self, outs) -> None:
        if self.mode == "train":
            # each step consumes the state the one before returned (donated, so those arrays are gone): the
            # last step's result is ready only once every step of the window has run
            jax.block_until_ready(outs[-1])
        else:
            jax.block_until_ready(outs)  # independent executions: wait for each

    def infer_host(self, images):
        """The compiled forward on host images (NHWC float32 numpy): put where the workload's own input lives, cast
        to its compute dtype; outputs back on the host as float32 numpy (device_get waits for them)."""
        if self.mode != "infer":
            raise NotImplementedError("a training workload answers no queries")
        params, x = self.args
        xb = jax.device_put(images, x.sharding)
        if xb.dtype != x.dtype:
            xb = xb.astype(x.dtype)
        return np.asarray(jax.device_get(self.executable(params, xb)), dtype=np.float32)

    def state_bytes(self) -> int | None:
        """Bytes of the step state one device holds: the shards on each device summed, the largest device's
        (on a mesh an array's `nbytes` is its global size: fsdp's sharded parameters counted N times what a
        device holds, where torch's ranks count their local shard). One device: every array's size."""
        per_device: dict = {}
        for leaf in jax.tree_util.tree_leaves(self.args):
            if isinstance(leaf, jax.Array) and not leaf.is_deleted():
                for shard in leaf.addressable_shards:
                    per_device[shard.device] = per_device.get(shard.device, 0) + int(shard.data.nbytes)
        return max(per_device.values(), default=0)

    def weights_host(self) -> dict:
        from vitbench.models.param_table import flatten

        params = self.args[0] if self.mode == "infer" else self.args[0][0]
        return {k: np.asarray(jax.device_get(v), dtype=np.float32) for k, v in flatten(dict(params)).items()}

    def close(self) -> None:
        for leaf in jax.tree_util.tree_leaves(self.args):
            if isinstance(leaf, jax.Array) and not leaf.is_deleted():
                leaf.delete()
        self.executable = None
        self.args = ()


def _temp_bytes(executable) -> int | None:
    try:
        return int(executable.memory_analysis().temp_size_in_bytes)
    except Exception:  # noqa: BLE001 - not every platform or executable reports it
        return None


class Matmul(MatmulWorkload):
    def __init__(self, mm, a, b, settings: dict):
        self.mm, self.a, self.b, self.settings = mm, a, b, settings

    def step(self):
        return self.mm(self.a, self.b)

    def sync(self, out) -> None:
        jax.block_until_ready(out)

    def sync_window(self, outs) -> None:
        jax.block_until_ready(outs)

    def result_host(self, out):
        return np.asarray(jax.device_get(out), dtype=np.float32)

    def close(self) -> None:
        self.mm = self.a = self.b = None
