"""vitbench compare: verdicts and intervals pinned where a mutation review found the suite silent (each test one
behaviour, on hand-made rows whose right answer is known; intervals against their closed forms)."""

from __future__ import annotations

import math

import pytest
from records import record
from scipy import stats
from test_compare import bench_record

from vitbench.compare import compare
from vitbench.compare.paired import Paired
from vitbench.compare.runs import RUN_NOISE_BUSY, RunNoise, between_runs, widened

T_QUANTILE_REL = 1e-9  # t_quantile (scipy.special.stdtrit) against scipy.stats.t.ppf: both invert the t cdf


def _mb(v, run_id):
    trial = {"model": "A", "backend": "torch", "task": "max_batch", "device": "cpu", "resolution": 32,
             "precision": "fp32", "mode": "infer"}
    return record("max_batch", dict(trial), metrics={"max_batch_size": v, "peak_mem_mib": 50.0},
                  key="mb0", repeat=0, trial=trial, run_id=run_id)


def test_a_baseline_of_zero_is_decided_by_the_sign_of_the_change():
    """max_batch_size 0 in the baseline (nothing fitted) has no ratio: 32 now is an improvement (higher is
    better), 32 then 0 a regression, 0 and 0 no change; each says the baseline is 0."""
    up = compare([_mb(0, "b")], [_mb(32, "c")], metrics=("max_batch_size",))
    assert [str(r.decision) for r in up.rows] == ["improvement"] and up.exit_code == 0
    down = compare([_mb(32, "b")], [_mb(0, "c")], metrics=("max_batch_size",))
    assert [str(r.decision) for r in down.rows] == ["regression"] and down.exit_code == 1
    flat = compare([_mb(0, "b")], [_mb(0, "c")], metrics=("max_batch_size",))
    assert [str(r.decision) for r in flat.rows] == ["no change"] and flat.exit_code == 0
    assert "baseline is 0" in flat.rows[0].note and "baseline is 0" in up.rows[0].note


def test_a_repeat_failing_on_both_sides_is_not_a_new_failure():
    """Three ok runs and one OOM repeat on each side, the ok runs identical in their steps: the OOM is not new
    (the baseline had it too), so the verdict is the ok runs' (no change), not "failed"."""
    def side(tag):
        return [*(bench_record("A", repeat=r, run_id=f"{tag}{r}") for r in range(3)),
                bench_record("A", repeat=3, run_id=f"{tag}3", status="oom")]
    cmp = compare(side("b"), side("c"))
    assert [str(r.decision) for r in cmp.rows] == ["no change"], cmp.rows
    assert cmp.exit_code == 0


def test_equal_compile_times_are_no_change_whatever_the_cache_did():
    """compile_s bounded by compile_cached: the cache flag differing only withholds a decision that would be a
    change; the same 5.0 s on both sides is no change (exit 0), not inconclusive."""
    def rec(cached, run_id):
        r = bench_record("A", run_id=run_id)
        r.metrics.update(compile_s=5.0, compile_cached=cached)
        return r
    cmp = compare([rec(True, "b")], [rec(False, "c")], metrics=("compile_s",))
    assert [str(r.decision) for r in cmp.rows] == ["no change"], cmp.rows
    assert cmp.exit_code == 0


def test_a_trial_failing_in_the_baseline_and_ok_now_is_an_improvement():
    """Baseline OOM, current ok: a fix, an improvement, never a failure of the check."""
    cmp = compare([bench_record("A", status="oom", run_id="b")], [bench_record("A", run_id="c")])
    assert [(r.metric, str(r.decision)) for r in cmp.rows] == [("status", "improvement")]
    assert cmp.exit_code == 0


def test_the_assumed_run_noise_counts_the_runs_on_each_side():
    """Three quiet runs against one, steps without jitter (the steps' interval is the point): the assumed
    between-run sd s (quiet) enters as s^2 (1/3 + 1/1), so a 22 % slowdown, log 1.22 = 0.199, has its interval's
    top at exp(-0.199 + 1.96 x 0.063 x sqrt(4/3)) = 0.944 < 0.95: a regression. (Counting one run a side,
    s sqrt(2), it reaches 0.975: undecided.)"""
    def rec(step, repeat, run_id):
        r = bench_record("A", step_s=[step] * 20, repeat=repeat, run_id=run_id)
        r.metrics["other_load_cores"] = 0.1
        return r
    base = [rec(0.01, r, f"b{r}") for r in range(3)]
    cmp = compare(base, [rec(0.0122, 0, "c0")])
    (row,) = cmp.rows
    assert str(row.decision) == "regression" and row.repeats == (3, 1), row
    assert cmp.exit_code == 1


