"""vitbench compare and vitbench history: verdict rules pinned where a mutation review found the suite silent (each
test one behaviour, on hand-made rows or series whose right answer is known from the rule's closed form): which
records are "the same runs", the quiet host's assumed run noise, the A/B replay's stop at the first regression, the
width of a change's commit range, and which basis (normalised or raw) a history series is judged on."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
from scipy import stats
from test_compare import bench_record

from vitbench.compare import compare
from vitbench.compare.decide import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD, Decision
from vitbench.compare.paired import Rule
from vitbench.history import series as hs
from vitbench.history.changes import changes
from vitbench.history.store import Point, Run
from vitbench.tasks.calibration import LEGACY_N, SIZE

# the quiet host's between-run sd of log(run value) that docs/compare.md measured ("One run per side"): the
# figure the verdicts below are derived from, written out so that a changed constant shows
QUIET_SD_DOCUMENTED = 0.063
Z = NormalDist().inv_cdf(0.5 + DEFAULT_CONFIDENCE / 2)


def _run_rec(step_s: float, run_id, load: float | None = 0.1):
    """One quiet run of trial A whose 20 steps all take `step_s` (no jitter: the steps' interval is the point)."""
    r = bench_record("A", step_s=[step_s] * 20, repeat=0, run_id=run_id)
    if load is not None:
        r.metrics["other_load_cores"] = load
    return r


# ---- the same runs on both sides ---------------------------------------------------------------------------
def test_records_without_a_run_id_compared_with_themselves_are_not_the_same_runs():
    """The very same record (no run id: not written by a sweep) on both sides is not "the same runs": its run
    noise is assumed (quiet: one run a side, s sqrt 2), so ratio 1 has the interval exp(+/- z s sqrt 2) =
    [0.840, 1.191], which reaches past 0.95: inconclusive (exit 3), for a missing and an empty run id alike. The
    same record with a run id is the same run on both sides: a point interval at 1, no change (exit 0)."""
    half = Z * QUIET_SD_DOCUMENTED * math.sqrt(2)
    for run_id in (None, ""):
        side = [_run_rec(0.01, run_id)]
        cmp = compare(side, side)
        (row,) = cmp.rows
        assert row.method != "the same runs on both sides" and "one run on a side" in row.method, row
        assert row.ratio == pytest.approx(1.0, rel=1e-12)
        assert (row.ci_low, row.ci_high) == (pytest.approx(math.exp(-half), rel=1e-9),
                                             pytest.approx(math.exp(half), rel=1e-9))
        assert str(row.decision) == "inconclusive" and cmp.exit_code == 3
    side = [_run_rec(0.01, "r1")]
    cmp = compare(side, side)
    (row,) = cmp.rows
    assert row.method == "the same runs on both sides" and (row.ci_low, row.ci_high) == (1.0, 1.0)
    assert str(row.decision) == "no change" and cmp.exit_code == 0


def test_two_different_runs_without_run_ids_are_not_taken_for_one():
    """A baseline run and a current run 20 % apart, neither with a run id and alike in key, repeat and start
    time: different runs, so the current one's interval is widened by the assumed noise, 0.8 exp(+/- z s sqrt 2)
    = [0.672, 0.953], which reaches past 0.95: inconclusive. Taken for the same run (a point at 0.8) it would be a
    certain regression."""
    base, cur = _run_rec(0.01, None), _run_rec(0.0125, None)
    base.started_at = cur.started_at = "2026-01-01T00:00:00+00:00"  # (the clock's, else: set alike here)
    assert (base.key, base.repeat, base.started_at) == (cur.key, cur.repeat, cur.started_at)
    cmp = compare([base], [cur])
    (row,) = cmp.rows
    half = Z * QUIET_SD_DOCUMENTED * math.sqrt(2)
    assert row.ratio == pytest.approx(0.8, rel=1e-9)
    assert row.ci_high == pytest.approx(0.8 * math.exp(half), rel=1e-9) and row.ci_low < row.ci_high
    assert str(row.decision) == "inconclusive" and cmp.exit_code == 3


# ---- the quiet host's assumed run noise ----------------------------------------------------------------------
def test_the_quiet_run_noise_sets_the_smallest_decidable_one_run_change():
    """One quiet run a side, steps without jitter: the interval is ratio x exp(+/- z s sqrt(1/1 + 1/1)), a
    regression when its top is under 1 - threshold, i.e. ratio < (1 - t) exp(-z s sqrt 2) = 0.798 at s = 0.063.
    2.5 % below that boundary is a regression (exit 1), 2.5 % above it inconclusive (exit 3). Either verdict flips
    when s moves by a fifth (the boundary moves by 3.5 % in log): s = 0.05 decides the second, s = 0.08 does not
    decide the first."""
    def boundary(sd: float) -> float:
        return (1 - DEFAULT_THRESHOLD) * math.exp(-Z * sd * math.sqrt(2))

    edge = boundary(QUIET_SD_DOCUMENTED)
    assert edge == pytest.approx(0.798, abs=5e-4)
    below, above = edge / 1.025, edge * 1.025
    for sd in (QUIET_SD_DOCUMENTED * 0.8, QUIET_SD_DOCUMENTED * 1.2):  # the test is sensitive to a fifth
        assert (below < boundary(sd), above < boundary(sd)) != (True, False)
    for ratio, decision, code in ((below, "regression", 1), (above, "inconclusive", 3)):
        cmp = compare([_run_rec(0.01, "b")], [_run_rec(0.01 / ratio, "c")])
        (row,) = cmp.rows
        assert "quiet-host floor" in row.method, row
        assert row.ratio == pytest.approx(ratio, rel=1e-9)
        assert str(row.decision) == decision and cmp.exit_code == code, (ratio, row)


# ---- the A/B gate's replay ---------------------------------------------------------------------------------
def test_the_replay_stops_at_the_first_regression_and_ignores_later_pairs():
    """Trial A is a regression after the four minimum pairs (0.80, 0.81, 0.79, 0.80: interval [0.787, 0.813])
    while trial B is still inconclusive ([0.876, 1.082]): the gate stops there, at 4 pairs, with a regression.
    The eight pairs that follow (A at 1.0) are never used; with them A would be inconclusive (0.928 [0.866,
    0.996]) and the verdict inconclusive."""
    a = [0.80, 0.81, 0.79, 0.80] + [1.0] * 8
    b = [1.0, 0.9, 1.05, 0.95] + [1.0] * 8
    rule = Rule()
    assert rule.min_pairs == 4
    first = rule.decisions({"A": a[:4], "B": b[:4]})
    assert (first["A"][1], first["B"][1]) == (Decision.REGRESSION, Decision.INCONCLUSIVE)
    assert rule.done({"A": a[:4], "B": b[:4]}, 4)
    pairs = [{"A": x, "B": y} for x, y in zip(a, b)]
    assert rule.replay(pairs) == (Decision.REGRESSION, 4)
    assert rule.decisions({"A": a, "B": b})["A"][1] is Decision.INCONCLUSIVE  # what the later pairs would do


# ---- history: a change's commit range ----------------------------------------------------------------------
def test_a_changes_commit_range_is_the_chi_square_profile_set():
    """A clean step of d in log at commit 10 of 20 (ten points each side), noise sd s given: a split at 10 - j
    (or 10 + j) gains n j d^2 / (n + j) less than the best split (n = 10), so it is in the range while that is at
    most chi2_1(0.95) s^2. With s^2 = 2 d^2 / chi2 the cut-off is 2 d^2: j = 2 (1.67 d^2) is in, j = 3 (2.31 d^2)
    is not, so the change lies in points 8..12: commits c07 to c12. A chi-square quantile a fifth off moves it
    (1.6 d^2: j = 1 only; 2.4 d^2: j = 3 as well)."""
    n, d = 10, 0.1
    chi2 = float(stats.chi2.ppf(0.95, 1))
    sd = d * math.sqrt(2 / chi2)  # found: the best gain n d^2 / 2 = 5 d^2 beats the penalty 2 s^2 log 20 = 3.1 d^2

    def width(cut_off: float) -> int:  # the largest j whose loss n j / (n + j) (in d^2) is within the cut-off
        return max(j for j in range(0, n) if n * j / (n + j) <= cut_off)

    assert (width(2.0), width(1.6), width(2.4)) == (2, 1, 3)
    values = [100.0] * n + [100.0 * math.exp(-d)] * n
    (c,) = changes(values, sigma=sd)
    assert (c.index, c.first, c.last) == (n, n - 2, n + 2)
    assert c.size == pytest.approx(math.exp(-d), rel=1e-12)
    s = hs.Series("img_per_s", "img/s", True, "t", "t", None, None, None,
                  commits=[f"c{i:02d}" for i in range(2 * n)], values=values)
    assert s.commit_range(c) == ("c07", "c12")


# ---- history: normalised or raw ----------------------------------------------------------------------------
WIGGLE = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0]


