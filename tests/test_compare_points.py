"""compare's per-run point is the row's number, a side's aggregation is said, and the report tables beside it show
what was measured (a review recomputing every number from the raw data)."""

from __future__ import annotations

import numpy as np
from test_compare import bench_record, calibration_record
from tolerances_stat import f64, gamma

from vitbench.compare import compare, row_cells, to_benchmark_json, to_markdown
from vitbench.compare.decide import _draw, _side
from vitbench.compare.match import Trial
from vitbench.stats import MedianBatch
from vitbench.tasks.bench_metrics import DECLARED

# An even count of steps whose median rate (batch / step time: the two middle rates averaged) is not the row's
# batch / median time (the two middle times averaged): 8 / 0.02 = 400 img/s against (800 + 266.7) / 2 = 533.3
TWO = [0.01, 0.03]


def _steps(n: int, rng: np.random.Generator, scale: float = 1.0) -> list[float]:
    return (0.01 * scale * rng.lognormal(0.0, 0.05, n)).tolist()


def test_compare_shows_the_row_s_img_per_s_where_the_steps_are_even_in_number():
    rng = np.random.default_rng(0)
    base = [bench_record("A", _steps(50, rng))]
    cur = [bench_record("A", _steps(50, rng, scale=1.01))]
    (row,) = compare(base, cur).rows
    b, c = base[0].metrics["img_per_s"], cur[0].metrics["img_per_s"]
    # the stored numbers read back: `==`; the median of the rates was 0.01-0.1 % off both
    assert (row.baseline, row.current) == (b, c)
    assert row.ratio == c / b  # one run a side: the ratio is one division of the two, as here
    assert to_benchmark_json(compare(base, cur))[0]["value"] == c
    two = compare([bench_record("B", TWO)], [bench_record("B", TWO, run_id="run2")]).rows[0]
    assert row_cells(two)["baseline"] == "400"  # not 533.3


def test_the_bootstrap_medians_are_of_the_times_as_the_row_s_median_is():
    """Each resample's median is batch / its median time: with 2 steps, 8 / 0.01, 8 / 0.03 or 8 / 0.02 (400), never
    the rates' mean 533.3."""
    boot = MedianBatch(np.random.default_rng(0), 2000)
    trial = Trial("bench", 1, {}, ok=[bench_record("B", TWO)])
    drawn = _draw(trial, DECLARED["img_per_s"], boot)
    boot.run()
    point, replicates, *_ = _side(drawn, None, boot, DECLARED["img_per_s"])
    assert point == 8 / np.median(TWO)
    # each replicate is batch / a resample's median time, 1 / (1 / (8 / t)): 2 roundings of the step's rate
    # 8 / t, 1 of (t1 + t2) / 2, 2 of the inversions: 5 on either side (tests/tolerances_stat.py)
    wants = np.array([800.0, 8 / 0.03, 400.0])
    near = np.abs(replicates[:, None] - wants[None, :]) <= 2 * gamma(5) * wants
    assert near.any(axis=1).all() and near.any(axis=0).all()  # only those three, and each of them drawn


def test_normalize_divides_the_row_s_number_by_the_calibration():
    rng = np.random.default_rng(1)
    base = [bench_record("A", _steps(50, rng)), calibration_record([1.0, 1.0, 1.0])]
    cur = [bench_record("A", _steps(50, rng)), calibration_record([0.5, 0.5, 0.5])]
    (row,) = compare(base, cur, normalize=True).rows
    b, c = base[0].metrics["img_per_s"], cur[0].metrics["img_per_s"]
    assert (row.baseline, row.current) == (b, c)  # raw, as the rows hold them
    assert row.ratio_raw == c / b
    # (c / 0.5) / (b / 1.0): the divisions by the calibrations and the ratio, 3 roundings
    assert row.ratio == f64(2 * c / b, roundings=3)
    assert row.machine_ratio == f64(0.5, roundings=8)  # ratio_raw / ratio: 3 + 1 of the ratios, 1 of this


def test_a_side_of_several_runs_says_it_shows_their_mean():
    rng = np.random.default_rng(2)
    base = [bench_record("A", _steps(51, rng, scale=s), repeat=i) for i, s in enumerate((1.0, 1.4, 0.7))]
    cur = [bench_record("A", _steps(51, rng), repeat=0)]
    cmp = compare(base, cur)
    (row,) = cmp.rows
    assert row.baseline == np.mean([r.metrics["img_per_s"] for r in base])  # the same mean of the same numbers
    cells = row_cells(row)
    assert cells["baseline"].endswith(" (mean of 3 runs)") and "mean" not in cells["current"]
    assert "(mean of 3 runs)" in to_markdown(cmp)
    (entry,) = to_benchmark_json(cmp)
    assert "baseline: " in entry["extra"] and "(mean of 3 runs)" in entry["extra"]
    assert "value: mean of" not in entry["extra"]  # current: one run, its own value
    (entry,) = to_benchmark_json(compare(cur, base))
    assert "value: mean of 3 runs" in entry["extra"]


def test_a_side_without_the_other_s_metric_still_says_how_many_runs_it_shows():
    rng = np.random.default_rng(3)
    base = [bench_record("A", _steps(11, rng), repeat=0)]
    del base[0].metrics["peak_mem_mib"]
    cur = [bench_record("A", _steps(11, rng), repeat=i) for i in range(2)]
    (row,) = compare(base, cur, metrics=("peak_mem_mib",)).rows
    assert row.repeats == (0, 2) and "not in baseline" in row.note
    assert row_cells(row)["current"] == "100 (mean of 2 runs)"


def test_the_max_batch_table_shows_the_peak_held_to_the_limit(tmp_path):
    from test_report import _add

    from vitbench.report import build_report
    from vitbench.report.views import report_parts
    from vitbench.store import Store

    cfg = dict(model="ViT-Nano/4", backend="torch", task="max_batch", device="cpu", resolution=32, mode="infer",
               precision="fp32", memory_limit_mib=2048.0)
    with Store(tmp_path) as st:
        _add(st, "max_batch", cfg, dict(max_batch_size=64, capped=False, peak_mem_mib=100.0,
                                        process_peak_mib=900.0, memory_limit_mib=2048.0))
    table = build_report(tmp_path, tmp_path / "out", {"md"}, plots=False).tables["max_batch"]
    assert table.loc[0, "process_peak_mib"] == 900.0
    cols = list(table.columns)
    assert cols.index("process_peak_mib") + 1 == cols.index("memory_limit_mib")
    shown = next(p.columns for p in report_parts() if p.name == "max_batch")  # the terminal's columns
    assert shown.index("process_peak_mib") + 1 == shown.index("memory_limit_mib")


def test_timed_s_does_not_claim_min_seconds():
    """The stop rule counts wall-clock time, gaps between steps included; timed_s only the steps (a latency row had
    timed_s 0.298 at --min-seconds 0.3)."""
    text = DECLARED["timed_s"].description
    assert "at least" not in text and "min_seconds" in text and "between" in text
