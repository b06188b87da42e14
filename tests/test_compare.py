"""vitbench compare: decisions on synthetic records (no measurement code), exit codes, JSON shape, normalising."""

from __future__ import annotations

import copy
import itertools
import dataclasses
import json

import numpy as np
import pytest
from records import record, with_fields

from vitbench.compare import compare, compare_paths, inject_slowdown, load_records, to_benchmark_json, to_markdown
from vitbench.compare.decide import decide
from vitbench.compare.match import match_key
from vitbench.errors import ConfigError
from tolerances_stat import Z_STAT, f64, median_sd

STEP_S = 0.010  # synthetic median step time of the baseline (s)
STEPS, STEP_CV, SPIKE_P = 50, 0.03, 0.03  # a record's synthetic steps: how many, their jitter, the spikes' share


def steps(rng: np.random.Generator, n: int = STEPS, scale: float = 1.0, cv: float = STEP_CV) -> list[float]:
    """Per-step times like a real run: log-normal jitter plus ~3 % slow outlier steps (GC, a neighbour)."""
    x = STEP_S * scale * rng.lognormal(0.0, cv, n)
    spikes = rng.random(n) < SPIKE_P
    x[spikes] *= rng.uniform(1.2, 2.0, spikes.sum())
    return x.tolist()


_SWEEPS = itertools.count(1)  # the run ids of records made without one: each a sweep of its own, as in a store
OWN_SWEEP = "(a sweep of its own)"  # bench_record's default run id: a fresh one (None and "" stay: no run id)


def bench_record(model: str = "ViT-Nano/4", step_s: list[float] | None = None, repeat: int = 0, batch: int = 8,
                 run_id: str | None = OWN_SWEEP, env: dict | None = None, status: str = "ok", **cfg) :
    """A record shaped like vitbench.trial.run_trial(bench) output, built without measuring anything; without a
    `run_id`, the run of a sweep of its own."""
    run_id = f"run{next(_SWEEPS)}" if run_id == OWN_SWEEP else run_id
    trial = {"model": model, "backend": "torch", "task": "infer", "device": "cpu", "resolution": 32,
             "batch_size": batch, "precision": "fp32", "compile": False, "seed": 0, "threads": None,
             "warmup_steps": 3, "min_steps": 10, "min_seconds": 1.0, "max_seconds": 60.0, **cfg}
    if status == "ok":
        step_s = step_s if step_s is not None else steps(np.random.default_rng(repeat))
        med = float(np.median(step_s))
        metrics = {"img_per_s": batch / med, "step_ms_median": med * 1e3, "batch_size_achieved": batch,
                   "batch_size_requested": batch, "peak_mem_mib": 100.0}
        raw = {"step_s": step_s, "warmup_s": [med] * 3}
        rec = record("bench", dict(trial), metrics=metrics, raw=raw, env=env or {"torch": "2.4.0"})
    else:
        rec = record("bench", dict(trial), status=status, env=env or {"torch": "2.4.0"},
                     error={"type": "OutOfMemoryError", "message": "CUDA out of memory", "tail": None})
    return with_fields(rec, key=f"{model}-{cfg}-{repeat}", study="t", run_id=run_id, repeat=repeat, trial=trial)


def calibration_record(tflops: list[float], run_id: str = "run1", env: dict | None = None) -> dict:
    trial = {"model": "-", "backend": "torch", "task": "calibration", "device": "cpu", "precision": "fp32",
             "threads": None, "matmul_n": 1024, "seconds": 0.25, "reps": len(tflops)}
    rec = record("calibration", dict(trial), metrics={"matmul_tflops_per_s": float(np.median(tflops))},
                 raw={"matmul_tflops_per_s": list(tflops)}, env=env or {"torch": "2.4.0"})
    return with_fields(rec, key=None, study="t", run_id=run_id, repeat=0, trial=trial)


def result_set(rng: np.random.Generator, models=("ViT-Nano/4", "R-Nano"), repeats: int = 3, scale: float = 1.0,
               run_noise: float = 0.0, step_noise: float = 0.0, run_id: str | None = None) -> list[dict]:
    """Interleaved repeats of each model; `run_noise`: each repeat's time x U(1 -/+ run_noise) (a machine state),
    `step_noise`: each step x U(1 -/+ step_noise). One sweep (one run id, unless given) a call."""
    run_id = run_id or f"run{next(_SWEEPS)}"
    out = []
    for r in range(repeats):
        for m in models:
            x = np.array(steps(rng, scale=scale)) * rng.uniform(1 - run_noise, 1 + run_noise)
            x *= rng.uniform(1 - step_noise, 1 + step_noise, x.size)
            out.append(bench_record(m, x.tolist(), repeat=r, run_id=run_id))
    return out


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return str(path)


# -------------------------------------------------------------------------------------------------------------
# Decisions
# -------------------------------------------------------------------------------------------------------------
def test_identical_sets_no_regression():
    base = result_set(np.random.default_rng(0))
    cmp = compare(base, base)
    assert cmp.exit_code == 0
    assert [r.decision for r in cmp.rows] == ["no change", "no change"]
    for r in cmp.rows:
        assert r.ratio == 1.0  # exact: the same deterministic point estimate (medians, means) on the same data
        assert r.ci_low <= 1.0 <= r.ci_high
        assert r.repeats == (3, 3) and r.samples == (150, 150)
    assert not cmp.unmatched_baseline and not cmp.unmatched_current and not cmp.env_diff


def test_ten_percent_slowdown_in_raw_timings_is_a_regression():
    base = result_set(np.random.default_rng(0))
    slow = inject_slowdown(base, 1.10)  # every raw step 10 % longer; derived metrics follow
    assert slow[0].raw["step_s"][0] == base[0].raw["step_s"][0] * 1.1  # exact: inject_slowdown's own operation
    assert slow[0].metrics["img_per_s"] == base[0].metrics["img_per_s"] / 1.1
    cmp = compare(base, slow)
    assert cmp.exit_code == 1
    assert {r.decision for r in cmp.rows} == {"regression"}
    for r in cmp.rows:
        # no sampling in the point (the same steps x 1.1, a monotone map: the same median steps): rounding only.
        # Each side: a sample batch / (s x 1.1) 2 roundings, the median's average 2, the mean of 3 repeats 3; the
        # ratio 1, the literal 1 / 1.1 2: 8 in all for a side (f64 doubles for both)
        assert r.ratio == f64(1 / 1.1, roundings=8)
        assert r.ci_high < 0.95
    # and the other way round it is an improvement, which never fails the check
    back = compare(slow, base)
    assert back.exit_code == 0 and {r.decision for r in back.rows} == {"improvement"}


def test_ten_percent_slowdown_detected_across_independent_runs():
    """Power: independently measured (noisy) runs 10 % slower are called a regression in >= 95 % of seeds."""
    hits = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        base = result_set(rng, run_noise=0.01)
        cur = result_set(rng, scale=1.10, run_noise=0.01)
        hits += all(r.decision == "regression" for r in compare(base, cur, n_boot=1000).rows)
    assert hits >= 95, hits


