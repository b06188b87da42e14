"""store.load at scale (issue 51): read a line at a time into columns (vitbench.frames), it gives the frame its
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

from vitbench.store import Store, _flatten, load, read_records, select

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


def store(tmp_path, seed: int):
    """Three directories of random rows: 40 keys re-run up to three times at random (or equal) finish times,
    calibration rows among them, each row with random extra config fields and metrics, a garbage line."""
    rng = random.Random(seed)
    for d, n in ((tmp_path, 60), (tmp_path / "round1", 20), (tmp_path / "round1" / "b", 10)):
        with Store(d) as st:
            for i in range(n):
                kind = rng.choice(["bench", "bench", "calibration", "other"])
                cfg = {"model": "ViT-Nano/4", "task": "infer", **{f"c{j}": rng.choice(VALUES)
                                                                  for j in range(4) if rng.random() < 0.6}}
                metrics = {f"m{j}": rng.choice(VALUES) for j in range(4) if rng.random() < 0.6}
                if rng.random() < 0.2:
                    metrics["model"] = "clash"  # a metric named like a config field: metric.model
                st.append(record(kind, cfg, metrics=metrics, raw={"step_s": [0.1] * rng.randint(0, 3)},
                                 env={"torch": rng.choice(["x", "y"]), "list": [1]},
                                 status=rng.choice(["ok", "ok", "error"]),
                                 key=None if kind == "calibration" else f"k{rng.randint(0, 40)}",
                                 study="t", run_id="r", repeat=0, trial=cfg,
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
