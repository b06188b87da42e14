"""Harness overhead: `vitbench bench` (vitbench.measure.throughput.bench) vs a bare loop over the same timm model.

The bare loop is what a careful person would write by hand: the same model and input, `torch.inference_mode()`,
a few warm-up steps, then N steps timed as one block. Rounds alternate bare / harness (A B A B) so machine drift
hits both equally; the result is the ratio of the median img/s over rounds. Target: harness within 2 %.

    python benchmarks/bench_overhead.py --model ViT-B/16 --batch-size 8 --threads 2 --rounds 5 --steps 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from vitbench.backends.base import Step, StopRule
from vitbench.measure.throughput import bench
from vitbench.models.specs import get_spec
from vitbench.models.torch import build_torch_model


def bare_loop(model: torch.nn.Module, x: torch.Tensor, steps: int, warmup: int = 3) -> float:
    with torch.inference_mode():
        for _ in range(warmup):
            model(x)
        t0 = time.perf_counter()
        for _ in range(steps):
            model(x)
        return x.shape[0] * steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B/16")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--resolution", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = get_spec(a.model)
    res = a.resolution or spec.resolution
    model = build_torch_model(spec, res).eval()
    x = torch.randn(a.batch_size, 3, res, res)
    step = Step(spec.name, batch_size=a.batch_size, resolution=res)
    bare, harness = [], []
    for r in range(a.rounds):
        bare.append(bare_loop(model, x, a.steps))
        rec = bench(step, threads=a.threads, warmup_steps=3,
                    stop=StopRule(min_steps=a.steps, min_seconds=0.0, max_seconds=600), with_mfu=False)
        harness.append(rec.metrics["img_per_s"])
        print(f"round {r}: bare {bare[-1]:.2f} img/s   harness {harness[-1]:.2f} img/s", flush=True)
    b, h = statistics.median(bare), statistics.median(harness)
    print(f"{spec.name} infer fp32 batch {a.batch_size} @ {res}px, {a.threads} threads, torch {torch.__version__}")
    print(f"median bare {b:.2f} img/s, harness {h:.2f} img/s, harness/bare = {h / b:.4f} ({100 * (h / b - 1):+.2f} %)")


if __name__ == "__main__":
    main()
