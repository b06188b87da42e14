"""tidy.load at scale (issue 51): read a line at a time into columns (vitbench.frames), it gives the frame its
definition gives, `pd.DataFrame` of the flattened rows `select` keeps, on stores that exercise what the column
building must get right: rows superseded by later ones (a column seen only in a superseded row is no column),
ties, runs in subdirectories, columns a row lacks, int/float/bool/None mixes, list and dict values, bad lines."""

from __future__ import annotations

import contextlib
import itertools
import random
import warnings

import pandas as pd
import pytest
from records import record

from vitbench.store import Store, read_records
from vitbench.tasks import headline
from vitbench.tidy import _flatten, load, load_each, select

VALUES = [None, 1, 2, 1.5, True, False, "a", "b", [1, 2], {"x": 1}, 2**70]


def defined(path, kinds, latest) -> pd.DataFrame:
    """The definition of load(): the DataFrame of the rows select() keeps, integer columns with gaps as Int64."""
    rows = [_flatten(r) for r in select(read_records(path), kinds, latest)]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["key", "study", "run_id", "repeat", "kind", "status", "raw"])
    types: dict[str, set] = {}
    for row in rows:
        for k, v in row.items():
            if v is not None:
                types.setdefault(k, set()).add(type(v))
    for col, t in types.items():
        if t == {int} and any(row.get(col) is None for row in rows):
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                df[col] = df[col].astype("Int64")
    return df


HEADLINES = {k: headline(k).name for k in ("bench", "calibration")}  # the kinds' tasks' headlines


def store(tmp_path, seed: int):
    """Three directories of random rows: 40 keys re-run up to three times at random (or equal) finish times,
    calibration rows among them, each row with random extra config fields and metrics, a garbage line."""
    rng = random.Random(seed)
    trials: dict[str, dict] = {}  # a key is one trial's (its first config: rows.TrialKeys)
    for d, n in ((tmp_path, 60), (tmp_path / "round1", 20), (tmp_path / "round1" / "b", 10)):
        with Store(d) as st:
            for i in range(n):
                kind = rng.choice(["bench", "bench", "calibration", "other"])
                cfg = {"model": "ViT-Nano/4", "task": "infer", **{f"c{j}": rng.choice(VALUES)
                                                                  for j in range(4) if rng.random() < 0.6}}
                metrics = {f"m{j}": rng.choice(VALUES) for j in range(4) if rng.random() < 0.6}
                if rng.random() < 0.2:
                    metrics["model"] = "clash"  # a metric named like a config field: metric.model
                if rng.random() < 0.5:
                    metrics["f"] = rng.random()  # a column of floats only, with gaps: kept as doubles
                key = None if kind == "calibration" else f"k{rng.randint(0, 40)}"
                cfg = cfg if key is None else trials.setdefault(key, cfg)
                status = rng.choice(["ok", "ok", "error"])
                if status == "ok" and kind in HEADLINES:  # an ok row carries its measure (tasks.row_check)
                    metrics[HEADLINES[kind]] = rng.random() + 0.1
                st.append(record(kind, cfg, metrics=metrics, raw={"step_s": [0.1] * (rng.randint(0, 3) or 1)},
                                 env={"torch": rng.choice(["x", "y"]), "list": [1]},
                                 status=status,
                                 key=key,
                                 study="t", run_id="r", repeat=0, trial=cfg,
                                 started_at=f"2026-01-01T00:00:00.{d.name}.{i:03d}",  # each a measurement
                                 finished_at=f"2026-01-01T00:00:{rng.randint(0, 20):02d}"))
        with open(d / "results.jsonl", "ab") as fh:
            fh.write(b"not json\n")


@pytest.mark.parametrize("seed", range(4))
def test_load_gives_the_frame_of_the_selected_rows(tmp_path, seed):
    store(tmp_path, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kinds, latest in itertools.product((None, "all", ("calibration",), ("other",)), (True, False)):
            got, want = load(tmp_path, kinds, latest), defined(tmp_path, kinds, latest)
            pd.testing.assert_frame_equal(got, want, check_exact=True)
            for col in got.columns[got.dtypes == object]:  # 1, 1.0 and True are equal, but not the same value
                assert [type(v) for v in got[col]] == [type(v) for v in want[col]], col


def test_load_each_reads_once_what_load_gives_for_each_kind(tmp_path):
    store(tmp_path, 7)
    kinds = (None, ("calibration",), "all")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for latest in (True, False):
            for got, k in zip(load_each(tmp_path, kinds, latest), kinds):
                pd.testing.assert_frame_equal(got, load(tmp_path, k, latest), check_exact=True)


def test_raw_json_is_the_text_of_the_raw_dicts(tmp_path):
    """load_each(raw_json=True): each raw cell is json.dumps(raw, default=str) of load's dict; the rest equal."""
    import json

    store(tmp_path, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        as_text, = load_each(tmp_path, (None,), raw_json=True)
        as_dicts = load(tmp_path)
    assert list(as_text["raw"]) == [json.dumps(r, default=str) for r in as_dicts["raw"]]
    pd.testing.assert_frame_equal(as_text.drop(columns="raw"), as_dicts.drop(columns="raw"), check_exact=True)


def test_the_reports_time_budget_reads_raw_as_text_or_dicts(tmp_path):
    """The report loads raw as JSON text (report.build_report): its time budget is the one the dicts give."""
    from vitbench.report.budget import time_budget

    rows = [record("bench", {"model": "ViT-Nano/4", "task": "infer", "backend": b}, key=f"k{i}", study="t",
                   run_id="r", repeat=0, raw={"budget_s": {"setup": 0.5 * i, "compile": 0.25, "timed": 1.0}},
                   runner={"wall_s": 3.0 + i, "startup_s": 0.75}) for i, b in enumerate(["torch", "jax", "torch"])]
    with Store(tmp_path) as st:
        for r in rows:
            st.append(r)
    as_text, = load_each(tmp_path, (None,), raw_json=True)
    table = time_budget(as_text)
    pd.testing.assert_frame_equal(table, time_budget(load(tmp_path)), check_exact=True)
    assert table["compile_s"].iloc[-1] == 0.75 and table["startup_s"].iloc[-1] == 3 * 0.75 + 1.5  # exact sums
