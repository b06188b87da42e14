"""The report reads stores written by older vitbench versions or other tools: an ok row lacking a column the
report's sections use (here a downstream row with no accuracy and no pre-training FLOPs, which vitbench wrote
before its ok-row guard, issue 50) is reported, not a traceback."""

from __future__ import annotations

import json

from records import record


def test_an_ok_row_missing_optional_columns_is_reported(tmp_path, cli):
    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "finetune", "resolution": 32, "dataset": "digits",
           "seed": 0}
    rec = record("finetune", dict(cfg), metrics={"accuracy": None, "accuracy_std": 0.0}, key="k1", study="s",
                 run_id="r", repeat=0, trial=cfg)
    (tmp_path / "results.jsonl").write_text(json.dumps(rec.to_dict()) + "\n")
    r = cli("report", str(tmp_path), "--out", str(tmp_path / "out"), "--no-plots")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "report.md").exists()
