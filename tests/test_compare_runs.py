"""vitbench compare and the noise between runs (vitbench.compare.runs): one run per side assumes the host's
between-run spread, several runs per side are the units; exit code 3 for undecided, as `vitbench ab`."""

from __future__ import annotations

import math

import numpy as np
from test_compare import bench_record, result_set, steps, write_jsonl

from vitbench.compare import EXIT_INCONCLUSIVE, compare
from vitbench.compare.runs import RUN_NOISE_BUSY, RUN_NOISE_QUIET, assumed_noise, runs_needed


def one_run(rng, load: float | None, factor: float = 1.0, run_id: str = "r", models=("A", "B")) -> list:
    """One sweep's records: each trial one run whose speed is x `factor` (the run's state), its rows recording
    `load` other cores (None: not recorded, as rows older than the field)."""
    out = []
    for m in models:
        rec = bench_record(m, (np.array(steps(rng)) * factor).tolist(), run_id=run_id)
        if load is not None:
            rec.metrics["other_load_cores"] = load
        out.append(rec)
    return out


def test_the_floor_follows_the_host_state_the_rows_recorded():
    rng = np.random.default_rng(0)
    quiet, busy, unknown = one_run(rng, 0.1), one_run(rng, 1.7), one_run(rng, None)
    assert assumed_noise(quiet, None).sd == RUN_NOISE_QUIET
    assert assumed_noise([*quiet, *busy], None).sd == RUN_NOISE_BUSY  # one busy row is enough
    assert "1.7 cores" in assumed_noise(busy, None).why
    assert assumed_noise(unknown, None).sd == RUN_NOISE_BUSY and "not record" in assumed_noise(unknown, None).why
    assert assumed_noise(busy, 0.02).sd == 0.02  # the user's own host figure wins
    cmp = compare(quiet, one_run(rng, 0.1, run_id="s"))
    assert all(f"between-run sd {RUN_NOISE_QUIET:g}" in r.method for r in cmp.rows), [r.method for r in cmp.rows]


def test_one_run_per_side_on_a_busy_host_makes_no_false_calls():
    """Independent runs of identical code whose speeds differ by the busy floor's spread (log-normal, sd
    RUN_NOISE_BUSY per run): a false regression or improvement needs |log ratio| beyond the interval's
    z sqrt(se_steps^2 + 2 sd^2) plus the threshold, at most P(|Z| > 1.96) = 5 % per trial; 200 seeds x 2 trials,
    binomial(400, 0.05) has mean 20 and sd 4.4, so 20 + 5 x 4.4 = 42 is the Z_STAT bound on false calls. (At the
    busy floor nothing short of ~12x can be decided from one run a side: all but a few are inconclusive.)"""
    false_calls, undecided = 0, 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        a = one_run(rng, 1.5, math.exp(rng.normal(0, RUN_NOISE_BUSY)), run_id="a")
        b = one_run(rng, 1.5, math.exp(rng.normal(0, RUN_NOISE_BUSY)), run_id="b")
        cmp = compare(a, b, n_boot=500)
        false_calls += sum(r.decision in ("regression", "improvement") for r in cmp.rows)
        undecided += cmp.exit_code == EXIT_INCONCLUSIVE
    assert false_calls <= 42, false_calls
    assert undecided >= 150, undecided  # mostly said plainly: one run per side cannot settle 5 % here


def test_a_real_slowdown_is_never_no_change_with_one_run_per_side():
    """10 % slower, one run a side, busy rows: "no change" needs the whole interval above 0.95, i.e. a measured
    ratio above 0.95 exp(1.96 sqrt(2) RUN_NOISE_BUSY) = 1.89 where the truth is 0.909, a log gap of 0.73. With the
    runs' true spread half the floor (the floor is the noisiest trial's measured spread; docs/compare.md) the
    difference of two runs has sd sqrt(2) x 0.125 = 0.18, so that gap is a 4.2-sd draw (p ~ 1e-5): never here.
    (At a true spread equal to the floor it is a 2.1-sd draw, ~2 %: a host noisier than the floor needs its own
    --run-noise.)"""
    sd = RUN_NOISE_BUSY / 2
    for seed in range(100):
        rng = np.random.default_rng(seed)
        a = one_run(rng, 1.5, math.exp(rng.normal(0, sd)), run_id="a")
        b = one_run(rng, 1.5, 1.1 * math.exp(rng.normal(0, sd)), run_id="b")
        assert "no change" not in {r.decision for r in compare(a, b, n_boot=500).rows}


def test_several_runs_per_side_are_the_units():
    """Three runs a side with 5 % spread between runs: Welch's interval holds that spread (the steps' own
    bootstrap, 3 x 50 steps at 3 % jitter, would be ~4x narrower); a 20 % slowdown is still decided."""
    rng = np.random.default_rng(4)
    base = result_set(rng, models=("A",), run_noise=0.05)
    cur = result_set(rng, models=("A",), run_noise=0.05, run_id="run2")
    row = compare(base, cur).rows[0]
    assert row.method.startswith("runs: 3/3, Welch t")
    slow = result_set(rng, models=("A",), run_noise=0.05, run_id="run3", scale=1.25)
    assert compare(base, slow).rows[0].decision == "regression"


