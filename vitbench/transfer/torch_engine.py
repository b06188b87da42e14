"""PyTorch transfer engine: timm models from vitbench.models.torch, AdamW / SGD-momentum, fp32.

Optimiser mapping (kept identical to the optax chain in jax_engine.py):
- adam: torch.optim.AdamW(betas=(b1, b2), eps=1e-8), decoupled weight decay lr * wd * p on kernels only
  (matrices/convs; biases, norms, class token and position embeddings are not decayed, as big_vision does).
- sgd:  torch.optim.SGD(momentum), buf = m * buf + g (no dampening, no Nesterov) == optax.sgd(momentum=m);
  weight decay, if any, is applied decoupled by hand.
- global-norm gradient clipping before the update; LR set per step from schedules.lr_table.
"""

from __future__ import annotations

import numpy as np
import torch

from vitbench.models.specs import ModelSpec
from vitbench.models.torch import build_torch_model, feature_forward
from vitbench.transfer.data import ImageSet, batch_indices
from vitbench.transfer.engine import TransferEngine
from vitbench.transfer.schedules import OptimConfig, lr_table

_NO_DECAY = ("pos_embed", "cls_token")


def decays(name: str, shape: tuple[int, ...]) -> bool:
    """Whether weight decay applies: kernels (ndim >= 2) except position embeddings / class token."""
    return len(shape) >= 2 and name.split(".")[-1] not in _NO_DECAY


class TorchEngine(TransferEngine):
    name = "torch"

    def __init__(self) -> None:
        self.device = torch.device("cpu")

    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        if device.startswith("cuda") and not torch.cuda.is_available():
            from vitbench.errors import BackendUnavailable

            raise BackendUnavailable(f"device {device!r} requested but torch sees no CUDA device")
        self.device = torch.device(device)
        if threads:
            torch.set_num_threads(threads)
        name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        return {"backend": "torch", "device": str(self.device), "device_name": name,
                "threads": torch.get_num_threads()}

    def init_model(self, spec: ModelSpec, resolution: int, num_classes: int, seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return build_torch_model(spec, resolution, num_classes, device=self.device)

    def weights(self, model: torch.nn.Module) -> dict[str, np.ndarray]:
        return {k: v.detach().float().cpu().numpy().copy() for k, v in model.state_dict().items()}

    def load_weights(self, model: torch.nn.Module, weights: dict[str, np.ndarray]) -> torch.nn.Module:
        state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in weights.items()}
        model.load_state_dict(state, strict=True)
        return model

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous().to(self.device)  # NHWC -> NCHW

    def train(self, model: torch.nn.Module, data: ImageSet, resolution: int, opt: OptimConfig,
              batch_size: int, seed: int) -> tuple[torch.nn.Module, list[float]]:
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        decay = [p for n, p in named if decays(n, tuple(p.shape))]
        rest = [p for n, p in named if not decays(n, tuple(p.shape))]
        groups = [{"params": decay}, {"params": rest}]
        lrs = lr_table(opt)
        if opt.optimizer == "adam":
            optim = torch.optim.AdamW(groups, lr=lrs[0], betas=(opt.b1, opt.b2), eps=1e-8, weight_decay=0.0)
        else:
            optim = torch.optim.SGD(groups, lr=lrs[0], momentum=opt.momentum, weight_decay=0.0)
        loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=opt.label_smoothing)
        order = batch_indices(len(data), batch_size, opt.steps, seed)
        params = [p for _, p in named]
        losses = []
        model.train()
        for step in range(opt.steps):
            x, y = data.batch(order[step], resolution)
            xt, yt = self._tensor(x), torch.from_numpy(y).to(self.device)
            loss = loss_fn(model(xt), yt)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            if opt.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, opt.clip_norm)
            lr = float(lrs[step])
            for g in optim.param_groups:
                g["lr"] = lr
            if opt.weight_decay:  # decoupled: p <- p - lr * wd * p, before the gradient step (as AdamW)
                with torch.no_grad():
                    torch._foreach_mul_(decay, 1.0 - lr * opt.weight_decay)
            optim.step()
            losses.append(loss.detach())
        model.eval()
        return model, [float(v) for v in torch.stack(losses).cpu()] if losses else []

    @torch.inference_mode()
    def features(self, model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
        model.eval()
        return feature_forward(model, self._tensor(x)).float().cpu().numpy()

    @torch.inference_mode()
    def logits(self, model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
        model.eval()
        return model(self._tensor(x)).float().cpu().numpy()
