"""Does the heap offset a trial starts from move its step time? (docs/measurement.md, "What the fork server holds
moves a step by a few percent".)

Each trial is a forked child, as under the fork servers: it allocates `pad` bytes (held for its life) before it
builds the model, then times inference steps (batch 16, one thread, fastest of 40 after 3 warm-up steps). The pads
run interleaved in rounds, in a shuffled order per round, so drift hits every pad alike. If where the heap starts
mattered, the pads' medians would differ by more than the rounds spread.

    python benchmarks/bench_layout.py --model R-Micro --rounds 12
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

import torch

from vitbench.models.specs import get_spec
from vitbench.models.torch import build_torch_model

# 0; a small object (pymalloc); past the 512-byte small-object limit; a page plus a cache line; and two below glibc's
# initial 128 KiB mmap threshold, so every pad shifts the brk heap that follows (glibc mallopt(3), M_MMAP_THRESHOLD)
PADS = (0, 48, 1024, 4096 + 64, 40_000, 100_000)


def _trial(model: str, pad: int, steps: int, out: int) -> None:
    keep = bytearray(pad) if pad else None  # noqa: F841 - held for the trial's life
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = get_spec(model)
    m = build_torch_model(spec).eval()
    x = torch.randn(16, 3, spec.resolution, spec.resolution)
    times = []
    with torch.inference_mode():
        for _ in range(3):
            m(x)
        for _ in range(steps):
            t = time.perf_counter()
            m(x)
            times.append(time.perf_counter() - t)
    os.write(out, json.dumps(min(times)).encode())


def fastest_step_ms(model: str, pad: int, steps: int) -> float:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            _trial(model, pad, steps, write)
        finally:
            os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 4096):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data) * 1e3


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="R-Micro")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    torch.set_num_threads(1)
    ms: dict[int, list[float]] = {p: [] for p in PADS}
    order, rng = list(PADS), random.Random(1)
    for _ in range(a.rounds):
        rng.shuffle(order)
        for pad in order:
            ms[pad].append(fastest_step_ms(a.model, pad, a.steps))
    spread = [max(v) - min(v) for v in zip(*ms.values())]  # within a round, across pads
    for pad, v in ms.items():
        print(f"pad {pad:7d} B: fastest step median {statistics.median(v):.3f} ms over {len(v)} rounds "
              f"(min {min(v):.3f}, max {max(v):.3f})")
    meds = [statistics.median(v) for v in ms.values()]
    print(f"medians across pads: {min(meds):.3f}-{max(meds):.3f} ms ({(max(meds) / min(meds) - 1) * 100:.1f} %); "
          f"median spread across pads within one round: {statistics.median(spread):.3f} ms")