def test_several_busy_runs_are_held_to_the_busy_floor():
    """Runs of one busy spell agree with each other, not with a quiet baseline: two busy runs a side 1 % apart,
    40 % slower than three quiet ones (the QA run's `R-Micro infer 0.580 [0.540, 0.622] regression`, identical
    code).
    Held to the busy floor (RUN_NOISE_BUSY, a known sd: the normal quantile), the interval is
    exp(+/- 1.96 sqrt(0.9^2 / 2 + s_b^2 / 3)) ~ x/ 3.5 about 0.6: inconclusive. The same rows quiet: decided. The
    width moves smoothly as a side's own spread crosses the floor; a memory (no speed) is never held to it."""
    from vitbench.compare.runs import between_runs

    rng = np.random.default_rng(5)

    def runs(n: int, load: float, factor: float, side: str) -> list:
        out = []
        for i in range(n):
            rec = bench_record("A", (np.array(steps(rng)) * factor * (1 + 0.01 * i)).tolist(), repeat=i,
                               run_id=side)
            rec.metrics["other_load_cores"] = load
            out.append(rec)
        return out

    quiet, busy = runs(3, 0.1, 1.0, "q"), runs(2, 1.5, 1.65, "b")
    row = compare(quiet, busy).rows[0]
    assert row.decision == "inconclusive" and "held to the busy floor (between-run sd" in row.method, row
    assert row.ci_low < 0.6 * math.exp(-1.96 * 0.9 / math.sqrt(2)) * 1.2 and row.ci_high > 1, row
    assert compare(quiet, runs(2, 0.1, 1.65, "c")).rows[0].decision == "regression"
    iv = between_runs([1.0, 1.0], [0.6, 0.61], 0.95, (0.0, RUN_NOISE_BUSY))  # the floor's own arithmetic
    se = math.sqrt(RUN_NOISE_BUSY ** 2 / 2)
    assert math.isclose(math.log(iv.high / iv.ratio), 1.959964 * se, rel_tol=1e-6)

    def width(sd: float) -> float:  # both sides busy, 2 runs each, their own spread sd (log)
        a, b = [math.exp(sd / math.sqrt(2)), math.exp(-sd / math.sqrt(2))], [1.0, 1.0]
        iv = between_runs(a, b, 0.95, (RUN_NOISE_BUSY, RUN_NOISE_BUSY))
        return math.log(iv.high / iv.low)
    widths = [width(sd) for sd in np.linspace(0.85, 0.95, 11)]
    assert all(0 <= b - a < 0.5 for a, b in zip(widths, widths[1:])), widths  # was a jump of 8x at the floor
    mem = [bench_record("A", steps(rng), repeat=i, run_id=s) for s in "xy" for i in range(3)]
    for i, r in enumerate(mem):
        r.metrics.update(other_load_cores=1.5, peak_mem_mib=(100.0 if i < 3 else 180.0) + i % 3)  # some spread
    row = next(r for r in compare(mem[:3], mem[3:], metrics=["peak_mem_mib"]).rows if r.metric == "peak_mem_mib")
    assert row.decision == "regression", row


def test_cli_exit_code_three_and_run_noise_option(tmp_path, cli):
    rng = np.random.default_rng(1)
    a = write_jsonl(tmp_path / "a.jsonl", one_run(rng, 1.5, run_id="a"))
    b = write_jsonl(tmp_path / "b.jsonl", one_run(rng, 1.5, run_id="b"))
    r = cli("compare", a, b)
    assert r.exit_code == 3 and "INCONCLUSIVE" in r.output, r.output
    r = cli("compare", a, b, "--run-noise", "0")  # the user states a noiseless host: decided on the steps
    assert r.exit_code == 0, r.output
    assert cli("compare", a, a).exit_code == 0  # the same runs on both sides: no between-run noise
    for bad in ("-0.1", "nan", "5", "inf"):
        r = cli("compare", a, b, "--run-noise", bad)
        assert r.exit_code == 2 and "--run-noise" in r.output, (bad, r.output)


def test_runs_needed_follows_the_sample_size_formula():
    # n = 2 ((1.96 + 0.84) sd / log(0.95 / 0.90))^2: at sd 0.05, 2 (2.80 x 0.05 / 0.0541)^2 = 13.4 -> 14
    assert runs_needed(0.05, 0.10) == 14
    assert runs_needed(0.10, 0.10) > 4 * runs_needed(0.05, 0.10) - 4  # quadratic in the noise
    assert runs_needed(0.05, 0.05) > runs_needed(0.05, 0.10)


def test_one_rule_reads_the_recorded_load_and_each_reader_says_which_way_a_missing_one_errs():
    """vitbench.measure.load.busy: a number of at least BUSY_CORES is busy (a bool is no number); where none was
    recorded, the one-run floor assumes busy, the several-runs floor its side's measured spread, ab a busy pair."""
    from vitbench.compare.runs import busy_floor
    from vitbench.measure.load import BUSY_CORES, busy

    assert busy(BUSY_CORES, missing=False) and not busy(BUSY_CORES - 0.01, missing=True)
    assert busy(None, missing=True) and not busy(None, missing=False) and busy(True, missing=True)
    assert not busy(True, missing=False) and not busy(math.nan, missing=False)
    rng = np.random.default_rng(1)
    assert busy_floor(one_run(rng, None)) == 0.0 and busy_floor(one_run(rng, 1.0)) == RUN_NOISE_BUSY