@pytest.mark.parametrize("noise", ["whole run", "per repeat", "per step"])
def test_five_percent_noise_is_not_a_regression(noise):
    """+-5 % random noise at threshold 5 %: no regression in >= 95 % of 200 seeded cases. Noise kinds: the whole
    current run x U(0.95, 1.05) (another machine state; one repeat, as a cheap CI job would run), each of 3
    repeats x U(0.95, 1.05), or each step x U(0.95, 1.05). (A rule on the point estimate alone raises 3-4 % false
    alarms on the first kind; requiring the whole CI past the threshold raises none here.)"""
    false_alarms = 0
    for seed in range(200):
        rng = np.random.default_rng(1000 + seed)
        if noise == "whole run":
            base = result_set(rng, repeats=1)
            cur = inject_slowdown(result_set(rng, repeats=1), rng.uniform(0.95, 1.05))
        elif noise == "per repeat":
            base, cur = result_set(rng), result_set(rng, run_noise=0.05)
        else:
            base, cur = result_set(rng), result_set(rng, step_noise=0.05)
        false_alarms += compare(base, cur, threshold=0.05, n_boot=1000).exit_code == 1
    assert false_alarms <= 10, false_alarms


def test_decide_rule_needs_the_whole_interval():
    """compare's and ab's one rule: no change needs the whole interval on the good side of the threshold."""
    assert decide(0.88, 0.92, 0.05, higher_is_better=True) == "regression"
    assert decide(0.85, 0.97, 0.05, higher_is_better=True) == "inconclusive"
    assert decide(0.93, 1.03, 0.05, higher_is_better=True) == "inconclusive"  # 5 % worse is not excluded
    assert decide(0.96, 1.03, 0.05, higher_is_better=True) == "no change"
    assert decide(0.96, 1.30, 0.05, higher_is_better=True) == "no change"  # not worse; not surely better by 5 %
    assert decide(1.08, 1.12, 0.05, higher_is_better=True) == "improvement"
    assert decide(None, None, 0.05, higher_is_better=True) == "inconclusive"  # no interval: nothing decided
    # smaller is better (memory): 10 % more is a regression
    assert decide(1.08, 1.12, 0.05, higher_is_better=False) == "regression"
    assert decide(0.88, 0.92, 0.05, higher_is_better=False) == "improvement"
    assert decide(0.97, 1.07, 0.05, higher_is_better=False) == "inconclusive"
    assert decide(0.90, 1.04, 0.05, higher_is_better=False) == "no change"
    # the paired gate (vitbench ab) decides by the same function
    from vitbench.compare.paired import Paired
    assert Paired(( ), 1.0, 0.93, 1.03).decision(0.05) == "inconclusive"
    assert Paired((), 1.0, 0.96, 1.03).decision(0.05) == "no change"


def test_repeats_pool_and_drift_between_repeats_widens_the_interval():
    rng = np.random.default_rng(3)
    tight = result_set(rng, models=("A",), repeats=4)
    drifty = result_set(rng, models=("A",), repeats=4, run_noise=0.15)
    w_tight = [(r.ci_high - r.ci_low) for r in compare(tight, result_set(rng, models=("A",), repeats=4,
                                                                          run_id="run2")).rows][0]
    cmp = compare(drifty, result_set(rng, models=("A",), repeats=4, run_noise=0.15, run_id="run2"))
    assert cmp.rows[0].method.startswith("runs: 4/4, Welch t")
    w_drift = cmp.rows[0].ci_high - cmp.rows[0].ci_low
    assert cmp.rows[0].repeats == (4, 4)
    assert w_drift > 2 * w_tight


def test_latest_record_per_key_wins_and_failed_trials_are_rows():
    base = [bench_record("A", repeat=0), bench_record("B", repeat=0)]
    timeout = bench_record("B", repeat=0, status="timeout")
    oom = bench_record("B", status="oom")  # made after the timeout: the later one, whatever the clock says
    cur = [bench_record("A", repeat=0), timeout, oom]
    cmp = compare(base, cur)
    b_rows = [r for r in cmp.rows if r.trial.startswith("B ")]
    assert [(r.metric, r.decision) for r in b_rows] == [("status", "failed")]
    assert "oom" in b_rows[0].note and cmp.exit_code == 1
    # a later ok record for the same key and repeat (a resumed run) supersedes the failures
    fixed = bench_record("B", repeat=0)
    # (the same steps on both sides, stated free of run-to-run noise: the decision rests on the records chosen)
    assert compare(base, [*cur, fixed], run_noise=0).exit_code == 0
    # a trial that failed in the baseline but runs now is not a regression
    assert compare(cur, base, run_noise=0).exit_code == 0


def test_unmatched_trials_are_listed_not_dropped():
    rng = np.random.default_rng(0)
    base = result_set(rng, models=("A", "B"))
    cur = result_set(rng, models=("A", "C"))
    cur += [bench_record("A", repeat=0, batch=16)]  # another batch size is another trial
    cmp = compare(base, cur)
    assert [r.trial for r in cmp.rows] == ["A infer torch bs8 32px fp32 cpu"]
    assert [lbl for lbl, _ in cmp.unmatched_baseline] == ["B infer torch bs8 32px fp32 cpu"]
    assert sorted(lbl for lbl, _ in cmp.unmatched_current) == ["A infer torch bs16 32px fp32 cpu",
                                                                "C infer torch bs8 32px fp32 cpu"]
    md = to_markdown(cmp)
    assert "Only in baseline" in md and "B infer torch bs8" in md and "C infer torch bs8" in md


def test_matched_trials_without_a_selected_metric_are_listed():
    trial = {"model": "A", "backend": "torch", "task": "flops", "resolution": 32, "num_classes": 10}
    fl = record("flops", dict(trial), metrics={"gflops": 0.1, "params_m": 0.05}, key="fl", repeat=0, trial=trial)
    cmp = compare([bench_record("A"), fl], [bench_record("A"), fl])
    assert [r.metric for r in cmp.rows] == ["img_per_s"]
    from vitbench.compare.comparison import default_metrics  # every task's speed metric (serve's too)

    assert {"img_per_s", "max_batch_size"} <= set(default_metrics())
    assert cmp.not_compared == [("A flops torch 32px",
                                 f"flops records carry none of: {', '.join(default_metrics())}")]
    assert "Matched, no metric to compare" in to_markdown(cmp)


def test_matching_ignores_environment_but_shows_it():
    base = [bench_record("A", env={"torch": "2.4.0", "device_name": "cpu", "cpu_model": "Xeon"})]
    cur = [bench_record("A", env={"torch": "2.5.1", "device_name": "cpu", "cpu_model": "EPYC"})]
    cmp = compare(base, cur, run_noise=0)  # the same steps, no run-to-run noise stated: matched and no change
    assert len(cmp.rows) == 1 and cmp.rows[0].decision == "no change"
    assert cmp.env_diff == [("torch", "2.4.0", "2.5.1"), ("cpu_model", "Xeon", "EPYC")]
    assert match_key(base[0]) == match_key(cur[0])


