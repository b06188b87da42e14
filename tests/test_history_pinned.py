"""Pinned edges of the history's series and change points (vitbench.history.series, vitbench.history.changes) and
of the noise flags (vitbench.measure.noise): each a hand-made input whose right answer is known, where the test
suite let a changed rule pass (a mutation review)."""

from __future__ import annotations

import math
import statistics

import numpy as np

from vitbench.backends.base import TimerKind
from vitbench.history import store
from vitbench.history.store import Point, Run
from vitbench.measure.noise import NoiseFlag, assess


def _run(commit: str, i: int, machine: str = "m1", date: str | None = None) -> Run:
    date = date or f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00"
    return Run(source="sweep", commit=commit, commit_date=date,
               run_date="2026-01-02T00:00:00+00:00", machine=machine, path="/results", info={"i": i})


def _point(value: float, trial: str = "t1", metric: str = "img_per_s", higher_is_better: bool = True,
           unit: str = "img/s") -> Point:
    return Point(trial=trial, label=f"ViT-Nano/4 infer {trial}", model="ViT-Nano/4", backend="torch", task="infer",
                 metric=metric, unit=unit, higher_is_better=higher_is_better, value=value, calibration=None,
                 raw={"rounds": [value]})


def _memory(value: float) -> Point:
    return _point(value, metric="peak_mem_mib", higher_is_better=False, unit="MiB")


# ---- series ------------------------------------------------------------------------------------------------
def test_a_lower_is_better_metric_that_rises_is_a_new_regression(tmp_path):
    """Peak memory is lower-is-better: a rise of 30 % at the newest commits is a new regression; the same fall
    is an improvement, no regression."""
    from vitbench.history import series as hs

    rng = np.random.default_rng(3)
    base = list(100 * np.exp(rng.normal(0, 0.01, 30)))
    for name, tail, expect in (("up", [130.0, 130.5], [30]), ("down", [70.0, 70.5], [])):
        db = tmp_path / f"{name}.sqlite"
        for i, v in enumerate(base + tail):
            store.append(db, _run(f"c{i:03d}", i), [_memory(float(v))])
        (s,) = hs.detect(hs.build(list(store.read(db))))
        assert s.higher_is_better is False
        (c,) = [c for c in s.changes if c.index == 30]
        assert (c.size > 1) == (name == "up") and c.confidence >= 0.95, c
        assert [x.index for x in hs.new_regressions(s, 0.95)] == expect, (name, s.changes)


def test_a_change_at_exactly_the_default_confidence_counts():
    """new_regressions keeps a regression whose confidence is the threshold itself (`at confidence or more`):
    0.95 = 1 - 50 / (PERMUTATIONS + 1) is a confidence the permutation test can give."""
    from vitbench.compare.decide import DEFAULT_CONFIDENCE
    from vitbench.history import series as hs
    from vitbench.history.changes import PERMUTATIONS, Change

    assert any(1 - (e + 1) / (PERMUTATIONS + 1) == DEFAULT_CONFIDENCE for e in range(PERMUTATIONS))  # reachable
    flat = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 101.0, 99.0, 100.5, 99.5]
    s = hs.Series("img_per_s", "img/s", True, "t", "t", None, None, None,
                  commits=[f"c{i}" for i in range(11)], values=flat + [70.0])
    s.changes = [Change(10, 0.7, DEFAULT_CONFIDENCE, 10, 10)]
    assert hs.new_regressions(s, DEFAULT_CONFIDENCE) == s.changes
    s.changes = [Change(10, 0.7, DEFAULT_CONFIDENCE - 1 / (PERMUTATIONS + 1), 10, 10)]  # one step less sure
    assert hs.new_regressions(s, DEFAULT_CONFIDENCE) == []


def test_a_commit_measured_several_times_is_the_median_of_its_runs(tmp_path):
    """A commit measured at 50, 98 and 99.5 is one point of 98: the median, not the largest nor the mean."""
    from vitbench.history import series as hs

    db = tmp_path / "h.sqlite"
    store.append(db, _run("c000", 0), [_point(100.0)])
    for j, v in enumerate((50.0, 98.0, 99.5)):
        store.append(db, _run("c001", 1 + j, date="2026-01-01T00:00:01+00:00"), [_point(v)])
    (s,) = hs.build(list(store.read(db)))
    assert s.commits == ["c000", "c001"] and s.values == [100.0, 98.0]


def test_commits_appended_out_of_date_order_are_read_in_date_order(tmp_path):
    """The series is ordered by the commit's date, not by the order of appending."""
    from vitbench.history import series as hs

    db = tmp_path / "h.sqlite"
    for commit, i, v in (("c002", 2, 102.0), ("c000", 0, 100.0), ("c003", 3, 103.0), ("c001", 1, 101.0)):
        store.append(db, _run(commit, i), [_point(v)])
    (s,) = hs.build(list(store.read(db)))
    assert s.commits == ["c000", "c001", "c002", "c003"] and s.values == [100.0, 101.0, 102.0, 103.0]
    assert [p["commit"] for p in hs.to_page([s])[0]["points"]] == s.commits


