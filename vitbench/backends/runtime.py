"""What every inference-runtime backend shares: a graph exported from the eager model, cached (graphs.py), run by
the runtime on the host CPU; framework-free (each runtime's package holds its export and session: a subclass's
`export` and `load`). Registered like any backend: one package per runtime, a `BackendSpec` in its `__init__`.

Timing: a runtime's `run` returns when its outputs are on the host, so the host clock around a step is exact
(TimerKind.HOST_CLOCK, the base class's timers). Compile: the export (or the cache read) and the runtime's own
graph compilation happen in `prepare`, timed as the workload's `compile_s`, never inside a timed step; the row's
settings name the graph (`graph`: its key's hash) and its export time (`graph_export_s`).
Threads: intra-op = the trial's count; none asked for: torch's rule (vitbench.backends.torch.backend's setup): with
OMP_NUM_THREADS set, the count it sets ('default', torch's own reading of it: the runtimes read no such variable
themselves, so it is set on them), else the cores other processes leave free (vitbench.cpus.free_threads);
inter-op = INTEROP_THREADS; both set on the runtime and recorded.
Memory: the process's resident set (MemoryKind.HOST_RSS): in the steady phase the graph's constants (its weights:
what torch counts as parameters and buffers, not the size of the graph's files) and the input (`state_bytes`)
plus the growth of the peak during the steps; the eager model the export was built from is freed before.
"""

from __future__ import annotations

import gc
import time
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vitbench.backends.base import Backend, Step, Workload
from vitbench.backends.graphs import Graph, GraphCache
from vitbench.cpus import capped_threads, cpu_limit, unset_threads
from vitbench.errors import ConfigError, clip
from vitbench.models.families import family_modules
from vitbench.procmem import PeakRSS

# One inter-op thread: a ViT's graph is a chain (one operator at a time), and a second pool would only compete
# with the intra-op pool for the same cores (ONNX Runtime's sequential execution mode; OpenVINO's one stream).
INTEROP_THREADS = 1


class RuntimeWorkload(Workload):
    """One forward of the exported graph on one host input: `run()` returns the logits (host numpy);
    `run_on(x)` the same forward on another NCHW float32 input of the same shape; `weight_bytes`: the bytes of the
    graph's constants (its weights), as the runtime's package reads them from the graph."""

    def __init__(self, run: Callable[[], Any], x: np.ndarray, graph: Graph, settings: dict,
                 run_on: Callable[[np.ndarray], Any], close: Callable | None = None, *, weight_bytes: int):
        self._run, self._run_on, self.x, self.graph, self.settings = run, run_on, x, graph, settings
        self.batch_size = x.shape[0]
        self.weight_bytes = weight_bytes
        self._close = close

    def step(self) -> Any:
        return self._run()

    def sync(self, out: Any) -> None:  # the runtime returned with its outputs on the host
        pass

    def infer_host(self, images: Any) -> Any:
        """The forward on host images (NHWC float32, `batch_size` of them), laid out as the graph takes them
        (NCHW); the logits as float32 numpy, a copy the next step cannot overwrite."""
        x = np.ascontiguousarray(np.asarray(images, np.float32).transpose(0, 3, 1, 2))
        if x.shape != self.x.shape:
            raise ValueError(f"infer_host: images of shape {x.shape} (NCHW), the graph takes {self.x.shape}")
        return np.array(self._run_on(x), np.float32)

    def state_bytes(self) -> int | None:
        """The graph's constants (its weights) and the input, as torch counts a model's parameters and buffers and
        its input: the same quantity on every backend (not the graph's files, which add the exporter's metadata
        and the cache's key)."""
        return self.weight_bytes + self.x.nbytes

    def close(self) -> None:
        if self._close is not None:
            self._close()
        self._run = self._run_on = self._close = None


def export_refused(backend: str, model: str, how: str, e: BaseException) -> ConfigError:
    """torch.export's refusal of `model` (a forward that branches on its data, or calls what torch.export cannot
    trace: such a model has no one graph, and a trace of it runs another function than the model's) as one
    ConfigError line naming the backend and what to use instead: the refusal itself is two tracebacks, an FX
    graph and colour codes (19 KB), of which the first line of text is kept, clipped."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(e))
    first = clip(next((line.strip() for line in text.splitlines() if line.strip()), "no message"), 200)
    return ConfigError(f"backend {backend!r} cannot export {model} {how} ({type(e).__name__}: {first}): a model "
                       "whose forward branches on its data (or calls what torch.export cannot trace) has no one "
                       "graph; measure it with backend 'torch'")


def images(batch: int, resolution: int, seed: int) -> np.ndarray:
    """The step's input: seeded standard normal images, NCHW float32 (the layout the exported graph takes)."""
    return np.random.default_rng(seed).standard_normal((batch, 3, resolution, resolution), dtype=np.float32)


