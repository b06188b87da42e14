"""JAX harness overhead and torch vs JAX throughput, on the same architecture.

1. Harness overhead: `vitbench bench --backend jax` (vitbench.measure.throughput.bench) vs a bare jitted loop
   over the same Flax model, weights and input -- what a careful person writes by hand: `jax.jit(model.apply)`,
   a few warm-up calls, then N calls timed as one block with a single block_until_ready at the end (async
   dispatch may overlap the host work with the device's; the harness syncs every step to time it). Target:
   harness within 2 %.
2. torch vs JAX: `bench(..., backend="torch")` vs `bench(..., backend="jax")`, same settings.

Rounds alternate (bare, harness, torch, ...) so machine drift hits all equally; results are medians over rounds
and, paired, the median of the per-round ratios (more robust when the load changes between rounds). Run it on a
quiet machine; on a shared one the numbers are only indicative.

    python benchmarks/bench_jax_overhead.py --model ViT-B/16 --batch-size 8 --rounds 5 --steps 10
    python benchmarks/bench_jax_overhead.py --threads 2 --no-torch   # threads: fixes XLA's CPU pool size
"""

from __future__ import annotations

import argparse
import statistics
import time


def bare_loop(apply, params, x, steps: int, warmup: int = 3) -> float:
    import jax

    for _ in range(warmup):
        jax.block_until_ready(apply(params, x))
    t0 = time.perf_counter()
    out = None
    for _ in range(steps):
        out = apply(params, x)
    jax.block_until_ready(out)
    return x.shape[0] * steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B/16")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--resolution", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for both frameworks (default: theirs)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--torch", dest="torch", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure the torch backend (default: on)")
    a = ap.parse_args()

    from vitbench.backends.jax.backend import JaxBackend, random_params  # sets XLA env before jax starts

    info = JaxBackend().setup("cpu", a.threads)  # first: XLA's CPU pools are sized when JAX starts
    import jax
    import jax.numpy as jnp

    from vitbench.backends.base import Step, StopRule
    from vitbench.measure.throughput import bench
    from vitbench.models.flax import build_flax_model
    from vitbench.models.specs import get_spec

    spec = get_spec(a.model)
    res = a.resolution or spec.resolution
    step = Step(spec.name, batch_size=a.batch_size, resolution=res)
    model = build_flax_model(spec, res)
    params = jax.device_put(random_params(model, res, step.seed))
    x = jax.random.normal(jax.random.PRNGKey(0), (a.batch_size, res, res, 3), jnp.float32)
    apply = jax.jit(lambda p, xb: model.apply({"params": p}, xb))

    kw = dict(threads=a.threads, warmup_steps=3,
              stop=StopRule(min_steps=a.steps, min_seconds=0.0, max_seconds=3600), with_mfu=False)
    bare, harness, torch_ips = [], [], []
    for r in range(a.rounds):
        bare.append(bare_loop(apply, params, x, a.steps))
        harness.append(bench(step, backend="jax", **kw).metrics["img_per_s"])
        line = f"round {r}: jax bare {bare[-1]:.2f} img/s   jax harness {harness[-1]:.2f} img/s"
        if a.torch:
            torch_ips.append(bench(step, backend="torch", **kw).metrics["img_per_s"])
            line += f"   torch harness {torch_ips[-1]:.2f} img/s"
        print(line, flush=True)

    b, h = statistics.median(bare), statistics.median(harness)
    print(f"{spec.name} infer fp32 batch {a.batch_size} @ {res}px, CPU threads (jax) {info['threads']}, "
          f"jax {info['jax']}, flax {info['flax']}")
    paired = statistics.median(hh / bb for hh, bb in zip(harness, bare))
    print(f"jax: median bare {b:.2f} img/s, harness {h:.2f} img/s, harness/bare = {h / b:.4f} "
          f"({100 * (h / b - 1):+.2f} %); median of per-round ratios {paired:.4f} ({100 * (paired - 1):+.2f} %)")
    if a.torch:
        import torch

        t = statistics.median(torch_ips)
        paired_t = statistics.median(hh / tt for hh, tt in zip(harness, torch_ips))
        print(f"torch {torch.__version__} ({torch.get_num_threads()} threads): median {t:.2f} img/s; "
              f"jax/torch = {h / t:.3f} (median of per-round ratios {paired_t:.3f})")


if __name__ == "__main__":
    main()