# ---- change points -----------------------------------------------------------------------------------------
def test_four_points_are_enough_for_a_change():
    """Four points (two segments of MIN_SIZE) hold a change: [100, 101, 50, 51] halves at index 2."""
    from vitbench.history.changes import MIN_SIZE, changes

    assert 2 * MIN_SIZE == 4
    (c,) = changes([100, 101, 50, 51])
    assert c.index == 2 and abs(c.size - math.sqrt(50 * 51 / (100 * 101))) < 1e-9


def test_a_huge_step_has_the_best_confidence_the_permutations_resolve():
    """No permutation of a 20-and-20 step to a tenth matches its split gain: p = 1 / (PERMUTATIONS + 1), the
    observed split counted once, so the confidence is 1 - 1 / (PERMUTATIONS + 1) (0.999 with 999), never 1."""
    from vitbench.history.changes import PERMUTATIONS, changes

    wiggle = [1.0, 1.01, 0.99, 1.005, 0.995] * 4
    (c,) = changes([100 * w for w in wiggle] + [10 * w for w in wiggle])
    assert c.index == 20
    assert c.confidence == 1 - 1 / (PERMUTATIONS + 1)


# ---- noise flags -------------------------------------------------------------------------------------------
def test_noise_flags_at_their_edges():
    """A CV just above CV_LIMIT is high_cv (just below is not); two samples have a CV to judge; a load of exactly
    BUSY_CORES is other_load, as vitbench.measure.load.busy says too."""
    from vitbench.measure.load import BUSY_CORES, busy
    from vitbench.measure.noise import CV_LIMIT

    def alternating(cv: float) -> list[float]:  # 1 -/+ a, four times: stdev 2a / sqrt 3, mean 1
        a = cv * math.sqrt(3) / 2
        return [1 - a, 1 + a, 1 - a, 1 + a]

    above = alternating(CV_LIMIT * 1.07)
    assert statistics.stdev(above) / statistics.fmean(above) > CV_LIMIT
    assert {n.flag for n in assess(above, TimerKind.DEVICE_EVENTS)} == {NoiseFlag.HIGH_CV}
    assert assess(alternating(CV_LIMIT * 0.93), TimerKind.DEVICE_EVENTS) == []
    assert {n.flag for n in assess([0.01, 0.02], TimerKind.DEVICE_EVENTS)} == {NoiseFlag.FEW_SAMPLES,
                                                                               NoiseFlag.HIGH_CV}  # CV 0.47
    steady = [0.100, 0.101, 0.099, 0.100, 0.102]
    assert busy(BUSY_CORES, missing=False)
    assert {n.flag for n in assess(steady, TimerKind.HOST_CLOCK, other_cores=BUSY_CORES)} == {NoiseFlag.OTHER_LOAD}
    assert assess(steady, TimerKind.HOST_CLOCK, other_cores=BUSY_CORES * 0.9) == []


def test_a_steady_drift_just_over_half_the_cv_limit_is_flagged():
    """Fifteen samples on a straight ramp (thirds of five, apart): a shift of the thirds' medians just above
    half the CV limit (DRIFT_MIN_SHIFT) is a drift, just below it is not; the ramp's CV stays under the limit."""
    from vitbench.measure.noise import CV_LIMIT, DRIFT_MIN_THIRD

    n = 3 * DRIFT_MIN_THIRD

    def ramp(shift: float) -> list[float]:  # medians at 2 and 12: (1 + 12 b) / (1 + 2 b) = 1 + shift
        b = shift / (10 - 2 * shift)
        return [0.1 * (1 + b * i) for i in range(n)]

    up = ramp(CV_LIMIT / 2 * 1.1)
    noise = assess(up, TimerKind.DEVICE_EVENTS)
    assert [x.flag for x in noise] == [NoiseFlag.DRIFT], noise
    assert [x.flag for x in assess(up[::-1], TimerKind.DEVICE_EVENTS)] == [NoiseFlag.DRIFT]  # falling: -5 %
    assert assess(ramp(CV_LIMIT / 2 * 0.9), TimerKind.DEVICE_EVENTS) == []


def test_a_non_finite_value_is_refused_by_the_change_search_not_searched_for_ever():
    """A NaN (or a value <= 0, whose log is not finite) made every gain NaN: binseg's stop test `gain <= penalty`
    was never true and the search never ended (found by a mutation review whose mutant hung until pytest's
    timeout). The store refuses such values; the search refuses them too, at once; a penalty of NaN stops it."""
    import pytest

    from vitbench.history.changes import binseg, changes

    for bad in (float("nan"), 0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="positive finite"):
            changes([1.0, 1.0, bad, 1.0, 2.0, 2.0])
    assert binseg(np.array([0.0, 0.0, 1.0, 1.0]), float("nan")) == []