def _hist(calibrations, machines=None) -> list[tuple[Run, Point]]:
    """Twelve commits, one run each: c000-c005 on m1 at ~100 img/s, c006-c011 on m2 (twice as fast) at ~200;
    `calibrations[i]`: (TFLOP/s, raw) of commit i's point, or None."""
    machines = machines or ["m1"] * 6 + ["m2"] * 6
    rows = []
    for i, (machine, cal) in enumerate(zip(machines, calibrations)):
        speed = (100.0 if i < 6 else 200.0) * WIGGLE[i % 6]
        run = Run(source="sweep", commit=f"c{i:03d}", commit_date=f"2026-01-01T00:00:{i:02d}+00:00",
                  run_date="2026-01-02T00:00:00+00:00", machine=machine, path="/results", info={"i": i})
        value, raw = (None, {}) if cal is None else cal
        rows.append((run, Point(trial="t1", label="ViT-Nano/4 infer", model="ViT-Nano/4", backend="torch",
                                task="infer", metric="img_per_s", unit="img/s", higher_is_better=True,
                                value=speed, calibration=value, raw={"rounds": [speed], **raw})))
    return rows


def _series(rows) -> hs.Series:
    """The one series of `rows`, its basis checked by the caller before its changes are found (`_detect`)."""
    (s,) = hs.build(rows)
    return s


