"""The JAX backend over several local devices: one jitted step over a `jax.sharding.Mesh` (one process).

The mesh is the first N devices of the chosen platform on one axis, 'data'. The global batch is sharded over it
(each device holds B/N images); parameters are replicated (dp) or sharded (fsdp: each array on its largest axis
that N divides, replicated when none does); optimizer state follows its parameter (same shape, same rule). The
step is jitted with these shardings in and out, so XLA's SPMD partitioner inserts the collectives: an all-reduce
of the gradients (dp), all-gathers of the parameters and a reduce-scatter of the gradients (fsdp). The loss is the
mean over the global batch, so the update is the one-device update at batch B.

On CPU, N host devices exist only when XLA_FLAGS has --xla_force_host_platform_device_count=N before JAX starts
(client.py sets it from `devices`); they share the host's cores and memory (docs/devices.md).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vitbench.backends.kinds import Parallelism
from vitbench.backends.parallel import placement

AXIS = "data"
# What XLA's collectives run on, per platform: in-process copies on a CPU, NCCL between NVIDIA GPUs (XLA's GPU
# collectives), the inter-chip interconnect on TPU.
COLLECTIVES = {"cpu": "xla:cpu", "gpu": "xla:nccl", "tpu": "xla:ici"}


def make_mesh(platform: str, devices: int) -> Mesh:
    """A 1-D mesh over the first `devices` devices of `platform`."""
    from vitbench.errors import BackendUnavailable

    present = jax.devices(platform)
    if len(present) < devices:
        raise BackendUnavailable(f"devices={devices} but JAX sees {len(present)} {platform} device(s)")
    return Mesh(np.array(present[:devices]), (AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """The leading (batch) axis split over the mesh."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def param_sharding(mesh: Mesh, shape: tuple[int, ...], parallelism: str) -> NamedSharding:
    """dp: replicated; fsdp: split on the largest axis the mesh size divides (ties: the first), else replicated;
    a mode registered from outside vitbench: its JAX placement, `(mesh, shape) -> NamedSharding`
    (vitbench.backends.parallel)."""
    if parallelism not in Parallelism.values():
        return placement(parallelism, "jax")(mesh, shape)
    n = mesh.devices.size
    if Parallelism(parallelism) is not Parallelism.FSDP:
        return replicated(mesh)
    axes = [i for i, d in enumerate(shape) if d % n == 0 and d >= n]
    if not axes:
        return replicated(mesh)
    i = max(axes, key=lambda a: (shape[a], -a))
    spec = [None] * len(shape)
    spec[i] = AXIS
    return NamedSharding(mesh, PartitionSpec(*spec))


def shardings_of(tree, mesh: Mesh, parallelism: str):
    """The sharding of every array leaf of a parameter (or optimizer state) tree."""
    return jax.tree_util.tree_map(lambda leaf: param_sharding(mesh, tuple(np.shape(leaf)), parallelism), tree)


def place(tree, shardings):
    """`tree` on the mesh with `shardings` (a tree of the same structure)."""
    return jax.tree_util.tree_map(jax.device_put, tree, shardings)


class Group:
    """A step's mesh and shardings on `devices` devices: what JaxBackend.lower places its arguments with."""

    def __init__(self, devices: int, parallelism: str, platform: str):
        self.parallelism = parallelism
        self.mesh = make_mesh(platform, devices)
        self.batch, self.replicated = batch_sharding(self.mesh), replicated(self.mesh)

    def put_batch(self, a):
        return jax.device_put(a, self.batch)

    def shardings(self, tree):
        return shardings_of(tree, self.mesh, self.parallelism)

    def put_params(self, tree):
        return place(tree, self.shardings(tree))