class RuntimeBackend(Backend):
    """An inference runtime over graphs exported from the eager model (see the module docstring)."""

    def __init__(self) -> None:
        self.device = "cpu"
        self.threads = 1
        self.interop_threads = INTEROP_THREADS
        self._rss = PeakRSS()
        self._state_mib = 0.0
        self.graphs = GraphCache(self.cache_subdir())

    # -- what a runtime's package provides -------------------------------------------------------------------
    @abstractmethod
    def cache_subdir(self) -> str:
        """Its graphs' directory under the compile caches (named by the versions that make them)."""

    @abstractmethod
    def graph_request(self, step: Step) -> dict:
        """What the graph of `step` depends on beyond the model (opset, precision, dynamic axes, ...)."""

    @abstractmethod
    def export(self, step: Step, directory: Path) -> None:
        """Write `step`'s graph (the eager model seeded with `step.seed`) into the empty `directory`."""

    @abstractmethod
    def load(self, graph: Graph, step: Step, x: np.ndarray) -> RuntimeWorkload:
        """The runtime's compiled graph for `step` on input `x`, its settings read back from the runtime."""

    def environment_threads(self) -> int:
        """The thread count OMP_NUM_THREADS sets, as torch reads it (every runtime here exports from the torch
        model: torch is in each one's `requires`); the runtimes themselves read no such variable."""
        import torch

        return torch.get_num_threads()

    # -- setup ---------------------------------------------------------------------------------------------
    def setup(self, device: str = "cpu", threads: int | None = None, devices: int = 1) -> dict:
        problems = self.spec.problems({"device": device, "devices": devices})
        if problems:
            raise ConfigError("; ".join(p for _, p in problems))
        # torch's rule for a count none asked for (module docstring; vitbench.cpus.unset_threads)
        threads, chosen = unset_threads(cpu_limit()) if threads is None else capped_threads(threads)
        self.threads = threads if threads is not None else self.environment_threads()
        root = self.graphs.root()
        return {"backend": self.name, "device": self.device, "device_name": self.device_info().name,
                "threads": self.threads, "interop_threads": self.interop_threads,
                "compile_cache": str(root) if root else None, **chosen, **self.versions()}

    def compile_cache_counts(self) -> tuple[int, int]:
        return self.graphs.counts()

    # -- steps -----------------------------------------------------------------------------------------------
    def prepare(self, step: Step) -> RuntimeWorkload:
        self._refuse(precision=step.precision, device=self.device, compile=step.compile,
                     compile_mode=step.compile_mode, devices=step.devices, mode=step.mode)
        if step.mode != "infer":
            raise ConfigError(f"backend {self.name!r} runs inference only (mode 'infer')")
        spec = step.spec
        res = spec.resolution if step.resolution is None else step.resolution
        k = step.num_classes or spec.num_classes
        request = {"spec": spec.flat(), "seed": step.seed, "resolution": res,
                   "num_classes": k, **self.graph_request(step)}
        t0 = time.perf_counter()
        graph = self.graphs.get(request, self.spec.distributions, family_modules(spec.family),
                                lambda d: self.export(step, d))
        gc.collect()  # the eager model the export built is gone before the runtime loads the graph
        work = self.load(graph, step, images(step.batch_size, res, step.seed))
        work.compile_s = time.perf_counter() - t0  # export or cache read + the runtime's compile: apart
        work.settings = {**work.settings, **graph.row(), "intra_op_threads": self.threads,
                         "inter_op_threads": self.interop_threads}
        return work

    # -- memory ----------------------------------------------------------------------------------------------
    def reset_peak_memory(self) -> None:
        gc.collect()
        self._state_mib = 0.0
        self._rss.reset()

    def restart_peak_memory(self, work: Workload | None = None) -> None:
        gc.collect()
        state = work.state_bytes() if work is not None else None
        self._state_mib = (state or 0) / 2**20
        self._rss.restart()

    def peak_memory_mib(self) -> float:
        return self._state_mib + self._rss.growth_mib()

    def process_peak_mib(self) -> float:
        return self._rss.peak_mib()

    def cleanup(self) -> None:
        gc.collect()
