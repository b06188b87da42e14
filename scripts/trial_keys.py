"""Dump every shipped study's trial keys (and each transfer trial's upstream cache key) as JSON, to compare two
commits: a change meant to keep keys must leave this output byte-identical (issue 52, item 2).

    python scripts/trial_keys.py > /tmp/keys-after.json
    (cd /tmp/head && PYTHONPATH=. python scripts/trial_keys.py) > /tmp/keys-before.json   # a `git archive`
    cmp /tmp/keys-before.json /tmp/keys-after.json

Parses studies/*.yaml only (no trial runs; paths are not checked, so a study naming local data still lists its
trials). The upstream key is PretrainConfig.key() of a trial that pre-trains (no checkpoint given): the name of its
cache file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def upstream_key(config: dict) -> str | None:
    """The cache key of the upstream a transfer trial pre-trains (None: no upstream, or a checkpoint given)."""
    from vitbench.tasks import get_task

    task = get_task(config["task"])
    params = task.Params.model_validate(config)
    if not hasattr(params, "upstream_config") or getattr(params, "checkpoint", None):
        return None
    return params.upstream_config(task.name).key()


def main() -> int:
    from vitbench.study import load_study

    out = {}
    for path in sorted((REPO / "studies").glob("*.yaml")):
        study = load_study(path, check_paths=False)
        out[path.name] = [{"key": t.key, "repeat": t.repeat, "upstream_key": upstream_key(t.config),
                           "config": t.config} for t in study.trials]
    json.dump(out, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