def _detect(s: hs.Series) -> list:
    hs.detect([s])
    return s.changes


def test_two_machines_all_calibrated_at_one_size_are_judged_normalised():
    """m2 is twice as fast and calibrates twice as high: normalised, the series is flat (~200 in m2's units),
    so the machine change is no change of the code; the basis says 'normalized'."""
    cal = [(1.0, {SIZE: 2048})] * 6 + [(2.0, {SIZE: 2048})] * 6
    s = _series(_hist(cal))
    assert s.basis == "normalized"
    assert s.normalized == [pytest.approx(200.0 * WIGGLE[i % 6], rel=1e-12) for i in range(12)]
    assert _detect(s) == []


def test_an_uncalibrated_run_is_normalised_by_its_machines_median():
    """The same history with commit c002 uncalibrated: a machine's speed is its median calibration over the
    series, so c002 is still normalised (by m1's 1.0) and the series stays normalised, flat: no change."""
    cal = [(1.0, {SIZE: 2048})] * 6 + [(2.0, {SIZE: 2048})] * 6
    cal[2] = None
    s = _series(_hist(cal))
    assert s.normalized[2] == pytest.approx(2 * s.values[2], rel=1e-12)
    assert s.basis == "normalized" and _detect(s) == []


def test_a_machine_without_calibrations_sends_the_series_to_its_raw_values():
    """m1 never calibrated, m2 always: m1's points have no normalised value, so the series is judged on its raw
    values (basis 'raw'), where the machine change is a step x2 at c006."""
    cal = [None] * 6 + [(2.0, {SIZE: 2048})] * 6
    s = _series(_hist(cal))
    assert s.normalized[:6] == [None] * 6 and all(v is not None for v in s.normalized[6:])
    assert s.basis == "raw"
    assert [(c.index, round(c.size, 6)) for c in _detect(s)] == [(6, 2.0)]


def test_a_machine_calibrated_only_at_an_older_size_is_not_normalised():
    """m1 calibrated only at the legacy size (a point before sizes were recorded: LEGACY_N), m2 at another: m1
    has no calibration at the newest size, so none of its points is normalised and the series is judged raw."""
    newest = LEGACY_N * 2
    cal = [(1.0, {})] * 6 + [(2.0, {SIZE: newest})] * 6
    s = _series(_hist(cal))
    assert s.normalized[:6] == [None] * 6 and s.normalized[6:] == [pytest.approx(v) for v in s.values[6:]]
    assert s.basis == "raw"
    assert [c.index for c in _detect(s)] == [6]


def test_one_machine_is_judged_raw_however_calibrated():
    """Every commit on one machine, all calibrated: nothing to divide out, so the basis stays 'raw' (the step at
    c006 is then the code's)."""
    cal = [(1.0, {SIZE: 2048})] * 6 + [(2.0, {SIZE: 2048})] * 6
    s = _series(_hist(cal, machines=["m1"] * 12))
    assert all(v is not None for v in s.normalized) and s.basis == "raw"
    assert [c.index for c in _detect(s)] == [6]
