"""FLOPs of one image: an analytic count per family, cross-checked by the backend's counters.

Units: 1 MAC = 2 FLOPs; every field names which (gmacs_*, gflops_*). Pre-training compute follows the paper's
accounting: forward + backward for every image seen, backward ~ 2x forward, so 3 x forward FLOPs per image.
"""

from __future__ import annotations

from vitbench.backends.base import Backend, default_backend, get_backend
from vitbench.env import environment
from vitbench.models.analytic import analytic_counts, pretrain_exaflops
from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec, get_spec
from vitbench.record import Record, now

KIND = "flops"

ANALYTIC_EXCLUDES = ("norms (LayerNorm, GroupNorm, weight standardisation), softmax, activations, residual adds, "
                     "pooling, biases")


def flops(model: str | ModelSpec, resolution: int | None = None, backend: str | Backend | None = None,
          num_classes: int | None = None, images: int | None = None, epochs: float | None = None,
          count: bool = True) -> Record:
    """Record of kind 'flops': params, analytic GMACs/GFLOPs and each counter's, with relative differences."""
    started = now()
    spec = get_spec(model)
    res = spec.resolution if resolution is None else resolution
    k = spec.num_classes if num_classes is None else num_classes
    spec.check_resolution(res)
    a = analytic_counts(spec, res, k)
    metrics: dict = {
        "params_m": a.params / 1e6,
        "gmacs": a.gmacs,
        "gflops": a.gflops,
        # sequence length incl. the prefix tokens (class, distillation); None: no token sequence (a CNN)
        "tokens": family_plugin(spec.family).attention_of(spec).tokens(spec, res),
    }
    counters: dict = {}
    be = backend if isinstance(backend, Backend) else get_backend(backend or default_backend())
    info = {"backend": be.name}
    if count:
        from vitbench.measure.throughput import from_cache

        info = be.setup("cpu")
        before = be.compile_cache_counts()
        counters = be.count_flops(spec, res, k)
        metrics["compile_cached"] = from_cache(before, be.compile_cache_counts())  # XLA's count compiles
        for name, c in counters.items():
            metrics[f"gmacs_{name}"] = c["macs"] / 1e9
            metrics[f"gflops_{name}"] = 2 * c["macs"] / 1e9
            metrics[f"rel_diff_{name}"] = c["macs"] / a.macs - 1
    if images is not None or epochs is not None:
        metrics["pretrain_images"] = images
        metrics["pretrain_epochs"] = epochs
        metrics["pretrain_exaflops"] = pretrain_exaflops(spec, images or 0, epochs or 1.0, res, k)
    config = {"backend": be.name, "model": spec.name, "family": spec.family, "resolution": res, "num_classes": k}
    plugin = family_plugin(spec.family)  # a family without a formula says how its counts are made
    note = plugin.counts_note or ANALYTIC_EXCLUDES
    excludes = {"analytic": note, **{n: c["excludes"] for n, c in counters.items()}}
    return Record.measured(KIND, config, metrics=metrics, raw={"excludes": excludes}, env=environment(info),
                           started_at=started)
