"""The torch backend over several local devices: one process per device (a rank), DDP or FSDP2.

A rank is started by the trial (vitbench.measure.ranks) with torchrun's environment (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so `init` joins the group with `init_method="env://"`: gloo on CPU, NCCL on
CUDA (rank r on cuda:r). A step of global batch B on N ranks: every rank draws the same global batch from the
seed and keeps its slice of B/N images; the loss is the mean over the slice, and DDP (or FSDP2's reduce-scatter)
averages gradients over ranks, so the update is the one-device update at batch B (equal slices). Gradient
clipping sees the all-reduced gradients (DDP) or the global norm of the sharded ones (FSDP2's DTensor norm).

- dp: `torch.nn.parallel.DistributedDataParallel` (parameters replicated, gradients all-reduced in buckets
  during backward).
- fsdp: FSDP2 `torch.distributed.fsdp.fully_shard` on every block (each element of a ModuleList / Sequential
  that holds parameters, innermost first) and on the root: parameters, gradients and optimizer state sharded,
  gathered per block for its forward and backward. FSDP2 takes contiguous parameters only: with channels_last
  the conv kernels stay in the default layout (the inputs are still channels_last).
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

from vitbench.backends.kinds import Parallelism
from vitbench.backends.parallel import placement
from vitbench.errors import BackendUnavailable, ConfigError

# A rank stuck in a collective (its peer died) gives up after this long; the group's launcher kills it sooner.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=300)


def collective_backend(device_type: str) -> str:
    """The collective library of a device type: NCCL for CUDA, gloo for CPU (torch.distributed's docs)."""
    return "nccl" if device_type == "cuda" else "gloo"


def init(device: torch.device, devices: int) -> torch.device:
    """Join the group this process is a rank of; return the rank's device (cuda:LOCAL_RANK on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "0"))
    if world != devices or "RANK" not in os.environ:
        raise ConfigError(f"devices={devices} on the torch backend runs as {devices} rank processes that the trial "
                          f"launches (vitbench bench / sweep do); this process is not one of them "
                          f"(WORLD_SIZE={os.environ.get('WORLD_SIZE')!r})")
    local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    if device.type == "cuda":
        if torch.cuda.device_count() < devices:
            raise BackendUnavailable(f"devices={devices} but {torch.cuda.device_count()} CUDA device(s) here")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        kw = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(collective_backend(device.type), init_method="env://", timeout=COLLECTIVE_TIMEOUT,
                                **kw)
        atexit.register(close)
    return device


def barrier(device: torch.device) -> None:
    """Every rank of the group here (a no-op outside one); on CUDA on this rank's device, as NCCL asks."""
    if dist.is_initialized():
        dist.barrier(**({"device_ids": [device.index]} if device.type == "cuda" else {}))


def rank_and_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def local_slice(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's equal share of a global batch (rank r: images [r B/N, (r+1) B/N)), copied: a view would keep
    the whole global batch alive in this rank's memory (and in its state_mib)."""
    r, n = rank_and_world()
    per = x.shape[0] // n
    return x[r * per:(r + 1) * per].clone(), y[r * per:(r + 1) * per].clone()


def wrap(model: torch.nn.Module, parallelism: str, device: torch.device) -> torch.nn.Module:
    """`model` spread over the group: DDP (dp) or FSDP2 (fsdp); a mode registered from outside vitbench: its torch
    placement, `(model, device) -> model` (vitbench.backends.parallel)."""
    if parallelism not in Parallelism.values():
        return placement(parallelism, "torch")(model, device)
    if Parallelism(parallelism) is Parallelism.FSDP:
        from torch.distributed.fsdp import fully_shard

        # FSDP2 shards contiguous parameters only (torch's _fsdp_param raises NotImplementedError otherwise): a
        # channels_last model's conv kernels go back to the default layout (its inputs stay channels_last)
        with torch.no_grad():
            for p in model.parameters():
                if not p.is_contiguous():
                    p.data = p.data.contiguous()
        from torch.distributed.device_mesh import init_device_mesh

        # the mesh of the rank's own device type: fully_shard's default mesh is the machine's accelerator's
        # (torch._C._get_accelerator(), _fsdp_init._init_default_mesh), so a cpu group on a CUDA host had its
        # parameters moved to cuda:0 in every rank
        mesh = init_device_mesh(device.type, (rank_and_world()[1],))
        blocks = [c for m in model.modules() if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential))
                  for c in m if any(True for _ in c.parameters())]
        for block in reversed(blocks):  # modules() is pre-order: reversed, inner blocks are sharded first
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of `t` this rank holds: a DTensor's local shard (FSDP2), any other tensor itself. No DTensor
    exists before its module is imported, so a one-device step imports nothing here (its memory is measured)."""
    dtensor = sys.modules.get("torch.distributed.tensor")
    return t.to_local() if dtensor is not None and isinstance(t, dtensor.DTensor) else t


def host_weights(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """Every parameter, whole (sharded ones gathered), float32 numpy, by the unwrapped model's names."""
    from torch.nn.parallel import DistributedDataParallel

    inner = model.module if isinstance(model, DistributedDataParallel) else model
    out = {}
    for name, p in inner.named_parameters():
        t = p.detach()
        if hasattr(t, "full_tensor"):  # a DTensor shard (FSDP2): gather the whole parameter
            t = t.full_tensor()
        out[name] = t.float().cpu().numpy().copy()
    return out


def close() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