def test_config_difference_and_method_version_do_not_match():
    a = bench_record("A")
    b = bench_record("A", precision="bf16")
    with pytest.raises(ConfigError, match=r"no trial of current matches.*precision \('fp32' vs 'bf16'\); "
                                          r"--ignore precision would match"):
        compare([a], [b])
    old = dataclasses.replace(a, method_version=0)
    with pytest.raises(ConfigError, match="method_version"):
        compare([old], [a])
    # --ignore lets a field differ on purpose
    c = bench_record("A", threads=4)
    assert len(compare([a], [c], ignore=("threads",)).rows) == 1
    with pytest.raises(ConfigError, match="--ignore thread: no trial has this field; fields: .*threads"):
        compare([a], [c], ignore=("thread",))  # misspelt: it would have matched nothing more, silently


def test_an_ignored_field_never_pools_two_trials_of_one_side():
    """`--ignore threads` over a baseline holding threads 1 and threads 2 pooled them as two runs of one trial:
    their mean against the current side's threads-1 trial read as a regression (0.63 [0.44, 0.91], exit 1, on
    the project's own baseline). Refused, naming the side, the field and its values; one value per side
    matches as before."""
    fast = [s / 2 for s in steps(np.random.default_rng(1))]
    base = [bench_record("A", threads=1), bench_record("A", threads=2, step_s=fast)]
    with pytest.raises(ConfigError, match=r"--ignore threads: baseline holds trials of threads 1, 2 that would "
                                          r"pool as repeats of one \(first: A infer torch"):
        compare(base, [bench_record("A", threads=1)], ignore=("threads",))
    assert len(compare(base[:1], [bench_record("A", threads=2)], ignore=("threads",)).rows) == 1


def test_the_markdown_says_a_lower_is_better_metrics_rule_the_other_way_round():
    """Peak memory 100 -> 130 MiB is a regression with the interval wholly above 1 + threshold (decide.decide
    mirrors the rule for a lower-is-better metric); the PR comment's rule line said only 'regression: the whole
    interval below 1 - threshold', which read the 1.3 row as a pass. Said where such a metric is in the table."""
    def with_mem(rec, mib):
        return dataclasses.replace(rec, metrics={**rec.metrics, "peak_mem_mib": mib})

    base = [with_mem(bench_record("A", repeat=r), 100.0) for r in range(2)]
    cur = [with_mem(bench_record("A", repeat=r), 130.0) for r in range(2)]
    cmp = compare(base, cur, metrics=("img_per_s", "peak_mem_mib"))
    mem = next(r for r in cmp.rows if r.metric == "peak_mem_mib")
    assert mem.decision == "regression" and mem.ci_low > 1.05
    md = to_markdown(cmp)
    assert "A lower-is-better metric (peak_mem_mib) the other way round: regression, the whole interval above " \
           "1 + threshold" in md
    assert "lower-is-better" not in to_markdown(compare(base, cur))  # img/s alone: the one rule


def test_max_batch_size_compared_without_step_samples():
    def mb(v, repeat=0):
        trial = {"model": "A", "backend": "torch", "task": "max_batch", "device": "cpu", "resolution": 32,
                 "precision": "fp32", "mode": "infer"}
        return record("max_batch", dict(trial), metrics={"max_batch_size": v, "peak_mem_mib": 50.0},
                      key=f"mb{repeat}", repeat=repeat, trial=trial)
    cmp = compare([mb(64)], [mb(32)])
    assert [(r.metric, r.decision, r.method) for r in cmp.rows] == [("max_batch_size", "regression",
                                                                     "single value")]
    assert compare([mb(64)], [mb(64)]).exit_code == 0
    assert compare([mb(64)], [mb(63)]).exit_code == 0  # 1.6 % is under the 5 % threshold


def test_a_largest_batch_at_the_search_cap_is_said_to_be_a_lower_bound():
    """Both sides at the cap (128 fit, the search went no higher) are alike only up to it: the verdict says so;
    one side at it says which."""
    def mb(v, capped, repeat=0):
        trial = {"model": "A", "backend": "torch", "task": "max_batch", "device": "cpu", "resolution": 32,
                 "precision": "fp32", "mode": "infer"}
        return record("max_batch", dict(trial), metrics={"max_batch_size": v, "capped": capped},
                      key=f"mb{repeat}", repeat=repeat, trial=trial)
    both = compare([mb(128, True)], [mb(128, True)]).rows[0]
    assert both.decision == "no change" and "both sides capped" in both.note
    assert "\u2265 128 vs \u2265 128" in both.note and "unknown past it" in both.note
    dropped = compare([mb(128, True)], [mb(64, False)]).rows[0]
    assert dropped.decision == "regression" and dropped.note == "baseline capped: its max_batch_size is a lower " \
        "bound (\u2265 128)"
    assert compare([mb(64, False)], [mb(64, False)]).rows[0].note == ""
    # one repeat of two at the cap: the side's median rests on a lower bound, so it is one too
    some = compare([mb(128, True), mb(120, False, repeat=1)], [mb(64, False)]).rows[0]
    assert some.note.startswith("baseline capped: its max_batch_size is a lower bound"), some.note


def test_a_lower_bound_is_marked_beside_its_value_in_every_format():
    """A largest batch at the search's cap was '128' in the baseline/current cells and the JSON's value and
    baseline, the bound said only in the table's note (which the JSON does not carry): shown '\u2265 128' now,
    as the history shows it, and the JSON's extra says the value is a lower bound."""
    from vitbench.compare import row_cells

    def mb(v, capped, repeat=0):
        trial = {"model": "A", "backend": "torch", "task": "max_batch", "device": "cpu", "resolution": 32,
                 "precision": "fp32", "mode": "infer"}
        return record("max_batch", dict(trial), metrics={"max_batch_size": v, "capped": capped},
                      key=f"mb{repeat}", repeat=repeat, trial=trial)
    cmp = compare([mb(128, True)], [mb(256, True)])
    cells = row_cells(cmp.rows[0])
    assert cells["baseline"] == "\u2265 128" and cells["current"] == "\u2265 256", cells
    (entry,) = to_benchmark_json(cmp)
    assert "baseline: \u2265 128" in entry["extra"] and "value: a lower bound (\u2265)" in entry["extra"], entry
    assert "| \u2265 128 | \u2265 256 |" in to_markdown(cmp)
    plain = compare([mb(64, False)], [mb(64, False)])
    assert row_cells(plain.rows[0])["baseline"] == "64"
    assert "lower bound" not in to_benchmark_json(plain)[0]["extra"]


