"""Every model row's numbers, in one JSON-ready dict: what "the family plug-ins changed nothing" is tested against.

For every row of the model table (and a sample of overrides on every family): the spec as a dict, the derived
stride, tokens and feature size, the accepted override keys, the one-line description, analytic parameters and
MACs (native resolution and twice native), the timm <-> Flax conversion table (timm key -> Flax paths; of a
full-size row its length and SHA-256); for tiny rows also the built torch state dict's and the Flax params' names
and shapes. The flops task's `tokens` field. Plus the trial keys of a
typical study (TRIAL_STUDY).

The golden file keeps `compact(collect())`: the numbers themselves (parameters, MACs, tokens, feature size, prefix
tokens, the description, the overrides) as they are, and each of the large tables (DIGESTED: the spec, override
keys, conversion table, torch and Flax names and shapes) as the first 16 hex digits of the SHA-256 of its
canonical JSON. A change to any entry of a table changes its digest (a chance collision: 2**-64), so the check is
as exact as comparing the tables; the failing line names the row and the table, and `--full` dumps every table
of two trees to diff them.

    python tests/model_numbers.py OUT.json          # the golden file's form, with PYTHONPATH set to the tree
    python tests/model_numbers.py --full OUT.json   # every table in full (to see which entry changed)

tests/data/model_numbers_69ed29a.json was written by this script from main at 69ed29a (before the vit, bit and
hybrid families became plug-ins), in full; its tables were later replaced by their digests (`compact`, the same
values: 322 -> 40 KB); tests/test_model_numbers.py compares today's tree against it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

# A sample of overrides on every family (the kinds the shipped studies and tests use).
OVERRIDES = (
    "ViT-B/16[depth=6]", "ViT-B/16[depth=6,posemb=none]", "ViT-B/16[rep_size=768]", "ViT-B/16[classifier=gap]",
    "ViT-B/16[posemb=relative]", "ViT-B/16[posemb=learned_2d,posemb_at=every_layer]", "ViT-B/32[patch=16]",
    "ViT-B/16[posemb=sincos2d,posemb_at=every_layer_shared]", "ViT-B/16[width=512,heads=8,mlp_dim=2048]",
    "DeiT-S/16-dist[depth=6]", "R50x1[blocks=3x4x6]", "R50x1[width_factor=2]", "R50+ViT-B/16[depth=6]",
    "R50+ViT-B/16[blocks=3x4,classifier=gap]", "R50+ViT-B/32[width_factor=2,posemb=learned_2d]",
    "ViT-Nano/4[posemb=none]", "ViT-Nano/4[classifier=gap]", "ViT-Nano/4[posemb=relative]", "ViT-Nano/4[depth=3]",
    "ViT-Nano/4[posemb=sincos2d]", "ViT-Nano/4[posemb=learned_2d]", "ViT-Nano/4[rep_size=16]",
    "ViT-Nano/4[posemb=learned_2d,posemb_at=every_layer]", "ViT-Nano/4[patch=2]",
    "ViT-Nano/4[classifier=gap,posemb=sincos2d,posemb_at=every_layer_shared]",
    "ViT-Nano/4[posemb_at=every_layer_shared]", "DeiT-Nano/4-dist[depth=3]", "R-Nano[blocks=2x1]",
    "R-Nano[width_factor=2]", "R-Nano+ViT-Micro/8[depth=3,posemb=relative]", "R-Nano+ViT-Micro/8[blocks=1x2]",
    "Axial-ViT-Nano/4[depth=3]", "Axial-ViT-B/16[width=512,heads=8]", "Axial-R-Nano[heads=4]",
    "Axial-ResNet-50[width_factor=2]",
)


def _shapes(named) -> dict[str, list[int]]:
    return {k: list(v) for k, v in named}


def _torch_shapes(spec) -> dict[str, list[int]]:
    from vitbench.models.torch import build_torch_model

    model = build_torch_model(spec, device="cpu")
    return _shapes((k, v.shape) for k, v in model.state_dict().items())


def _flax_shapes(spec) -> dict[str, list[int]]:
    import jax
    import jax.numpy as jnp

    from vitbench.models.flax import build_flax_model
    from vitbench.models.param_table import flatten

    model = build_flax_model(spec)
    x = jax.ShapeDtypeStruct((1, spec.resolution, spec.resolution, 3), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)["params"]
    return _shapes((k, v.shape) for k, v in flatten(dict(params)).items())


def _digest(value) -> dict:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return {"entries": len(value), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def spec_numbers(spec, build: bool) -> dict:
    from vitbench.models.analytic import analytic_counts
    from vitbench.models.param_table import param_table

    out = {"spec": spec.to_dict(), "describe": spec.describe(), "feature_dim": spec.feature_dim,
           "num_prefix_tokens": spec.num_prefix_tokens, "tokens": spec.tokens(spec.resolution),
           "override_keys": list(spec.override_keys), "overrides": {k: list(v) if isinstance(v, tuple) else v
                                                                     for k, v in spec.overrides.items()}}
    for r in (spec.resolution, 2 * spec.resolution):
        c = analytic_counts(spec, r)
        out[f"analytic@{r}"] = {"params": c.params, "macs": c.macs}
    from vitbench.measure.flops import flops

    out["flops_task_tokens"] = flops(spec.name, count=False).metrics["tokens"]
    table = {e.torch_key: list(e.flax_paths) for e in param_table(spec)}
    out["param_table"] = table if spec.tiny else _digest(table)  # a full row's: its size and digest
    if build:
        out["torch_state_dict"] = _torch_shapes(spec)
        out["flax_params"] = _flax_shapes(spec)
    return out


# Typical trials, written here so that a change to a shipped study does not change them: every family (the tiny
# rows and their overrides, family and tiny selectors), both backends, timing, FLOP and max-batch tasks.
TRIAL_STUDY = """
name: numbers
axes:
  model: [ViT-Nano/4, DeiT-Nano/4-dist, R-Nano, R-Nano+ViT-Micro/8, Axial-ViT-Nano/4, Axial-R-Nano,
          "ViT-Nano/4[posemb=relative]", "R-Nano[blocks=2x1]", "tiny:hybrid", "family:bit"]
  backend: [torch, jax]
  task: [infer, train, flops]
  resolution: [32]
