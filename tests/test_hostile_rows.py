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


# -------------------------------------------------------------------------------------------------------------
# A calibration no machine measured, a flag of the wrong type
# -------------------------------------------------------------------------------------------------------------
CAL_LINE = 3  # the calibration's line in a calibrated store (after two bench rows)


def _calibrated_store(d, name: str, cal: dict | None = None, bench: dict | None = None):
    """Two bench rows (the first's metrics updated by `bench`) and a calibration row (raw and metrics updated by
    `cal`'s 'raw' and 'metrics')."""
    from test_compare import calibration_record

    (d / name).mkdir()
    rows = [bench_record(repeat=rep).to_dict() for rep in range(2)]
    rows[0]["metrics"].update(bench or {})
    c = calibration_record([0.1, 0.101, 0.099]).to_dict()
    for part in ("raw", "metrics"):
        c[part].update((cal or {}).get(part, {}))
    rows.append(c)
    (d / name / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d / name


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    d = tmp_path_factory.mktemp("cal")
    tflops = "matmul_tflops_per_s"
    cases = {"good": None,
             "huge": {"raw": {tflops: [1e308, 1e308, 1e308]}},  # compare: ratio 1e-309, 'machine inf', exit 1
             "zero_sample": {"raw": {tflops: [0.0, 0.1]}},  # compare: an 'improvement' of 2.1, exit 0
             "above_bound": {"raw": {tflops: [0.1, 2e5, 0.1]}},
             "tiny": {"raw": {tflops: [1e-305] * 3}},  # compare: every speed over it inf, 'machine inf'
             "tiny_median": {"raw": {tflops: None}, "metrics": {tflops: 1e-9}},  # 1e8 x the other side's speed
             "huge_median": {"raw": {tflops: None}, "metrics": {tflops: 1e308}}}  # no raw list: the median's
    return {name: _calibrated_store(d, name, cal) for name, cal in cases.items()}


def _argv(command: str, store, other, tmp_path) -> list:
    return {"compare": ["compare", other, store, "--normalize"],
            "report": ["report", store, "--out", tmp_path / "r", "--no-plots"],
            "history": ["history", "append", store, "--db", tmp_path / "h.sqlite", "--commit", "abc"]}[command]


@pytest.mark.parametrize("bad", ["huge", "zero_sample", "above_bound", "huge_median", "tiny", "tiny_median"])
@pytest.mark.parametrize("command", ["compare", "report", "history"])
def test_a_calibration_no_machine_measured_is_refused_by_every_reader(cli, calibrated, tmp_path, bad, command):
    """A TFLOP/s sample of 0 (nothing measured), below MIN_TFLOPS (1e5 below one busy CI core) or above
    MAX_TFLOPS (~25x the fastest accelerator's peak): before, compare --normalize divided by it (1e308: a
    regression of ratio 1e-309, 'machine inf'; [0, 0.1]: an improvement of 2.1) and history append stored it for
    good."""
    r = cli(*_argv(command, calibrated[bad], calibrated["good"], tmp_path))
    assert r.exit_code == 2, r.output[-2000:]
    assert f"results.jsonl:{CAL_LINE}" in r.output and "matmul_tflops_per_s" in r.output, r.output[-2000:]
    assert "Traceback" not in r.output and len(r.output) < 2000
    assert not (tmp_path / "h.sqlite").exists()


def test_the_calibration_bounds_are_far_from_any_machine():
    """MAX_TFLOPS stays well above the fastest single accelerator's peak (NVIDIA H200: 3,958 FP8 TFLOPS with
    sparsity), MIN_TFLOPS well below one core of the CI host (0.099 fp32 TFLOP/s), and both are what the
    calibration metric declares."""
    from vitbench.tasks import calibration_task
    from vitbench.tasks.calibration import MAX_TFLOPS, METRIC, MIN_TFLOPS

    task, metric = calibration_task()
    assert metric.maximum == MAX_TFLOPS >= 10 * 3958 and metric.samples_from == METRIC
    assert 0 < metric.minimum == MIN_TFLOPS <= 0.099 / 1000


def test_a_calibration_at_the_least_is_read_and_one_below_it_refused():
    """MIN_TFLOPS is the least a calibration sample can be: a sample at it is a measurement, one half of it was
    never measured (the bound is the samples' own, not only the far-off 1e-305 a row edited to it holds)."""
    from test_compare import calibration_record

    from vitbench.tasks import row_check
    from vitbench.tasks.calibration import MIN_TFLOPS

    check = row_check()
    assert check(calibration_record([MIN_TFLOPS] * 3)) is None
    bad = check(calibration_record([0.1, MIN_TFLOPS / 2, 0.1]))
    assert bad is not None and bad.refuse and f"at least {MIN_TFLOPS:g}" in bad.text, bad


def test_a_good_calibration_still_normalises(cli, calibrated):
    r = cli("compare", calibrated["good"], calibrated["good"], "--normalize")
    assert r.exit_code == 0, r.output[-2000:]


@pytest.fixture(scope="module")
def flagged(tmp_path_factory):
    d = tmp_path_factory.mktemp("flags")
    cases = {"yes": {"unstable": "yes"}, "one": {"unstable": 1}, "false_text": {"unstable": "false"},
             "cached_yes": {"compile_cached": "yes"}, "list": {"unstable": [True]},
             "true": {"unstable": True}, "null": {"unstable": None, "compile_cached": None},
             "absent": {}}
    return {name: _calibrated_store(d, name, bench=flags) for name, flags in cases.items()}


@pytest.mark.parametrize("bad", ["yes", "one", "false_text", "cached_yes", "list"])
@pytest.mark.parametrize("command", ["compare", "report", "history"])
def test_a_flag_that_is_no_bool_is_refused_by_every_reader(cli, flagged, tmp_path, bad, command):
    """`unstable: "yes"` (vitbench writes a bool) was read as clean: the report showed no caveat."""
    r = cli(*_argv(command, flagged[bad], flagged["absent"], tmp_path))
    assert r.exit_code == 2, r.output[-2000:]
    field = "compile_cached" if bad == "cached_yes" else "unstable"
    assert "results.jsonl:1" in r.output and f"{field} = " in r.output, r.output[-2000:]
    assert "Traceback" not in r.output and len(r.output) < 2000
    assert not (tmp_path / "h.sqlite").exists()


@pytest.mark.parametrize("good", ["true", "null", "absent"])
def test_a_flag_vitbench_writes_is_read(cli, flagged, tmp_path, good):
    r = cli("report", flagged[good], "--out", tmp_path / "r", "--no-plots", "--format", "md")
    assert r.exit_code == 0, r.output[-2000:]
    assert ("\u26a0" in (tmp_path / "r" / "report.md").read_text()) == (good == "true")  # unstable: marked


# -------------------------------------------------------------------------------------------------------------
# A forward of no work
# -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("metric", ["gflops", "gmacs"])
def test_a_flops_row_of_zero_flops_is_refused_where_read(cli, tmp_path, metric):
    """An ok flops row whose forward costs 0 GFLOPs (or GMACs) is none vitbench writes (every model's analytic
    count is > 0): it was read, shown as 0 and failed the GFLOPs-vs-speed figure with "Geometric sequence cannot
    include zero". Found by a hostile-user round."""
    from records import record

    from vitbench.tasks import row_check

    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "flops", "resolution": 32, "num_classes": 10}
    good = {"gflops": 0.0045, "gmacs": 0.0022, "params_m": 0.03}
    assert row_check()(record("flops", cfg, metrics=good)) is None
    bad = record("flops", cfg, metrics={**good, metric: 0.0}, key="f", run_id="r", study="s", repeat=0, trial=cfg)
    problem = row_check()(bad)
    assert problem is not None and problem.refuse and metric in problem.text and "> 0" in problem.text
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "results.jsonl").write_text(json.dumps(bad.to_dict()) + "\n")
    r = cli("report", tmp_path / "s", "--out", tmp_path / "r", "--no-plots")
    assert r.exit_code == 2 and "results.jsonl:1" in r.output and metric in r.output, r.output[-2000:]