def test_an_ok_row_without_its_measure_or_with_an_impossible_one_is_never_a_pass():
    """Rows vitbench never writes (edited, or another tool's): a current ok row without the img/s the baseline
    has fails the check (before: 'no data', exit 0); a negative or overflowing speed, a step time <= 0, a negative
    size is refused naming the row (before: a verdict on a ratio of -1), and so is a calibration of 0 under
    --normalize (before: ZeroDivisionError), or one below the least a machine measures (MIN_TFLOPS)."""
    base = bench_record("A")
    bare = dataclasses.replace(base, metrics={k: v for k, v in base.metrics.items() if k != "img_per_s"},
                               raw={}, run_id="run2")
    cmp = compare([base], [bare])
    assert [(r.metric, str(r.decision)) for r in cmp.rows] == [("img_per_s", "failed")] and cmp.exit_code == 1
    assert "carry no img_per_s" in cmp.rows[0].note
    assert compare([bare], [base]).exit_code == 0  # the baseline lacking it: nothing to judge against
    for bad_step in (-0.01, 0.0, 1e-320):
        odd = dataclasses.replace(base, raw={"step_s": [*base.raw["step_s"][:-1], bad_step]}, run_id="run2")
        with pytest.raises(ConfigError, match="img_per_s (nan|inf) is not a finite number >= 0.*edited"):
            compare([base], [odd])
    negative = dataclasses.replace(base, metrics={**base.metrics, "batch_size_achieved": -8}, run_id="run2")
    with pytest.raises(ConfigError, match="trial A-.*img_per_s -.* is not a finite number >= 0"):
        compare([base], [negative])
    for tflops in (0.0, 1e-7):
        cal = [base, calibration_record([0.1, tflops, 0.1])]
        with pytest.raises(ConfigError, match=f"matmul_tflops_per_s {tflops!r} is not a finite number >= 1e-06, "
                                              "which vitbench never records"):
            compare(cal, cal, normalize=True)


# -------------------------------------------------------------------------------------------------------------
# Normalisation by the calibration workload
# -------------------------------------------------------------------------------------------------------------
def test_normalize_refuses_a_ratio_the_calibrations_overflow():
    """Calibrations within the row check's bounds (MIN_TFLOPS to MAX_TFLOPS) that divide a speed no machine gives
    (step times of 1e-301 s, a row edited or another tool's) past a float's range: a speed of 8e304 over 1e-6 is
    inf (before: a ZeroDivisionError traceback, or a verdict on it); 8e301 over 1e-6 against 800 over 1e5 a ratio
    of 1e312, its machine factor 0. Each is refused, naming the numbers."""
    from vitbench.tasks.calibration import MAX_TFLOPS, MIN_TFLOPS

    rng = np.random.default_rng(5)
    runs = result_set(rng, repeats=1)
    top, least = [calibration_record([MAX_TFLOPS] * 3)], [calibration_record([MIN_TFLOPS] * 3)]
    absurd = result_set(rng, repeats=1, scale=1e-302)
    for a, b in ((runs + top, absurd + least), (absurd + least, runs + top)):
        with pytest.raises(ConfigError, match=r"--normalize: img_per_s 8\.\d*e\+304 divided by the (current|"
                                              r"baseline) results' calibration 1e-06 is inf, not a finite "
                                              "number > 0"):
            compare(a, b, normalize=True)
    fast = result_set(np.random.default_rng(5), repeats=1, scale=1e-299)
    with pytest.raises(ConfigError, match="--normalize: .*img_per_s: the calibrations give ratio inf, .*machine "
                                          "0, not each a finite number > 0"):
        compare(runs + top, fast + least, normalize=True)
    assert compare(runs + top, runs + top, normalize=True).exit_code == 0


def test_a_plain_ratio_past_a_floats_range_is_refused():
    """Speeds that each pass the row check (steps of 3e10 s and of 1e-301 s: rows no machine wrote) whose ratio
    overflows: before, an improvement of inf, exit 0."""
    rng = np.random.default_rng(5)
    slow, fast = result_set(rng, repeats=1, scale=1e12), result_set(rng, repeats=1, scale=1e-299)
    with pytest.raises(ConfigError, match="img_per_s: the two sides give ratio inf.*not each a finite number: "
                                          "values no machine measured"):
        compare(slow, fast)
    assert compare(slow, slow).exit_code == 0 and compare(fast, fast).exit_code == 0


def test_normalize_divides_out_a_slower_machine():
    rng = np.random.default_rng(5)
    base = result_set(rng) + [calibration_record([1.00, 1.01, 0.99])]
    # the same code on a machine 30 % slower at everything: matmul and the model alike
    cur = inject_slowdown(result_set(rng), 1 / 0.7) + [calibration_record([0.70, 0.705, 0.695])]
    raw = compare(base, cur)
    assert raw.exit_code == 1
    norm = compare(base, cur, normalize=True)
    assert norm.exit_code == 0, to_markdown(norm)
    # the two sides sample independent steps: each point is the mean of 3 repeats' medians, the ratio's relative
    # sd sqrt(2) median_sd / sqrt(3) (tests/tolerances_stat.py); Z_STAT of those
    sampling = Z_STAT * np.sqrt(2 / 3) * median_sd(STEP_CV, STEPS, SPIKE_P)
    for r in norm.rows:
        assert r.ratio == pytest.approx(1.0, rel=sampling)
        # the calibrations' medians 0.70 / 1.00 exactly, divided out and back: no sampling, only roundings. Runs
        # are the units (3 a side): each ratio is exp(mean log current - mean log baseline), so the machine ratio
        # exp(d_raw - d_norm) carries the roundings of both d's on the logs' scale L = max |log point| (per d
        # and side: the division by the calibration 1, the log 1, the sum of 3 2, the mean 1; the difference 1:
        # 11 a d, 22 for both) and 3 relative ones (two exps, the ratio): 25 at 0.70 x max(L, 1)
        big = max(abs(np.log(r.baseline)), abs(np.log(r.current / 0.7)), 1.0)
        assert r.machine_ratio == f64(0.70, roundings=25, scale=0.70 * big)
        assert r.ratio_raw == pytest.approx(0.70, rel=sampling)
    # a real 2x slowdown of the harness on that slower machine is still caught after normalising
    assert compare(base, inject_slowdown(cur, 2.0), normalize=True).exit_code == 1


def test_normalize_uses_each_runs_own_calibration():
    rng = np.random.default_rng(6)
    cur = result_set(rng, models=("A",), repeats=1, run_id="fast") + [calibration_record([1.0], run_id="fast")]
    later = inject_slowdown(result_set(rng, models=("A",), repeats=1, run_id="slow"), 2.0)
    for r in later:
        r.repeat, r.key = 1, r.key + "-r1"
    cur += later + [calibration_record([0.5], run_id="slow")]
    base = result_set(rng, models=("A",), repeats=2, run_id="run1") + [calibration_record([1.0], run_id="run1")]
    cmp = compare(base, cur, normalize=True)
    assert not cmp.warnings  # every record found its own run's calibration
    # the slow run divided by its own 0.5: both sides are two runs of the same speed; each side's mean log holds
    # two runs' median sampling errors, so the ratio's relative sd is sqrt(2 / 2) median_sd: Z_STAT of those
    assert cmp.rows[0].ratio == pytest.approx(1.0, rel=Z_STAT * median_sd(STEP_CV, STEPS, SPIKE_P))
    assert cmp.rows[0].decision != "regression" and cmp.rows[0].method.startswith("runs: 2/2")


