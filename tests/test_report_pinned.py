"""Report tables and tidy rows pinned where a mutation review found the suite silent (each test one behaviour, on
hand-made rows whose right answer is known): the median over repeats, a capped max batch, a missing setting that
still splits, flags read back as missing, the failures and shared-host lists, status counts, distillation wins,
two result folders without a run id, and a metric named like a config field."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from records import record

from vitbench.report import caveats
from vitbench.report.caveats import OVERLAPPED
from vitbench.report.tables import (distillation, distinct, failures, flag_shared_host, max_batch, shared_host,
                                    status_counts, throughput, throughput_table, varying)
from vitbench.store import Store
from vitbench.tidy import load

BENCH = {"kind": "bench", "status": "ok", "model": "ViT-Nano/4", "backend": "torch", "task": "infer",
         "device": "cpu", "precision": "fp32", "compile": False, "resolution": 32, "batch_size": 8}
MB = {"kind": "max_batch", "status": "ok", "model": "ViT-Nano/4", "backend": "torch", "mode": "infer",
      "device": "cpu", "precision": "fp32", "resolution": 32}


def _rows(base: dict, *rows: dict) -> pd.DataFrame:
    return pd.DataFrame([{**base, "repeat": i, **r} for i, r in enumerate(rows)])


def test_a_summary_value_over_skewed_repeats_is_their_median_not_their_mean():
    """Three repeats of one configuration at 10, 11 and 100 img/s (one outlier): the table reads 11, the median,
    not the mean 40.33 the outlier drags up; min and max keep the spread visible."""
    t = throughput(_rows(BENCH, {"img_per_s": 10.0}, {"img_per_s": 11.0}, {"img_per_s": 100.0}))
    assert len(t) == 1
    row = t.iloc[0]
    assert row["img_per_s"] == 11.0 and row["repeats"] == 3
    assert (row["img_per_s_min"], row["img_per_s_max"]) == (10.0, 100.0)


def test_a_max_batch_capped_in_some_repeats_says_how_many_and_is_no_lower_bound():
    """Two repeats of a max-batch search: one found 100, one reached its cap 128. The median 114 is no lower bound
    (one repeat found nothing above 100), so it reads '114 (capped in 1 of 2)' and `capped` is False; it read
    '\u2265 114' when `capped` was the maximum over repeats. Capped in both: '\u2265 128' and capped."""
    t = max_batch(_rows(MB, {"max_batch_size": 100, "capped": False}, {"max_batch_size": 128, "capped": True}))
    assert len(t) == 1
    row = t.iloc[0]
    assert row["max_batch_size"] == 114.0 and bool(row["capped"]) is False
    assert row["max_batch"] == "114 (capped in 1 of 2)"
    both = max_batch(_rows(MB, {"max_batch_size": 128, "capped": True}, {"max_batch_size": 128, "capped": True}))
    assert both.iloc[0]["max_batch"] == "\u2265 128" and bool(both.iloc[0]["capped"]) is True


def test_a_max_batch_never_capped_reads_as_the_plain_number():
    """Neither repeat capped: the plain median, no lower-bound sign (the other side of the any-repeat rule)."""
    t = max_batch(_rows(MB, {"max_batch_size": 100, "capped": False}, {"max_batch_size": 128, "capped": False}))
    assert list(t["max_batch"]) == ["114"]


def test_a_setting_missing_in_one_row_still_varies_and_keeps_the_rows_apart():
    """threads=4 in one row and missing (NaN: ran with the default) in the other: a missing value counts as a
    value of its own (nunique(dropna=False)), so `varying` names the setting and the throughput table keeps two
    rows (100 and 350 img/s), never one median of 225 over different thread counts."""
    df = _rows(BENCH, {"threads": 4.0, "img_per_s": 350.0}, {"threads": np.nan, "img_per_s": 100.0})
    assert varying(df, ["threads", "model"]) == ["threads"]
    t = throughput(df)
    assert len(t) == 2 and sorted(t["img_per_s"]) == [100.0, 350.0]
    assert list(t["repeats"]) == [1, 1] and "threads" in t.columns


def test_a_missing_capped_flag_is_not_counted_as_capped():
    """`capped` None (a row that never said) or NaN reads as not capped (caveats.true); so a max-batch row
    without the flag shows its plain number, not a lower bound."""
    assert caveats.true(None) is False and caveats.true(float("nan")) is False and caveats.true(pd.NA) is False
    assert caveats.true(True) is True and caveats.true(np.bool_(True)) is True and caveats.true(1) is True
    assert caveats.true(0) is False
    t = max_batch(pd.concat([_rows(MB, {"max_batch_size": 64, "capped": None}),
                             _rows({**MB, "resolution": 64}, {"max_batch_size": 16, "capped": True})],
                            ignore_index=True))
    assert dict(zip(t["resolution"], t["max_batch"])) == {32: "64", 64: "\u2265 16"}


def test_failures_list_every_non_ok_row_with_the_first_line_of_its_message():
    """Every row whose status is not ok is listed, an interrupted one included (it did not finish: the reader is
    told), each error_message cut to its first non-blank line (a traceback's header, not its last line); the ok
    row is not listed."""
    df = _rows(BENCH, {"status": "ok"},
               {"status": "error", "error_type": "RuntimeError",
                "error_message": "\n  first line of the error\nsecond line\nlast line"},
               {"status": "interrupted", "error_type": None, "error_message": None},
               {"status": "oom", "error_type": "OOM", "error_message": "x" * 300})
    f = failures(df)
    assert list(f["status"]) == ["error", "interrupted", "oom"]
    assert list(f["repeat"]) == [1, 2, 3]
    assert list(f["error_message"]) == ["first line of the error", "", "x" * 160 + "... (300 characters)"]


def test_the_shared_host_table_lists_only_ok_rows():
    """Two rows measured while another trial ran on the host, one ok and one that failed: only the ok row is
    listed (a failed row's speed is in no table to doubt); a clean ok row is not listed either."""
    other = {"trial": "s/k9", "run_id": "r2", "own": False, "launcher_pid": 7, "cmd": "vitbench sweep", "cwd": "/"}
    own = {"trial": "s/k1", "own": True}
    df = _rows(BENCH, {"key": "ok-shared", OVERLAPPED: [other, own]},
               {"key": "failed-shared", "status": "error", OVERLAPPED: [other]},
               {"key": "ok-alone", OVERLAPPED: []})
    t = shared_host(flag_shared_host(df))
    assert list(t["key"]) == ["ok-shared"]
    assert (t["shared_host"].iloc[0], t["own_sweep"].iloc[0], t["other_process"].iloc[0]) == (2, 1, 1)


def test_status_counts_keep_rows_whose_task_is_missing():
    """A row without a task (NaN: an old or foreign row) is still counted, under a missing task, not dropped:
    the counts add up to the rows."""
    df = pd.DataFrame({"task": ["infer", "infer", None, "train"], "status": ["ok", "oom", "ok", "ok"]})
    c = status_counts(df)
    assert c["trials"].sum() == 4
    nan_task = c[c["task"].isna()]
    assert list(nan_task["status"]) == ["ok"] and list(nan_task["trials"]) == [1]
    assert dict(zip(zip(c["task"].fillna("?"), c["status"]), c["trials"])) == {
        ("infer", "ok"): 1, ("infer", "oom"): 1, ("?", "ok"): 1, ("train", "ok"): 1}


def test_status_counts_keep_rows_whose_status_is_missing_without_a_task_column():
    """Rows without a task column (none of them had one), one of them without a status: it is counted under a
    missing status, as it is where there is a task column, so the trials add up to 3."""
    c = status_counts(pd.DataFrame({"status": ["ok", None, "oom"]}))
    assert c["trials"].sum() == 3
    assert list(c[c["status"].isna()]["trials"]) == [1]


def test_a_tied_seed_is_not_a_distillation_win():
    """Seed by seed against the same model without a teacher: 0.80 vs 0.80 (a tie, gain exactly 0), 0.90 vs
    0.85 (a win), 0.70 vs 0.75 (a loss): 1 win of 3, not 2 (a tie is no gain), and the mean gain is 0."""
    acc = {None: [0.80, 0.85, 0.75], "R-Nano": [0.80, 0.90, 0.70]}
    df = pd.DataFrame([{"model": "DeiT-Nano/4-dist", "kind": "finetune", "teacher": t, "seed": s, "accuracy": a}
                       for t, values in acc.items() for s, a in enumerate(values)])
    table = distillation(df)
    row = table[table["teacher"] == "R-Nano"].iloc[0]
    assert row["gain_wins"] == "1/3"
    assert math.isclose(row["gain_vs_no_teacher"], 0.0, abs_tol=1e-12)


def _bench_row(st: Store, ips: float, **metrics) -> None:
    cfg = {k: v for k, v in BENCH.items() if k not in ("kind", "status")}
    st.append(record("bench", cfg, metrics={"img_per_s": ips, **metrics}, key="k", trial=cfg))


def test_two_folders_of_rows_without_a_run_id_are_kept_apart(tmp_path):
    """Two result folders each holding a row of the same trial key, neither written by a sweep run (run_id None,
    so no measurement identity): both rows are kept, one per folder, not taken as one row or as copies of one
    measurement."""
    for sub, ips in (("a", 100.0), ("b", 200.0)):
        with Store(tmp_path / "res" / sub) as st:
            _bench_row(st, ips)
    df = load(tmp_path / "res")
    assert df["run_id"].isna().all()
    assert sorted(df["img_per_s"]) == [100.0, 200.0]
    assert df["source"].nunique() == 2


def test_a_metric_named_like_a_config_field_does_not_clobber_the_config(tmp_path):
    """A bench row whose metrics include `resolution` (not a bench metric) and `model`: the config's resolution
    32 and model stay under their names, the metrics become 'metric.resolution' and 'metric.model'."""
    with Store(tmp_path / "res") as st:
        _bench_row(st, 100.0, resolution=224, model="other")
    df = load(tmp_path / "res")
    row = df.iloc[0]
    assert row["resolution"] == 32 and row["model"] == "ViT-Nano/4"
    assert row["metric.resolution"] == 224 and row["metric.model"] == "other"


def test_a_declared_metric_keeps_its_name_and_the_config_field_moves_aside(tmp_path):
    """max_batch's declared metric max_batch_size (the largest batch found, 2127) beside the config's cap of the
    same name (4096): the metric keeps the name, the cap becomes 'config.max_batch_size'."""
    cfg = {k: v for k, v in MB.items() if k not in ("kind", "status")} | {"max_batch_size": 4096}
    with Store(tmp_path / "res") as st:
        st.append(record("max_batch", cfg, metrics={"max_batch_size": 2127, "capped": False}, key="m",
                         trial=cfg))
    row = load(tmp_path / "res").iloc[0]
    assert row["max_batch_size"] == 2127 and row["config.max_batch_size"] == 4096


def test_a_compile_time_pooled_over_a_cold_compile_and_a_cache_load_says_so():
    """Two repeats of a JAX trial, the first compiled cold (0.35 s), the second loaded from the compile cache
    (0.10 s): the table's compile_s is their median, 0.225 s, the time of neither; `compile_cached` beside it says
    'False/True' (it said nothing), and a configuration whose repeats all compiled cold says 'False'. Eager rows
    (None: nothing went through a cache) say nothing."""
    jax = {**BENCH, "backend": "jax"}
    df = pd.concat([_rows(jax, {"img_per_s": 9.0, "compile_s": 0.35, "compile_cached": False},
                          {"img_per_s": 9.0, "compile_s": 0.10, "compile_cached": True}),
                    _rows({**jax, "task": "train"}, {"img_per_s": 2.0, "compile_s": 2.2, "compile_cached": False}),
                    _rows(BENCH, {"img_per_s": 6.0, "compile_s": None, "compile_cached": None})],
                   ignore_index=True)
    t = throughput_table(df)
    got = {(b, k): (c, s) for b, k, c, s in zip(t["backend"], t["task"], t["compile_cached"], t["compile_s"])}
    # exact: the median of two values is their sum halved, as computed here
    assert got[("jax", "infer")] == ("False/True", (0.35 + 0.10) / 2) and got[("jax", "train")] == ("False", 2.2)
    assert got[("torch", "infer")][0] in ("", None) or pd.isna(got[("torch", "infer")][0])
    assert list(t.columns).index("compile_cached") == list(t.columns).index("compile_s") + 1


def test_distinct_keeps_every_distinct_value():
    """distinct: every distinct value once, sorted, '/'-joined, missing ones left out; and the throughput table
    carries two repeats' different memory kinds as both, not the first or last."""
    assert distinct(pd.Series(["b", "a", None, "b", "c"])) == "a/b/c"
    df = _rows(BENCH, {"img_per_s": 1.0, "peak_mem_mib": 5.0, "memory_kind": "host_rss"},
               {"img_per_s": 2.0, "peak_mem_mib": 6.0, "memory_kind": "allocator"},
               {"img_per_s": 3.0, "peak_mem_mib": 7.0, "memory_kind": "host_rss"})
    t = throughput_table(df)
    assert len(t) == 1 and t["memory_kind"].iloc[0] == "allocator/host_rss"
