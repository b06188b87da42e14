"""An ok row whose timed samples measured nothing (no step, a negative or zero step time, text where a time goes)
is refused by every reader alike, naming the line: compare, report and history append (compare alone refused
some, and decided on the rest from the row's img_per_s)."""

from __future__ import annotations

import json

import pytest

from test_compare import bench_record


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("rows")
    out = {}
    for name, steps in (("good", None), ("no_steps", []), ("negative", [-0.001] * 5), ("zero", [0.0, 0.01]),
                        ("text", [0.01, "fast"])):
        (d / name).mkdir()
        rows = []
        for rep in range(2):
            rec = bench_record(repeat=rep).to_dict()
            if steps is not None:
                rec["raw"]["step_s"] = steps
            rows.append(json.dumps(rec))
        (d / name / "results.jsonl").write_text("\n".join(rows) + "\n")
        out[name] = d / name
    return out


@pytest.mark.parametrize("bad", ["no_steps", "negative", "zero", "text"])
@pytest.mark.parametrize("command", ["compare", "report", "history"])
def test_a_row_of_no_or_negative_samples_is_refused_by_every_reader(cli, stores, tmp_path, bad, command):
    argv = {"compare": ["compare", stores["good"], stores[bad]],
            "report": ["report", stores[bad], "--out", tmp_path / "r", "--no-plots"],
            "history": ["history", "append", stores[bad], "--db", tmp_path / "h.sqlite", "--commit", "abc"]}[command]
    r = cli(*argv)
    assert r.exit_code == 2, r.output[-2000:]
    assert "results.jsonl:1" in r.output and "raw.step_s" in r.output and len(r.output) < 2000
    assert not (tmp_path / "h.sqlite").exists() or command != "history"
