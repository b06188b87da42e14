"""The measurement record: one JSON-able dict per measurement or trial.

Shape (all keys always present; units are in metric names):
    schema, kind, status, config, metrics, raw, env, error, started_at, finished_at, method_version
- kind: 'bench' | 'max_batch' | 'flops' | 'pretrain' | 'fewshot' | 'finetune' | ...
- status: 'ok' | 'oom' | 'error' | 'timeout' | 'interrupted' | 'skipped'
- metrics: flat {name_with_unit: number|str|None}, e.g. img_per_s, step_ms_median, peak_mem_mib, gflops
- raw: lists kept for later statistics, e.g. {'step_s': [...], 'warmup_s': [...], 'probes': [...]}
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

SCHEMA = 1
# Bump when a change to how something is measured makes old numbers incomparable; it is part of a trial key.
METHOD_VERSION = 2  # 2: torch training steps clip gradients at global norm 1, like JAX
STATUSES = ("ok", "oom", "error", "timeout", "interrupted", "skipped")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> python, tuples -> lists."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 0) == 0:
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def make_record(kind: str, config: dict, *, metrics: dict | None = None, raw: dict | None = None,
                env: dict | None = None, status: str = "ok", error: dict | None = None,
                started_at: str | None = None) -> dict:
    assert status in STATUSES, status
    return _clean({
        "schema": SCHEMA,
        "kind": kind,
        "status": status,
        "config": config,
        "metrics": metrics or {},
        "raw": raw or {},
        "env": env or {},
        "error": error,
        "started_at": started_at or now(),
        "finished_at": now(),
        "method_version": METHOD_VERSION,
    })


def error_info(exc: BaseException, tail: str | None = None) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)[-2000:], "tail": tail}
