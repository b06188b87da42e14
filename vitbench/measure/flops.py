"""FLOPs of one image: an analytic count per family, cross-checked by the backend's counters.

Units: 1 MAC = 2 FLOPs; every field names which (gmacs_*, gflops_*). Pre-training compute follows the paper's
accounting: forward + backward for every image seen, backward ~ 2x forward, so 3 x forward FLOPs per image.
"""

from __future__ import annotations


from vitbench.backends.base import Backend, default_backend, get_backend
from vitbench.env import environment
from vitbench.models.analytic import FLOPS_PER_MAC, analytic_counts, pretrain_exaflops
from vitbench.models.families import family_modules, family_plugin
from vitbench.models.specs import ModelSpec, get_spec
from vitbench.record import Record, finite_number, now
from vitbench.value_cache import remembered

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
        counted = counts(be, spec, res, k, info)
        counters = counted.value
        # XLA's count compiles; None when the counts came from the value cache (nothing compiled)
        metrics["compile_cached"] = from_cache(before, be.compile_cache_counts())
        metrics["counted_cached"], metrics["counted_at"] = counted.cached, counted.at
        for name, c in counters.items():
            metrics[f"gmacs_{name}"] = c["macs"] / 1e9
            metrics[f"gflops_{name}"] = FLOPS_PER_MAC * c["macs"] / 1e9
            metrics[f"rel_diff_{name}"] = c["macs"] / a.macs - 1
    if images is not None or epochs is not None:
        metrics["pretrain_images"] = images
        metrics["pretrain_epochs"] = epochs
        metrics["pretrain_exaflops"] = pretrain_exaflops(spec, images or 0, epochs or 1.0, res, k)
    config = {"backend": be.name, "model": spec.name, "family": spec.family, "resolution": res, "num_classes": k}
    plugin = family_plugin(spec.family)  # a family without a formula says how its counts are made
    note = plugin.computation.counts_note or ANALYTIC_EXCLUDES
    excludes = {"analytic": note, **{n: c["excludes"] for n, c in counters.items()}}
    return Record.measured(KIND, config, metrics=metrics, raw={"excludes": excludes}, env=environment(info),
                           started_at=started)


def counts(be: Backend, spec: ModelSpec, resolution: int, num_classes: int, info: dict):
    """The backend's counters (`Backend.count_flops`), from the value cache (vitbench.value_cache) when they were
    counted before with the same code (the family's plug-in's included), framework and counter versions,
    compiler settings, host, device and request; a Remembered (value, cached, at)."""
    request = {"backend": be.name, "spec": spec.flat(), "resolution": resolution,
               "num_classes": num_classes, "device": info.get("device"), "device_name": info.get("device_name")}
    return remembered("flops", request, (*be.spec.distributions, *be.spec.counter_distributions),
                      lambda: be.count_flops(spec, resolution, num_classes), decode=_counters, code=(type(be),),
                      modules=family_modules(spec.family))


def _counters(value) -> dict[str, dict]:
    """count_flops' answer, checked (a cached copy is read back through here): {counter: {"macs": finite >= 0,
    "excludes": str, ...}}."""
    if not isinstance(value, dict):
        raise TypeError("FLOP counts: not a mapping")
    for c in value.values():
        macs = c["macs"]
        if not finite_number(macs) or macs < 0:
            raise ValueError(f"FLOP counts: macs {macs!r}")
        if not isinstance(c["excludes"], str):
            raise TypeError("FLOP counts: excludes")
    return value
