"""A vitbench plug-in written outside the package: a NumPy backend and a `tokens` task (see docs/plugins.md).

Use it without installing anything:

    PYTHONPATH=examples/plugin VITBENCH_PLUGINS=vitbench_toy vitbench plugins
    PYTHONPATH=examples/plugin VITBENCH_PLUGINS=vitbench_toy vitbench sweep examples/plugin/toy.yaml

or install a package that declares the module as an entry point (pyproject.toml):

    [project.entry-points."vitbench.plugins"]
    toy = "vitbench_toy"

The backend runs a ViT forward in NumPy (patch embedding, pre-LN blocks of softmax attention and a GELU MLP,
class-token head), so the built-in `infer` task, the calibration and the report work on it unchanged; it can only
do what it declares (infer, memory, matmul_peak), so a study asking it to train fails when the study is parsed.
The task reports a model's sequence length and analytic cost at a resolution: a task that needs no backend.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from vitbench.backends.base import Backend, BackendSpec, Capability, Step, Workload, register_backend
from vitbench.errors import ConfigError
from vitbench.record import Record, now
from vitbench.report.parts import ReportPart, register_report
from vitbench.tasks import Metric, Task, register_task
from vitbench.tasks.fields import params_model

# ---------------------------------------------------------------------------------------------------------
# The backend: a descriptor (no heavy import) and the class that implements it
# ---------------------------------------------------------------------------------------------------------


def _check(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Parse-time checks: CPU only, ViT family only."""
    from vitbench.models.specs import get_spec

    out = []
    if fields.get("device", "cpu") != "cpu":
        out.append(("device", "backend 'numpy' runs on cpu only"))
    if "model" in fields and get_spec(fields["model"]).family != "vit":
        out.append(("model", "backend 'numpy' runs ViTs only (family vit)"))
    return out


SPEC = register_backend(BackendSpec(
    name="numpy",
    implementation="vitbench_toy:NumpyBackend",
    requires=("numpy",),
    capabilities=frozenset({Capability.INFER, Capability.MEMORY, Capability.MATMUL_PEAK}),
    precisions=("fp32",),
    devices="cpu",
    distributions=("numpy",),
    check=_check,
    description="toy: a ViT forward in NumPy (docs/plugins.md)",
))


def _layer_norm(x: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps)


def _gelu(x: np.ndarray) -> np.ndarray:  # tanh approximation (Hendrycks & Gimpel 2016)
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))


class _Forward(Workload):
    def __init__(self, spec, x: np.ndarray, num_classes: int, rng: np.random.Generator):
        d, m, p = spec.arch.width, spec.arch.mlp_dim, spec.arch.patch

        def w(*shape):
            return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

        self.spec, self.x, self.batch_size = spec, x, x.shape[0]
        self.embed, self.cls = w(p * p * 3, d), np.zeros((1, 1, d), np.float32)
        self.pos = (0.02 * rng.standard_normal((1, spec.tokens(x.shape[1]) + 1, d))).astype(np.float32)
        self.blocks = [(w(d, 3 * d), w(d, d), w(d, m), w(m, d)) for _ in range(spec.arch.depth)]
        self.head = w(d, num_classes)

    def step(self) -> np.ndarray:
        arch, x = self.spec.arch, self.x  # the family's part: spec.arch.patch (docs/plugins.md)
        b, r, _, c = x.shape
        g = r // arch.patch
        patches = x.reshape(b, g, arch.patch, g, arch.patch, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, g * g, -1)
        h = np.concatenate([np.broadcast_to(self.cls, (b, 1, arch.width)), patches @ self.embed], 1) + self.pos
        hd = arch.width // arch.heads
        for qkv, proj, fc1, fc2 in self.blocks:
            q, k, v = np.split(_layer_norm(h, arch.ln_eps) @ qkv, 3, axis=-1)
            q, k, v = (t.reshape(b, -1, arch.heads, hd).transpose(0, 2, 1, 3) for t in (q, k, v))
            a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            h = h + (a @ v).transpose(0, 2, 1, 3).reshape(b, -1, arch.width) @ proj
            h = h + _gelu(_layer_norm(h, arch.ln_eps) @ fc1) @ fc2
        return _layer_norm(h, arch.ln_eps)[:, 0] @ self.head

    def sync(self, out) -> None:  # NumPy is synchronous
        pass


class NumpyBackend(Backend):
    spec = SPEC

    def __init__(self) -> None:
        from vitbench.procmem import PeakRSS

        self._rss = PeakRSS()

    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        if device != "cpu":
            raise ConfigError(f"unknown device {device!r}; allowed: {self.spec.devices}")
        return {"backend": self.name, "device": device, "device_name": "cpu", "threads": threads,
                **self.versions()}

    def prepare(self, step: Step) -> Workload:
        spec = step.spec  # the trial's model, resolved once: no need to parse step.model
        if spec.family != "vit" or step.mode != "infer":
            raise ConfigError("backend 'numpy' runs ViT inference only")
        res = step.resolution or spec.resolution
        rng = np.random.default_rng(step.seed)
        x = rng.standard_normal((step.batch_size, res, res, 3)).astype(np.float32)
        return _Forward(spec, x, step.num_classes or spec.num_classes, rng)

    def reset_peak_memory(self) -> None:
        self._rss.reset()

    def peak_memory_mib(self) -> float:
        return self._rss.growth_mib()

    def process_peak_mib(self) -> float:
        return self._rss.peak_mib()

    def cleanup(self) -> None:
        pass

    def matmul_flops_per_s(self, precision: str = "fp32", n: int = 2048, seconds: float = 1.0) -> float:
        a, b = np.ones((n, n), np.float32), np.ones((n, n), np.float32)
        times, t_end = [], time.perf_counter() + seconds
        while len(times) < 3 or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        return 2 * n**3 / sorted(times)[len(times) // 2]  # 2 FLOPs per MAC, median


# ---------------------------------------------------------------------------------------------------------
# The task
# ---------------------------------------------------------------------------------------------------------
class Counting(BaseModel):
    include_class_token: bool = Field(True, description="count the class token in the sequence")


@register_task
class Tokens(Task):
    name = "tokens"
    kind = "tokens"
    Params = params_model("TokensParams", ("model", "task", "resolution"), Counting)
    description = "toy: sequence length and analytic forward GFLOPs of a model at a resolution"
    metrics = (Metric("tokens", "tokens", False, "sequence length"),
               Metric("gflops", "GFLOPs", False, "analytic forward FLOPs per image (1 MAC = 2 FLOPs)"))
    headline = "tokens"
    repeat = False

    def run(self, p) -> Record:
        from vitbench.models.analytic import analytic_counts

        started = now()
        spec = p.spec  # the model, parsed once when the params were validated
        tokens = spec.tokens(p.resolution) + (1 if p.include_class_token else 0)
        gflops = analytic_counts(spec, p.resolution).gflops
        return Record.measured(self.kind, p.config(), metrics={"tokens": tokens, "gflops": gflops},
                               started_at=started)


def _tokens_table(ok):
    """The report's section for this task's records: one row per model and resolution."""
    cols = [c for c in ("model", "family", "resolution", "tokens", "gflops") if c in ok.columns]
    return ok[cols].drop_duplicates().reset_index(drop=True)


register_report(ReportPart("tokens", "Sequence length and cost (toy plug-in)", ("tokens",), _tokens_table))
