"""The default transfer trials' keys and the configs `vitbench pretrain | fewshot | finetune` build with no options.

    python tests/transfer_keys.py OUT.json     # with PYTHONPATH set to the tree to dump

tests/data/transfer_keys_a509195.json was written by this script from main at a509195 (before the transfer
commands took their defaults from the config classes and before fewshot and finetune shared a base config);
tests/test_cli_defaults.py compares today's tree against it.
"""
from __future__ import annotations

import hashlib
import json
import sys

from typer.testing import CliRunner

MODEL = "ViT-Nano/4"
STUDY = ("name: defaults\naxes:\n  model: [%s]\n  task: [pretrain, fewshot, finetune]\n" % MODEL)


def _hash(d):
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def collect() -> dict:
    from vitbench.cli import app
    from vitbench.study import parse_study, trial_key
    import vitbench.protocols.fewshot as few
    import vitbench.protocols.finetune as fin
    import vitbench.protocols.pretrain as pre

    out = {"trials": {}, "commands": {}}
    for t in parse_study(STUDY, "defaults.yaml").trials:
        out["trials"][t.config["task"]] = {"key": trial_key(t.config), "config": t.config}
    seen = {}

    class Stop(Exception):
        """Raised by the stand-ins for the library calls: the command stops before training anything."""

    def grab(name):
        def f(cfg, *a, **k):
            seen[name] = cfg
            raise Stop
        return f
    saved = (pre.ensure_upstream, few.fewshot, fin.finetune)
    pre.ensure_upstream, few.fewshot, fin.finetune = grab("pretrain"), grab("fewshot"), grab("finetune")
    try:
        for argv in (["pretrain", MODEL], ["fewshot", "--model", MODEL], ["finetune", "--model", MODEL]):
            res = CliRunner().invoke(app, argv)
            assert isinstance(res.exception, Stop), res.output
            cfg = seen[argv[0]]
            d = cfg.model_dump(mode="json")
            out["commands"][argv[0]] = {"config": d, "hash": _hash(d)}
    finally:
        pre.ensure_upstream, few.fewshot, fin.finetune = saved
    out["commands"]["pretrain"]["cache"] = pre.cache_path(seen["pretrain"]).name
    return out


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump(collect(), f, indent=1, sort_keys=True)