def test_normalize_picks_the_calibration_nearest_in_time():
    """One run with a calibration before each repeat round: each repeat is divided by its own round's."""
    rng = np.random.default_rng(8)
    base = result_set(rng, models=("A",), repeats=2)
    cals = [calibration_record([1.0]), calibration_record([1.0])]
    cals[0].started_at, cals[1].started_at = "2026-01-01T00:00:00+00:00", "2026-01-01T00:10:00+00:00"
    base[0].started_at, base[1].started_at = "2026-01-01T00:00:05+00:00", "2026-01-01T00:10:05+00:00"
    cur = copy.deepcopy(base)
    cur[1] = inject_slowdown([cur[1]], 2.0)[0]  # the machine ran at half speed during round 2 ...
    cur_cals = copy.deepcopy(cals)
    cur_cals[1].raw["matmul_tflops_per_s"] = [0.5]  # ... and its calibration saw it
    cmp = compare(base + cals, cur + cur_cals, normalize=True)
    # round 2 slowed 2x and divided by its calibration 0.5: the same point, up to roundings (a side: sample 2,
    # median 2, / calibration 1, mean of 2 repeats 2; the ratio 1: 8). The current side is a copy of the baseline's
    # runs (the same run ids and start times), so its ratios are exact: no interval between identical runs
    assert cmp.rows[0].ratio == f64(1.0, roundings=8) and cmp.rows[0].decision == "no change"
    assert cmp.rows[0].method == "the same runs on both sides"
    # unnormalised: (p1 + p2 / 2) / (p1 + p2) = 0.75 - d / 8 to first order, d = p2 / p1 - 1 the two repeats'
    # sampling difference (sd sqrt(2) median_sd)
    half = compare(base + cals, cur + cur_cals).rows[0].ratio
    assert half == pytest.approx(0.75, abs=Z_STAT * np.sqrt(2) * median_sd(STEP_CV, STEPS, SPIKE_P) / 8)


def test_normalize_without_calibration_is_bad_input():
    base = result_set(np.random.default_rng(0))
    with pytest.raises(ConfigError, match="no calibration record"):
        compare(base, base, normalize=True)


def test_normalize_of_a_runtime_trial_says_no_sweep_can_calibrate_it():
    """A deployment runtime times no matmul, so no sweep calibrates it: the message said "re-run the sweep",
    which can never help; it says why, and what to do instead."""
    base = result_set(np.random.default_rng(0))
    for rec in base:
        rec.config = {**rec.config, "backend": "onnxruntime"}
        rec.trial = {**rec.trial, "backend": "onnxruntime"} if rec.trial is not None else None
    with pytest.raises(ConfigError, match="backend 'onnxruntime' times no matmul of its own") as e:
        compare(base, base, normalize=True)
    assert "re-run" not in str(e.value).lower() and "without --normalize" in str(e.value)


# -------------------------------------------------------------------------------------------------------------
# Files, JSON shape, CLI exit codes
# -------------------------------------------------------------------------------------------------------------
def test_a_trial_whose_baseline_line_could_not_be_read_stops_the_gate(tmp_path):
    """A corrupt line in the baseline dropped that trial from the gate: "only in current (not compared)", exit
    0. Where the baseline has lines that could not be read and current has trials without a partner, compare
    stops (exit 2) naming the line; an unreadable line that hides no partner stays a warning."""
    recs = result_set(np.random.default_rng(0), models=("A", "B"), repeats=1)
    lines = [json.dumps(r.to_dict()) for r in recs]
    (tmp_path / "cur").mkdir()
    (tmp_path / "cur" / "results.jsonl").write_text("".join(x + "\n" for x in lines))
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "results.jsonl").write_text(lines[0] + "\n" + lines[1][:50] + "#\n")
    with pytest.raises(ConfigError, match=r"results.jsonl:2: skipped unparseable line.* 1 trial\(s\) of current "
                                          r"have no partner there \(first: B"):
        compare_paths(tmp_path / "base", tmp_path / "cur")
    (tmp_path / "base" / "results.jsonl").write_text("".join(x + "\n" for x in lines) + "garbage\n")
    cmp = compare_paths(tmp_path / "base", tmp_path / "cur")
    assert cmp.exit_code == 0 and "results.jsonl:3: skipped unparseable line" in cmp.warnings[0]


def test_load_records_reads_with_the_stores_rules(tmp_path):
    """One reader for sweep, report and compare: a torn line, garbage or a JSON object that is not a record is
    skipped with a warning naming file and line, every good record is kept; nothing readable is bad input."""
    recs = result_set(np.random.default_rng(0), models=("A",), repeats=2)
    d = tmp_path / "res"
    d.mkdir()
    f = d / "results.jsonl"
    f.write_text(json.dumps(recs[0].to_dict()) + "\n" + json.dumps(recs[1].to_dict())[:40])  # a torn last line
    warns: list[str] = []
    assert len(load_records(d, warns)) == 1 and "results.jsonl:2: skipped torn last line" in warns[0]
    assert len(load_records(f)) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n" + json.dumps(recs[0].to_dict()) + "\n" + '{"a": 1}\n')
    warns = []
    assert len(load_records(bad, warns)) == 1
    assert "bad.jsonl:1: skipped unparseable line" in warns[0] and "bad.jsonl:3" in warns[1]
    assert "not a vitbench record" in warns[1]
    with pytest.raises(ConfigError, match="does not exist"):
        load_records(tmp_path / "missing.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no records"):
        load_records(tmp_path / "empty")
    (tmp_path / "blank.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="no records"):
        load_records(tmp_path / "blank.jsonl")


def test_benchmark_json_shape():
    rng = np.random.default_rng(0)
    base = result_set(rng)
    cmp = compare(base, inject_slowdown(base, 1.1))
    out = to_benchmark_json(cmp)
    assert isinstance(out, list) and len(out) == 2
    for e in out:
        assert set(e) == {"name", "unit", "value", "range", "extra"}
        assert isinstance(e["name"], str) and e["unit"] == "img/s"
        assert isinstance(e["value"], float) and e["value"] > 0
        assert isinstance(e["extra"], str) and "decision: regression" in e["extra"]
    assert out[0]["name"] == "ViT-Nano/4 infer torch bs8 32px fp32 cpu - img_per_s"
    json.dumps(out)  # plain JSON


@pytest.fixture
def cli():
    from typer.testing import CliRunner

    from vitbench.cli import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["compare", *args])


