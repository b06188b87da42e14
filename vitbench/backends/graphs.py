"""Exported graphs of a runtime backend (a model exported from its eager definition and run by an inference
runtime), kept between runs in vitbench's compile-cache directory; framework-free (the backend passes the export).

Where: <cache>/compile/<the backend's subdirectory>/<hash of the key>/, one directory per graph (the runtime's
files, whatever they are, and `key.json`), under vitbench.paths.compile_cache_dir, so `vitbench cache` lists it
and `vitbench cache --prune` removes it when unused (vitbench.caches); $VITBENCH_COMPILE_CACHE off: exported
afresh into a temporary directory that lives as long as the process.

The key is vitbench.value_cache.key's (the model family's source, framework versions, compiler environment as the
process had it before its first export, host) with the backend's request, and of vitbench's own source only the
code that makes a graph (GRAPH_SOURCE: the models and the backends, with the package's top-level modules), so that
a commit touching the report or the CLI does not export every graph again. The request is the backend's: model
spec, seed (the weights: the eager model is built from it), resolution, classes, dynamic axes, opset, precision and
whatever else the export reads. A directory is written under a temporary name and renamed into place whole, so a reader sees a whole graph or none; a directory whose
`key.json` does not hold exactly the key is exported again (never trusted by its name alone). Nothing here is
unpickled: a graph is read by its runtime's own parser.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from vitbench.paths import compile_cache_dir, file_digest, mark_used, open_compile_cache
from vitbench.value_cache import compiler_env
from vitbench.value_cache import key as value_key
from vitbench.value_cache import source_hash_of

KEY_FILE = "key.json"
# vitbench's subpackages whose code makes a graph: the eager model (its spec, weights and layers) and each backend's
# export; with vitbench's top-level modules (precision, seeds, ...) always in (value_cache.source_hash_of)
GRAPH_SOURCE = ("models", "backends")


@dataclass(frozen=True)
class Graph:
    """An exported graph: its directory, its key's hash (the graph's identity in rows), whether it came from the
    cache, and the seconds its export took (when it was exported: this trial's, or the cached one's)."""

    path: Path
    key_hash: str
    cached: bool
    export_s: float
    exported_at: str

    def row(self) -> dict:
        """What a row records about the graph."""
        return {"graph": self.key_hash, "graph_cached": self.cached, "graph_export_s": self.export_s,
                "graph_exported_at": self.exported_at}


class GraphCache:
    """A backend's exported graphs, with the hit/miss counts of this process (Backend.compile_cache_counts)."""

    def __init__(self, subdir: str) -> None:
        self.subdir = subdir
        self.hits = self.misses = 0
        self._scratch: tempfile.TemporaryDirectory | None = None
        # the compiler environment as the process had it before any export: torch's exporter sets
        # TORCHINDUCTOR_CACHE_DIR itself, which would give the same graph another key after the first export
        self._env = compiler_env()

    def root(self) -> Path | None:
        """The cache's directory, opened (None: the compile caches are off)."""
        path = compile_cache_dir(self.subdir)
        return open_compile_cache(path) if path is not None else None

    def get(self, request: dict, frameworks: Iterable[str], modules: Iterable[str],
            export: Callable[[Path], None]) -> Graph:
        """The graph of `request`: read from the cache when a directory holds exactly its key, else `export(dir)`
        writes the runtime's files into an empty directory, timed, and the directory is kept."""
        k = {**value_key("graph", request, frameworks, modules=modules), "compiler_env": self._env,
             "source": source_hash_of(GRAPH_SOURCE)}
        digest = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:32]
        root = self.root()
        if root is None:
            if self._scratch is None:
                self._scratch = tempfile.TemporaryDirectory(prefix="vitbench-graphs-")
            root = Path(self._scratch.name)
        final = root / digest
        hit = _read(final, k)
        if hit is not None:
            self.hits += 1
            mark_used(final)
            return Graph(final, digest, True, hit["export_s"], hit["at"])
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{digest}.", suffix=".tmp"))
        try:
            t0 = time.perf_counter()
            export(tmp)
            export_s = time.perf_counter() - t0
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            (tmp / KEY_FILE).write_text(json.dumps({"key": k, "export_s": export_s, "at": at,
                                                    "files": _hashes(tmp)}, sort_keys=True))
            if final.exists():  # another process exported it meanwhile (or a stale one): replaced by ours
                shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.misses += 1
        return Graph(final, digest, False, export_s, at)

    def counts(self) -> tuple[int, int]:
        return self.hits, self.misses


def _read(path: Path, k: dict) -> dict | None:
    """The entry's record when `path` holds a graph of exactly key `k`; None otherwise."""
    try:
        d = json.loads((path / KEY_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("key") != k or not isinstance(d.get("export_s"), (int, float)):
        return None
    if not d.get("files") or d.get("files") != _hashes(path):  # a graph file replaced or damaged since: re-export
        return None
    return {"export_s": float(d["export_s"]), "at": str(d.get("at"))}


def _hashes(path: Path) -> dict[str, str]:
    """SHA-256 of every file an export wrote into `path` (its key file apart), by relative name: the entry is used
    only while they all still hold what was written (a foreign or damaged graph under the right key was measured
    as the model, and set the device's peak). Links are not followed: a link is not what was written."""
    out = {}
    for f in sorted(path.rglob("*")):
        if f == path / KEY_FILE or (f.is_dir() and not f.is_symlink()):
            continue
        got = None if f.is_symlink() else file_digest(f)
        out[str(f.relative_to(path))] = got[1] if got else "not a plain file"
    return out
