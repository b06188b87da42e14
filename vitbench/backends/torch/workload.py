"""The PyTorch backend's measured steps: a model's forward or training step (TorchWorkload) and the peak
probe's matmul (Matmul), each with its device sync; built by TorchBackend.prepare / matmul_workload."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vitbench.backends.base import MatmulWorkload, Workload
from vitbench.backends.torch.numerics import autocast
from vitbench.backends.torch.training import make_optimizer, update
from vitbench.transfer.schedules import OptimConfig


class TorchWorkload(Workload):
    def __init__(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, mode: str, precision: str,
                 opt: OptimConfig | None, device: torch.device, settings: dict, has_attention: bool,
                 cuda_graphs: bool = False):
        self.model, self.x, self.y, self.mode, self.precision = model, x, y, mode, precision
        self.device, self.opt, self.settings, self.has_attention = device, opt, settings, has_attention
        self.cuda_graphs = cuda_graphs  # torch.compile's CUDA-graph modes: outputs live until the next replay
        self.batch_size = x.shape[0]
        if mode == "train":
            self.optim, self.decay, self.params = make_optimizer(opt, model)
        # fp16 training needs loss scaling; bf16 has fp32's range and does not.
        self.scaler = torch.amp.GradScaler(device.type) if (mode == "train" and precision == "fp16") else None

    def step(self):
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()  # a new iteration: earlier outputs may be overwritten
        if self.mode == "infer":
            with torch.inference_mode(), autocast(self.device, self.precision):
                return self.model(self.x)
        with autocast(self.device, self.precision):
            loss = F.cross_entropy(self.model(self.x), self.y)
        self.optim.zero_grad(set_to_none=True)
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        update(self.optim, self.params, self.decay, self.opt, self.opt.lr, self.scaler)
        return loss

    def sync(self, out) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def sync_window(self, outs) -> None:
        self.sync(None)  # one stream, in order: the device is done with all of them

    def state_bytes(self) -> int | None:
        """Bytes of this process's step state: input, parameters, buffers, gradients, optimizer state. A sharded
        tensor (FSDP2's DTensor parameters, their gradients and optimizer state) counts its local shard, the part
        this rank holds: a DTensor is a wrapper without a storage of its own (`untyped_storage()` raises)."""
        from vitbench.backends.torch.distributed import local_tensor

        tensors = [self.x, self.y, *self.model.parameters(), *self.model.buffers()]
        tensors += [p.grad for p in self.model.parameters() if p.grad is not None]
        if self.mode == "train":
            tensors += [v for st in self.optim.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
        seen, total = set(), 0
        for t in map(local_tensor, tensors):
            key = (t.untyped_storage().data_ptr(), t.device)
            if key not in seen:  # tied or viewed tensors share a storage: count it once
                seen.add(key)
                total += t.untyped_storage().nbytes()
        return total

    def infer_host(self, images):
        """The forward on host images (NHWC float32 numpy): laid out as the workload's own input (NCHW, its
        memory format), outputs back on the host as float32 numpy."""
        if self.mode != "infer":
            raise NotImplementedError("a training workload answers no queries")
        x = torch.from_numpy(images).permute(0, 3, 1, 2)  # NHWC -> NCHW view
        fmt = torch.channels_last if self.x.stride(1) == 1 else torch.contiguous_format  # C stride 1: NHWC
        x = x.to(self.device).contiguous(memory_format=fmt)
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.inference_mode(), autocast(self.device, self.precision):
            out = self.model(x)
        return out.float().cpu().numpy()  # .cpu() waits for the device

    def weights_host(self) -> dict:
        from vitbench.backends.torch.distributed import host_weights

        return host_weights(self.model)

    def close(self) -> None:
        self.model = self.x = self.y = self.optim = self.params = self.decay = None


class Matmul(MatmulWorkload):
    """a @ b on the device, in the precision's dtype (fp32/tf32 by the matmul flags)."""

    def __init__(self, a: torch.Tensor, b: torch.Tensor, settings: dict):
        self.a, self.b, self.settings = a, b, settings

    def step(self):
        return self.a @ self.b

    def sync(self, out) -> None:
        if self.a.is_cuda:
            torch.cuda.synchronize(self.a.device)

    def sync_window(self, outs) -> None:
        self.sync(None)

    def result_host(self, out):
        return out.detach().float().cpu().numpy()

    def close(self) -> None:
        self.a = self.b = None
