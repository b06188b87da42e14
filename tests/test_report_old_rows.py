"""The report reads stores written by older vitbench versions or other tools: an ok row lacking a column the
report's sections use (here a downstream row with no accuracy and no pre-training FLOPs, which vitbench wrote
before its ok-row guard, issue 50) is reported as the error row it is (vitbench.tasks.row_check), not a traceback
and never as ok; a number vitbench never writes stops the report naming its line."""

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
    assert "1 ok row(s) without their measure read as error rows" in r.output
    assert "first: " in r.output and "results.jsonl:1: an ok row without its accuracy" in r.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert "1 error" in md or "| error" in md, md[:2000]


def test_a_number_vitbench_never_writes_stops_report_and_compare(tmp_path, cli):
    """`img_per_s: -5` was a throughput of -5 in the report; "fast", a blank beside `ok`; compare preferred the
    raw steps and called the edited row 'no change'."""
    from test_compare import bench_record

    for bad in (-5.0, "fast", 0.0):  # 0 img/s: no work done, shown as an ok measurement of 0
        d = tmp_path / str(bad)
        d.mkdir()
        rec = bench_record("ViT-Nano/4")
        rec.metrics["img_per_s"] = bad
        (d / "results.jsonl").write_text(json.dumps(rec.to_dict()) + "\n")
        for argv in (("report", str(d), "--out", str(d / "out"), "--no-plots"), ("compare", str(d), str(d))):
            r = cli(*argv)
            assert r.exit_code == 2 and f"results.jsonl:1: img_per_s = {bad!r}" in r.output, (argv, r.output)
            assert "Traceback" not in r.output and not (d / "out").exists()
    d = tmp_path / "steps"  # a raw step vitbench never writes: refused where the row is read, by every reader
    d.mkdir()
    rec = bench_record("ViT-Nano/4")
    rec.raw["step_s"][0] = -0.001
    (d / "results.jsonl").write_text(json.dumps(rec.to_dict()) + "\n")
    r = cli("compare", str(d), str(d))
    assert r.exit_code == 2 and "results.jsonl:1: raw.step_s holds -0.001" in r.output, r.output


def test_an_edited_other_load_stops_the_read_not_the_verdict_s_floor(tmp_path, cli):
    """`other_load_cores` decides compare's busy floor, ab's busy pairs and the report's calibration line, but
    was no declared metric: `true` counted as a busy core and `-3` as a quiet host. It is declared now (cores,
    at least 0), so a row holding something vitbench never writes stops compare and the report, naming it."""
    from test_compare import bench_record

    for bad in (-3.0, True):
        d = tmp_path / str(bad)
        d.mkdir()
        rec = bench_record("ViT-Nano/4")
        rec.metrics["other_load_cores"] = bad
        (d / "results.jsonl").write_text(json.dumps(rec.to_dict()) + "\n")
        r = cli("compare", str(d), str(d))
        assert r.exit_code == 2 and f"results.jsonl:1: other_load_cores = {bad!r}" in r.output, r.output
