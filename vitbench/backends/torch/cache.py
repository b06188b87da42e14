"""torch.compile's persistent caches under vitbench's cache directory, and how many compiles they answered.

Where: TORCHINDUCTOR_CACHE_DIR = <cache>/compile/torch-<torch>-<host> (vitbench.paths.compile_cache_dir), set in
`setup` before anything is compiled: inductor reads it whenever it needs its cache directory
(torch/_inductor/runtime/cache_dir_utils.py), and keeps there its FX graph cache (generated kernels per graph),
the AOT autograd cache and, on CUDA, Triton's kernels. Both caches are on by default in torch 2.15
(torch/_inductor/config.py `fx_graph_cache`, torch/_functorch/config.py `enable_autograd_cache`); with
$VITBENCH_COMPILE_CACHE off vitbench turns them off (TORCHINDUCTOR_FX_GRAPH_CACHE=0,
TORCHINDUCTOR_AUTOGRAD_CACHE=0).
Dynamo's tracing is not cached by torch: a warm torch.compile still traces the model in every process.

What keeps a wrong graph out: inductor's key hashes the FX graph with its input shapes, dtypes and strides (so
autocast's precision and channels_last), torch's version, inductor's config, the device and its properties and,
on CUDA, Triton's version (torch/_inductor/codecache.py, FxGraphHashDetails). vitbench adds the directory's name:
torch's version and this host's CPU model and architecture (C++ kernels are built for the host's instruction set).

Counting: torch._dynamo's counters, inductor's 'fxgraph_cache_hit' / 'fxgraph_cache_miss' and AOT autograd's
'autograd_cache_hit'; read only when torch._dynamo is loaded (an eager step compiles nothing).
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from pathlib import Path

from vitbench.env import cpu_model, distribution_version
from vitbench.paths import compile_cache_dir, open_compile_cache

_OFF = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}


def subdir() -> str:
    host = hashlib.sha256(f"{cpu_model()}|{platform.machine()}".encode()).hexdigest()[:8]
    return f"torch-{distribution_version('torch')}-{host}"


def enable() -> Path | None:
    """Point inductor's caches at vitbench's directory (None: the compile caches are off, so are inductor's)."""
    path = compile_cache_dir(subdir())
    if path is None:
        os.environ.update(_OFF)
        if "torch._inductor.config" in sys.modules:  # already read its environment
            sys.modules["torch._inductor.config"].fx_graph_cache = False
        if "torch._functorch.config" in sys.modules:
            sys.modules["torch._functorch.config"].enable_autograd_cache = False
        return None
    open_compile_cache(path)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    return path


def counts() -> tuple[int, int]:
    """(graphs read from the caches, graphs compiled by inductor) in this process so far."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return 0, 0
    c = dynamo.counters
    return c["inductor"]["fxgraph_cache_hit"] + c["aot_autograd"]["autograd_cache_hit"], \
        c["inductor"]["fxgraph_cache_miss"]
