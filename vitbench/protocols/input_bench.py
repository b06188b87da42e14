"""Training throughput with real input, beside the synthetic-input figure of `vitbench bench --task train`.

The synthetic benchmark times the model alone (timm's benchmark.py convention); a real training run also waits
for its batches to be decoded and preprocessed. This runs the transfer training loop (the backend's `train`, the
same loop `vitbench pretrain` uses: Adam, one host batch per step) on a real dataset for a few steps and reports
end-to-end images/s, the input pipeline's own images/s and the share of the loop spent waiting on input
(vitbench.transfer.loader.InputStats), so a user sees when the loader, not the model, is the limit.
"""

from __future__ import annotations

import time

from vitbench.transfer.data import Splits


def real_input_training(model: str, backend: str, splits: Splits, resolution: int, batch_size: int,
                        steps: int, *, device: str = "cpu", threads: int | None = None, seed: int = 0) -> dict:
    """{real_input_img_per_s, input_img_per_s, input_bound_fraction, real_input_steps, real_input_source}:
    `steps` training steps of `model` (random init) on `splits.train` (vitbench.transfer.data.load_splits: listed
    before any timing, so bad data exits first). The first step (and a backend's compile time) is left out of
    the timed steps."""
    from vitbench.backends.base import transfer_backend
    from vitbench.models.specs import get_spec
    from vitbench.transfer.schedules import OptimConfig

    spec = get_spec(model)
    be = transfer_backend(backend)
    be.setup(device, threads)
    net = be.init_model(spec, resolution, splits.num_classes, seed)
    warm = OptimConfig(steps=1, warmup_steps=0)
    net, _ = be.train(net, splits.train, resolution, warm, batch_size, seed)  # first step: build, compile
    before, c0 = splits.train.input.snapshot(), be.compile_s
    t0 = time.perf_counter()
    net, losses = be.train(net, splits.train, resolution, OptimConfig(steps=steps, warmup_steps=0), batch_size,
                           seed + 1)
    wall = time.perf_counter() - t0 - (be.compile_s - c0)  # compile time never inside a throughput
    got = splits.train.input.metrics(before, wall)
    return {"real_input_img_per_s": got["input_images"] / wall if wall > 0 else None,
            "input_img_per_s": got["input_img_per_s"], "input_bound_fraction": got["input_bound_fraction"],
            "real_input_steps": len(losses), "real_input_source": splits.source}