def test_cli_exit_codes_and_formats(tmp_path, cli):
    rng = np.random.default_rng(0)
    base = result_set(rng) + [calibration_record([1.0, 1.0, 1.0])]
    b = write_jsonl(tmp_path / "base.jsonl", base)
    same = write_jsonl(tmp_path / "same.jsonl", base)
    slow = write_jsonl(tmp_path / "slow.jsonl", inject_slowdown(base, 1.1))
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json at all\n")

    r = cli(b, same)
    assert r.exit_code == 0, r.output
    assert "no regression" in r.output
    r = cli(b, slow, "--format", "md")
    assert r.exit_code == 1 and "**regression**" in r.output
    r = cli(b, slow, "--format", "json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert [set(e) for e in data] == [{"name", "unit", "value", "range", "extra"}] * 2
    assert cli(b, slow, "--threshold", "0.2").exit_code == 0  # a 9 % drop is within a 20 % threshold
    assert cli(b, same, "--normalize", "--inject-slowdown", "2.0").exit_code == 1  # the self-test fires
    for args in ([b, str(tmp_path / "missing.jsonl")], [b, str(garbage)], [b, same, "--format", "xml"],
                 [b, same, "--threshold", "-1"], [b, same, "--metric", "nope"],
                 [b, same, "--metric", "x" * 10**5]):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "error:" in r.output and "Traceback" not in r.output and len(r.output) < 4000
        assert "allowed:" in r.output or "--metric" not in args


def test_missing_baseline_trials_fail_unless_allowed(tmp_path, cli):
    """A sweep that died halfway: 3 of 4 baseline trials absent from current fail the check (exit 1), unless
    --allow-missing; trials only in current, or failed in the baseline too, never do."""
    rng = np.random.default_rng(0)
    base = result_set(rng, models=("A", "B", "C", "D"), repeats=1)
    half = [r for r in base if r.measured_config["model"] == "A"]
    b, cur = write_jsonl(tmp_path / "base.jsonl", base), write_jsonl(tmp_path / "cur.jsonl", half)
    cmp = compare(base, half)
    assert [lbl.split()[0] for lbl, _ in cmp.missing] == ["B", "C", "D"] and cmp.exit_code == 1
    assert compare(base, half, allow_missing=True).exit_code == 0
    r = cli(b, cur)
    assert r.exit_code == 1, r.output
    assert "INCOMPLETE" in r.output and "3 baseline trial(s) missing from current" in " ".join(r.output.split())
    r = cli(b, cur, "--allow-missing")
    assert r.exit_code == 0 and "allowed: --allow-missing" in " ".join(r.output.split()), r.output
    assert cli(cur, b).exit_code == 0  # more trials now than in the baseline: nothing is missing
    failed_before = [*half, bench_record("B", status="oom")]
    assert compare(failed_before, half).missing == [] and compare(failed_before, half).exit_code == 0


def test_nothing_compared_is_bad_input(tmp_path, cli):
    """Matched trials none of which carries a selected metric: exit 2 naming the metrics present, not a pass."""
    b = write_jsonl(tmp_path / "base.jsonl", result_set(np.random.default_rng(0), models=("A",), repeats=1))
    with pytest.raises(ConfigError, match="nothing compared: none of the 1 matched trial"):
        compare(load_records(b), load_records(b), metrics=("accuracy",))
    r = cli(b, b, "--metric", "accuracy")
    assert r.exit_code == 2 and "they carry img_per_s, peak_mem_mib" in " ".join(r.output.split()), r.output


def test_a_torn_line_is_skipped_with_one_clean_warning(tmp_path, cli):
    """compare reads with the store's rules (as report and sweep): the torn line is skipped, said once, without
    Python's warning format, and the rest is compared."""
    recs = result_set(np.random.default_rng(0), models=("A",), repeats=1)
    b = write_jsonl(tmp_path / "base.jsonl", recs)
    torn = tmp_path / "torn.jsonl"
    torn.write_text(json.dumps(recs[0].to_dict()) + "\n" + '{"key": "abc", "sta')
    r = cli(b, str(torn))
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if "torn last line" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "Warning:" not in r.output
    assert "store.py" not in r.output


def test_results_directories_pool_but_reruns_in_one_directory_supersede(tmp_path):
    """Rounds swept into round1/, round2/ add up as repeats (two sweeps: two run ids); a --force re-run inside one
    directory replaces; one run copied into two directories is one run (before: two repeats, and with no spread
    between them a zero-width interval)."""
    rng = np.random.default_rng(0)
    one = result_set(rng, models=("A",), repeats=1)
    for r in (1, 2):
        (tmp_path / "cur" / f"round{r}").mkdir(parents=True)
        write_jsonl(tmp_path / "cur" / f"round{r}" / "results.jsonl",
                    [dataclasses.replace(x, run_id=f"round{r}") for x in one])
        (tmp_path / "copied" / f"round{r}").mkdir(parents=True)
        write_jsonl(tmp_path / "copied" / f"round{r}" / "results.jsonl", one)
    assert compare_paths(tmp_path / "copied", tmp_path / "copied").rows[0].repeats == (1, 1)
    (tmp_path / "rerun").mkdir()
    write_jsonl(tmp_path / "rerun" / "results.jsonl", one + inject_slowdown(one, 2.0))  # same key, re-run
    pooled = compare_paths(tmp_path / "cur", tmp_path / "cur")
    assert pooled.rows[0].repeats == (2, 2)
    rerun = compare_paths(tmp_path / "cur", tmp_path / "rerun")
    # the same steps x 2 against themselves: roundings only (a side: sample 2, median 2, mean 2; the ratio 1)
    assert rerun.rows[0].repeats == (2, 1) and rerun.rows[0].ratio == f64(0.5, roundings=7)


def test_compare_paths_directory(tmp_path):
    rng = np.random.default_rng(0)
    d = tmp_path / "ci"
    d.mkdir()
    write_jsonl(d / "results.jsonl", result_set(rng))
    cmp = compare_paths(d, d, slowdown=2.0)
    assert cmp.exit_code == 1 and any("self-test" in w for w in cmp.warnings)


# -------------------------------------------------------------------------------------------------------------
# End to end: real tiny trials swept in two rounds (each with its calibration), then compared
# -------------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_end_to_end_sweep_rounds_then_compare(tmp_path, cli):
    import textwrap

    from vitbench.runner import run_study
    from vitbench.study import parse_study

    s = parse_study(textwrap.dedent("""
        name: e2e
        timeout_s: 240
        defaults: {batch_size: 4, threads: 1, warmup_steps: 1, min_steps: 5, min_seconds: 0.1, max_seconds: 2}
        axes:
          model: [ViT-Nano/4]
          task: [infer]
    """), "e2e.yaml")
    for r in (1, 2):
        assert run_study(s, tmp_path / "cur" / f"round{r}").statuses == {"ok": 1}
    cur = str(tmp_path / "cur")
    cmp = compare_paths(cur, cur, normalize=True)
    (row,) = cmp.rows
    assert row.repeats == (2, 2) and row.samples[0] >= 10 and row.decision == "no change"
    assert row.machine_ratio == 1.0  # exact: the same records on both sides, the same deterministic arithmetic
    r = cli(cur, cur, "--normalize", "--threshold", "0.25", "--inject-slowdown", "2", "--format", "json")
    (entry,) = json.loads(r.stdout)
    assert entry["name"] == "ViT-Nano/4 infer torch bs4 32px fp32 cpu - img_per_s" and entry["unit"] == "img/s"
    # the same rounds on both sides: the ratio is exactly the injected one; whether 2 rounds a side decide it
    # depends on how much the two rounds differed (a busy machine: inconclusive), and the exit code must agree
    assert "ratio: 0.500" in entry["extra"], entry["extra"]
    if "decision: regression" in entry["extra"]:
        assert r.exit_code == 1, r.output
    else:
        assert "decision: inconclusive" in entry["extra"] and r.exit_code == 0, r.output


def test_control_characters_from_a_results_file_never_reach_the_terminal(tmp_path, cli):
    """A model name holding ESC [2J (clear the screen) and an OSC title sequence: printed as visible \\x1b
    escapes, never as the bytes (before: written raw by compare and report)."""
    evil = "ViT\x1b[2J\x1b]0;PWN\x07"
    b = write_jsonl(tmp_path / "base.jsonl", [bench_record(evil)])
    c = write_jsonl(tmp_path / "cur.jsonl", [bench_record(evil, run_id="run2")])
    r = cli(b, c)
    assert r.exit_code in (0, 3), r.output  # one run a side: no change or undecided, as the noise falls
    assert "\x1b" not in r.output and "ViT\\x1b[2J\\x1b]0;PWN" in r.output


def test_verdicts_that_passed_without_a_decision_now_do_not():
    """Found by a review of the verdicts: a repeat failing now where every baseline repeat was ok fails the check
    (was 'no change', exit 0); every matched trial failed on both sides is nothing compared (was exit 0); two
    runs a side without any spread between them give no between-run sd, so the assumed floor decides (was a
    zero-width interval: 6 % called a regression at [0.943, 0.943])."""
    base = [bench_record("A", repeat=r, run_id=f"b{r}") for r in range(3)]
    cur = [bench_record("A", repeat=r, run_id=f"c{r}") for r in range(2)] + [bench_record("A", status="oom",
                                                                                          repeat=2, run_id="c2")]
    cmp = compare(base, cur)
    assert str(cmp.rows[0].decision) == "failed" and "1 current repeat(s) oom" in cmp.rows[0].note
    assert cmp.exit_code == 1
    with pytest.raises(ConfigError, match="every one of the 1 matched trial.* failed on both sides"):
        compare([bench_record("A", status="oom")], [bench_record("A", status="oom", run_id="run2")])
    flat_steps = [0.01] * 20
    same = [bench_record("A", step_s=flat_steps, repeat=r, run_id=f"b{r}") for r in range(2)]
    slower = [bench_record("A", step_s=[x * 1.06 for x in flat_steps], repeat=r, run_id=f"c{r}") for r in range(2)]
    row = compare(same, slower).rows[0]
    assert row.ci_low < row.ci_high and "assumed between-run sd" in row.method, row


def test_normalize_never_divides_by_another_precision_s_or_thread_count_s_calibration():
    """A bf16 trial whose baseline run has only an fp32 calibration (its bf16 one failed): dividing one side by an
    fp32 peak and the other by a bf16 one called identical code a 4x regression. Refused, naming what is there."""
    def cal(tflops, precision, run_id):
        rec = calibration_record([tflops] * 3, run_id=run_id)
        rec.trial["precision"] = rec.config["precision"] = precision
        return rec

    base = [bench_record("A", precision="bf16"), cal(1.0, "fp32", "run1")]
    cur = [bench_record("A", precision="bf16", run_id="run2"), cal(1.0, "fp32", "run2"), cal(4.0, "bf16", "run2")]
    with pytest.raises(ConfigError, match="baseline results have no calibration for backend 'torch', precision "
                                          "'bf16'.*only \\[\\('fp32', None\\)\\]"):
        compare(base, cur, normalize=True)
    assert compare(cur, cur, normalize=True).rows[0].decision == "no change"


def test_normalize_never_divides_by_calibrations_of_other_matrix_sizes():
    # The review of the GPU change: a GPU baseline calibrated at n=1024 (every calibration before 2026-11-29) and a
    # current one at 8192 (the device's kind since), 7x apart in bf16 on an H200: identical speeds read 0.139
    old = calibration_record([110.0] * 3)  # its config's matmul_n: 1024
    new = calibration_record([790.0] * 3, run_id="run2")
    new.trial["matmul_n"] = new.config["matmul_n"] = None
    new.metrics["matmul_n"] = 8192
    base, cur = [bench_record("A"), old], [bench_record("A", run_id="run2"), new]
    with pytest.raises(ConfigError, match="different matrix sizes \\(matmul_n 1024, 8192"):
        compare(base, cur, normalize=True)
    assert compare(cur, cur, normalize=True).rows[0].decision == "no change"
    same = calibration_record([110.0] * 3, run_id="run2")  # a row of today at the CPU's size: as before
    same.trial["matmul_n"] = same.config["matmul_n"] = None
    same.metrics["matmul_n"] = 1024
    cur = [bench_record("A", run_id="run2"), same]
    assert compare(base, cur, normalize=True, run_noise=0).rows[0].decision == "no change"


def test_a_path_that_reads_as_markup_is_printed_as_text(tmp_path, cli):
    """A results path holding '[/]' (rich's closing tag) raised MarkupError after comparing: exit 1, which compare
    and ab use for a regression. Found by a hostile-input audit."""
    d = tmp_path / "r[" / "]a"  # the path .../r[/]a
    d.mkdir(parents=True)
    b = write_jsonl(d / "base.jsonl", [bench_record("A")])
    for fmt in ("table", "json"):
        r = cli(b, b, "--format", fmt)
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output
        assert "MarkupError" not in repr(r.exception)


def test_a_largest_batch_is_not_decided_across_memory_budgets():
    """max_batch_size follows the memory budget (a CPU's default: half the RAM free then): 8192 MiB then 4096 MiB
    halved the largest batch of unchanged code, and compare called it a regression (found by a review of the
    verdicts). Where the budgets differ the row is undecided and says why; where they match it is decided."""
    def mb(v, budget, run_id):
        trial = {"model": "A", "backend": "torch", "task": "max_batch", "device": "cpu", "resolution": 32,
                 "precision": "fp32", "mode": "infer"}
        return record("max_batch", dict(trial), metrics={"max_batch_size": v, "memory_limit_mib": budget},
                      key="mb", repeat=0, trial=trial, run_id=run_id)

    cmp = compare([mb(256, 8192, "a")], [mb(128, 4096, "b")])
    row = cmp.rows[0]
    assert str(row.decision) == "inconclusive" and "memory_limit_mib differs (8192 vs 4096)" in row.note
    assert str(compare([mb(256, 8192, "a")], [mb(128, 8192, "b")]).rows[0].decision) == "regression"


def test_peak_memory_is_not_decided_across_memory_kinds():
    """peak_mem_mib is a number of the kind memory_kind names: torch replaying CUDA graphs reports the reserved
    peak (its buffers live in the graphs' pools), JAX the allocator's peak or XLA's plan by which was larger. Two
    kinds are two quantities (the GPU check: 593 MiB allocated without CUDA graphs, 367 allocated and 800 reserved
    with them), so a change of kind is undecided and says so; one kind on both sides is decided."""
    def rec(mem, kind, run_id, repeat=0):
        r = bench_record("A", run_id=run_id, repeat=repeat)
        r.metrics.update(peak_mem_mib=mem, memory_kind=kind)
        return r

    row = compare([rec(593.0, "allocator", "a")], [rec(800.0, "allocator_reserved", "b")],
                  metrics=["peak_mem_mib"]).rows[0]
    assert str(row.decision) == "inconclusive", row
    assert "memory_kind differs (allocator vs allocator_reserved)" in row.note
    def mixed(mem, run_id):
        return [rec(mem, "allocator", run_id), rec(mem + 7, "xla_resident_plus_temp", run_id, repeat=1)]

    row = compare(mixed(593.0, "a"), mixed(800.0, "b"), metrics=["peak_mem_mib"]).rows[0]
    assert str(row.decision) == "inconclusive" and "between the runs of each side" in row.note, row
    same = compare([rec(593.0, "allocator", "a")], [rec(800.0, "allocator", "b")], metrics=["peak_mem_mib"])
    assert str(same.rows[0].decision) == "regression"


def test_what_compare_prints_stays_bounded_whatever_a_row_holds():
    """Ratios of an edited row (a step of 1e-300 s) printed 300 digits, a 5 MB env value 5 MB: 3 significant
    digits far from 1, each environment value clipped."""
    from vitbench.compare.comparison import env_differences
    from vitbench.compare.render import _ratio

    assert _ratio(0.98765) == "0.988" and _ratio(1e300) == "1e+300" and len(_ratio(1e-300)) < 10
    a, b = bench_record("A"), bench_record("A")
    a.env["git_sha"], b.env["git_sha"] = "x" * 5_000_000, "y"
    (field, base, cur), = [d for d in env_differences([a], [b]) if d[0] == "git_sha"]
    assert len(base) <= 400 and cur == "y"


def test_the_verdict_stands_when_the_reader_of_the_output_goes_away(tmp_path):
    """`vitbench compare A B | head -1` in a CI script: the reader closes the pipe, and the BrokenPipeError ended
    the command with 1 and no word, whatever the verdict (a clean gate failed). The output goes to /dev/null from
    then on and the exit code is the comparison's."""
    import subprocess
    import sys

    (tmp_path / "base").mkdir()
    (tmp_path / "cur").mkdir()
    write_jsonl(tmp_path / "base" / "results.jsonl", [bench_record()])
    write_jsonl(tmp_path / "cur" / "results.jsonl", [bench_record(status="oom")])  # failed: exit 1
    for current, code in (("cur", 1), ("base", None)):
        p = subprocess.Popen([sys.executable, "-m", "vitbench", "compare", tmp_path / "base", tmp_path / current],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdout.close()  # the reader is gone before the first line
        err = p.stderr.read().decode()
        rc = p.wait(timeout=120)
        if code is None:  # the same rows on both sides: the gate's own answer (0, or 3 for one run a side)
            assert rc in (0, 3), (rc, err)
        else:
            assert rc == code, (rc, err)
        assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_one_run_a_side_of_a_speed_without_step_samples_is_held_to_the_assumed_run_noise():
    """serve's samples_per_s has no per-step samples: with one run a side it was compared as a single value, an
    interval of zero width, so 12 % on a busy host was a certain regression where two runs a side were undecided
    (found by a review). It is held to the assumed between-run spread, as a speed with samples is."""
    def serve(sps, run_id):
        trial = {"model": "A", "backend": "torch", "task": "serve", "device": "cpu", "resolution": 32,
                 "precision": "fp32", "scenario": "Offline"}
        return record("serve", dict(trial), metrics={"samples_per_s": sps, "other_load_cores": 2.0}, key="s",
                      run_id=run_id, repeat=0, trial=trial)
    row = next(r for r in compare([serve(100.0, "b")], [serve(88.0, "c")]).rows if r.metric == "samples_per_s")
    assert row.ci_low < row.ratio < row.ci_high and "assumed between-run sd" in row.method, row
    assert str(row.decision) == "inconclusive"


def test_threshold_0_calls_identical_values_no_change():
    """--threshold 0 flags any change its interval excludes: the same value on both sides is no change (exit 0),
    not 'inconclusive: add runs', which no number of runs could help (found by a review)."""
    assert decide(1.0, 1.0, 0.0, True) is decide(1.0, 1.0, 0.0, False) is decide(0.95, 1.05, 0.05, True)
    assert str(decide(1.0, 1.0, 0.0, True)) == "no change"
    assert str(decide(0.99, 1.0, 0.0, True)) == "inconclusive" and str(decide(1.0, 1.01, 0.0, False)) == \
        "inconclusive"


def test_compile_time_of_a_cache_hit_is_not_compared_with_a_cold_compile():
    """compile_s follows compile_cached (Metric.bounded_by): a baseline that loaded its executable from the cache
    beside a current run that compiled cold was a 12x regression of the code (found by a review)."""
    def rec(compile_s, cached, run_id):
        r = bench_record("A", run_id=run_id)
        r.metrics.update(compile_s=compile_s, compile_cached=cached)
        return r
    cmp = compare([rec(5.0, True, "b")], [rec(60.0, False, "c")], metrics=("compile_s",))
    (row,) = cmp.rows
    assert str(row.decision) == "inconclusive" and "compile_cached differs" in row.note, row
    (row,) = compare([rec(5.0, False, "b")], [rec(60.0, False, "c")], metrics=("compile_s",)).rows
    assert str(row.decision) == "regression"


def test_runs_on_both_sides_that_are_not_the_same_runs_are_refused(tmp_path, cli):
    """A directory of several sweeps against one of its own sweeps, or directories holding copies of a run: the
    shared runs counted as independent pulled the sides together (four of five runs the same: 'no change' on
    what was mostly one measurement). Refused (exit 2) naming the trial; a directory against itself (every run
    shared) and separate sweeps still compare."""
    rng = np.random.default_rng(0)
    rounds = [result_set(rng, models=("A",), repeats=1) for _ in range(3)]
    for i, recs in enumerate(rounds):
        (tmp_path / "all" / f"round{i}").mkdir(parents=True)
        write_jsonl(tmp_path / "all" / f"round{i}" / "results.jsonl", recs)
    (tmp_path / "new").mkdir()
    write_jsonl(tmp_path / "new" / "results.jsonl", result_set(rng, models=("A",), repeats=1))
    for i, recs in enumerate((rounds[1], result_set(rng, models=("A",), repeats=1))):  # a copy, and one of its own
        (tmp_path / "copies" / f"round{i}").mkdir(parents=True)
        write_jsonl(tmp_path / "copies" / f"round{i}" / "results.jsonl", recs)
    for base, cur in (("all", "all/round0"), ("copies", "all")):
        r = cli(str(tmp_path / base), str(tmp_path / cur))
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "share 1 run(s) of 1 trial(s) (first: A infer" in out, r.output
        assert "Traceback" not in out
    assert compare_paths(tmp_path / "all", tmp_path / "all").rows[0].method == "the same runs on both sides"
    assert compare_paths(tmp_path / "all", tmp_path / "new").rows[0].repeats == (3, 1)


def test_a_speed_trial_missing_from_current_fails_the_check_when_nothing_else_is_compared(tmp_path, cli):
    """Current lacks the baseline's one speed trial (a sweep that died after its flops trial): exit 1 listing
    it as missing, not exit 2 pointing at --metric; with --allow-missing, nothing is left to compare: exit 2,
    the message naming the missing trial."""
    fl_cfg = {"model": "A", "backend": "torch", "task": "flops", "resolution": 32, "num_classes": 10}
    fl = record("flops", dict(fl_cfg), metrics={"gflops": 0.1, "params_m": 0.05}, key="fl", repeat=0,
                trial=fl_cfg, run_id="run1")
    b = write_jsonl(tmp_path / "base.jsonl", [fl, bench_record("A")])
    c = write_jsonl(tmp_path / "cur.jsonl", [fl])
    r = cli(b, c)
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "INCOMPLETE" in out and "1 baseline trial(s) missing from current" in out, r.output
    assert "A infer torch" in out
    r = cli(b, c, "--allow-missing")
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "nothing compared" in out and "missing from current" in out, r.output
    assert "first: A infer torch" in out and "Traceback" not in out