include:
  - {task: max_batch, backend: torch, model: ViT-Nano/4, resolution: 32, start: 8}
  - {task: infer, backend: torch, model: ViT-Micro/4, depth: 3, posemb: none, resolution: 64}
"""


def trial_keys() -> dict:
    from vitbench.study import parse_study

    study = parse_study(TRIAL_STUDY, "numbers", check_paths=False)
    return {"numbers": [[t.key, t.config.get("model"), t.config.get("task"), t.config.get("backend")]
                        for t in study.trials]}


def collect(build: bool = True) -> dict:
    from vitbench.models.specs import all_specs, get_spec

    rows = all_specs()
    return {
        "rows": [s.name for s in rows],
        "models": {s.name: spec_numbers(s, build and s.tiny) for s in rows},
        "overrides": {n: spec_numbers(get_spec(n), build and get_spec(n).tiny) for n in OVERRIDES},
        "trial_keys": trial_keys(),
    }


# A row's tables kept as a digest in the golden file; the rest of its numbers are kept as they are.
DIGESTED = ("spec", "override_keys", "param_table", "torch_state_dict", "flax_params")


def _short_digest(value) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compact(numbers: dict) -> dict:
    """`numbers` (collect's, after a JSON round trip) with every row's DIGESTED tables replaced by their digest."""
    def row(r: dict) -> dict:
        return {k: _short_digest(v) if k in DIGESTED else v for k, v in r.items()}

    return {**numbers, "models": {n: row(r) for n, r in numbers["models"].items()},
            "overrides": {n: row(r) for n, r in numbers["overrides"].items()}}


def dumps(numbers: dict) -> str:
    """The golden file's text: one line per row, override and key set (diffs show which row changed)."""
    def block(key, value):
        if not isinstance(value, dict):
            return f" {json.dumps(key)}: {json.dumps(value, sort_keys=True, separators=(',', ':'))}"
        inner = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True, separators=(',', ':'))}"
                            for k, v in value.items())
        return f" {json.dumps(key)}: {{\n{inner}\n }}"

    return "{\n" + ",\n".join(block(k, v) for k, v in numbers.items()) + "\n}\n"


if __name__ == "__main__":
    full = sys.argv[1] == "--full"
    numbers = json.loads(json.dumps(collect()))  # the JSON round trip the golden file makes (tuples -> lists)
    Path(sys.argv[-1]).write_text(dumps(numbers if full else compact(numbers)))