def test_between_runs_is_welchs_interval_on_the_logs():
    """[1, 1.1] against [0.8, 0.85] at 0.95: the Welch t-interval on mean log(current) - mean log(baseline),
    sample variances (n - 1), Welch-Satterthwaite df (~1.8 here), computed here from its formula, the quantile
    the t distribution's (scipy)."""
    b, c = [1.0, 1.1], [0.8, 0.85]
    lb, lc = [math.log(x) for x in b], [math.log(x) for x in c]
    mb, mc = sum(lb) / 2, sum(lc) / 2
    vb, vc = sum((x - mb) ** 2 for x in lb) / 1, sum((x - mc) ** 2 for x in lc) / 1
    se = math.sqrt(vb / 2 + vc / 2)
    df = se ** 4 / ((vb / 2) ** 2 / 1 + (vc / 2) ** 2 / 1)
    half = stats.t.ppf(0.975, df) * se
    d = mc - mb
    iv = between_runs(b, c, 0.95)
    assert iv.ratio == pytest.approx(math.exp(d), rel=1e-12)
    assert math.log(iv.low) == pytest.approx(d - half, rel=0, abs=T_QUANTILE_REL * half)
    assert math.log(iv.high) == pytest.approx(d + half, rel=0, abs=T_QUANTILE_REL * half)


def test_widened_with_no_run_noise_keeps_the_steps_interval():
    """An assumed between-run sd of 0 adds nothing: the steps' interval (0.98, 1.02) around its geometric centre
    comes back as it went in."""
    lo, hi = 0.98, 1.02
    iv = widened(math.sqrt(lo * hi), lo, hi, RunNoise(0.0, "none"), (1, 1), 0.95)
    assert (iv.low, iv.high) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))


def test_a_busy_floor_on_the_baseline_mirrors_one_on_the_current_side():
    """The floor is per side: baseline b busy against current c is the mirror image (reciprocal ratio and
    bounds) of c as the baseline against b busy as the current."""
    b, c = [1.0, 1.1], [0.8, 0.85]
    a = between_runs(b, c, 0.95, (RUN_NOISE_BUSY, 0.0))
    m = between_runs(c, b, 0.95, (0.0, RUN_NOISE_BUSY))
    assert a.ratio == pytest.approx(1 / m.ratio, rel=1e-12)
    assert a.low == pytest.approx(1 / m.high, rel=1e-12) and a.high == pytest.approx(1 / m.low, rel=1e-12)
    assert a.high / a.low > 10  # the floor (sd 0.9) is in it: far wider than the runs' own spread


def test_a_trial_failing_on_both_sides_does_not_refuse_the_others():
    """Trial A ok on both sides (three runs a side, the same steps), trial B failed on both: A is compared (no
    change); B's no-data row does not turn the comparison into "nothing compared"."""
    def side(tag):
        return [*(bench_record("A", repeat=r, run_id=f"{tag}{r}") for r in range(3)),
                bench_record("B", status="oom", run_id=f"{tag}0")]
    base, cur = side("b"), side("c")
    cmp = compare(base, cur)
    a_rows = [r for r in cmp.rows if r.trial.startswith("A ")]
    assert a_rows and {str(r.decision) for r in a_rows} == {"no change"}, cmp.rows
    assert cmp.exit_code != 2


def test_paired_interval_is_the_t_interval_of_the_log_ratios():
    """Four pair ratios: geometric mean and exp(mean log +- t(0.975, 3) sd / sqrt(4)) of the logs."""
    ratios = [0.91, 0.93, 0.945, 0.92]
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    p = Paired.of(ratios, 0.95)
    assert p.ratio == pytest.approx(math.exp(mean), rel=1e-12)
    assert math.log(p.ci_low) == pytest.approx(mean - half, abs=T_QUANTILE_REL * half)
    assert math.log(p.ci_high) == pytest.approx(mean + half, abs=T_QUANTILE_REL * half)
