"""Every key a bench row holds is declared once (vitbench/tasks/bench_metrics.py), or named in its UNDECLARED with
the reason; what the declarations change for the readers: row_check, tidy's columns, `vitbench plugins`, the table
`vitbench bench` prints."""

from __future__ import annotations

import json

import pytest

from vitbench.backends.base import Step, StopRule
from vitbench.measure.throughput import bench
from vitbench.record import Record
from vitbench.tasks import NOT_NUMBERS, kind_metrics, row_check
from vitbench.tasks.bench import Infer, Train
from vitbench.tasks.bench_metrics import DECLARED, REAL_INPUT_TABLE, TABLE, UNDECLARED

TINY = dict(warmup_steps=0, stop=StopRule(min_steps=1, min_seconds=0.01, max_seconds=5.0), threads=1)


def _undeclared(rec: Record) -> set[str]:
    """The keys of `rec` that the bench tasks do not declare (what row_check, compare and tidy read) and
    UNDECLARED does not name."""
    return set(rec.metrics) - set(kind_metrics()["bench"]) - set(UNDECLARED)


@pytest.mark.parametrize("timing", ["throughput", "latency"])
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_every_key_bench_writes_is_declared(backend, timing, one_torch_thread):
    # JAX fixes its CPU pools once per process (an earlier test may have made them): its default threads
    rec = bench(Step("ViT-Nano/4", batch_size=2), backend=backend, timing=timing,
                **{**TINY, "threads": None if backend == "jax" else 1})
    assert rec.status == "ok" and not _undeclared(rec), _undeclared(rec)
    assert row_check()(rec) is None  # what a CPU writes (None: energy, reserved memory; mfu_over_peak) is valid
    assert ("step_ms_p99" in rec.metrics) == (timing == "latency")  # a row may lack a declared metric


@pytest.mark.parametrize("timing,given", [("throughput", 0.0), ("latency", float("nan"))])
def test_a_timer_that_gives_no_time_is_a_failed_measurement(timing, given, one_torch_thread, monkeypatch):
    """A backend whose timer returned 0 s for a window was a ZeroDivisionError traceback (img/s = batch / 0); NaN
    an ok row with img_per_s null (exit 0 from `bench --json`). NonFiniteResult (exit 1) naming the backend."""
    from vitbench.backends.base import get_backend
    from vitbench.errors import NonFiniteResult

    be = get_backend("torch")
    name = "time_steps" if timing == "latency" else "time_windows"
    real = getattr(be, name)
    monkeypatch.setattr(be, name, lambda *a, **k: [given for _ in real(*a, **k)])
    with pytest.raises(NonFiniteResult, match=rf"backend 'torch''s timer gave {given} seconds for a timed "
                                              r"(step|window) \(\d+ of \d+\); each must be a finite number > 0"):
        bench(Step("ViT-Nano/4", batch_size=2), backend=be, timing=timing, **TINY)


def test_a_command_holds_its_record_to_what_a_sweep_s_row_must_be(cli, monkeypatch):
    """`bench --json` printed an ok row with img_per_s null (exit 0) where a sweep made the same record an error
    row: every command runs its task through the one check (tasks.run_checked)."""
    def unmeasured(self, p):
        return Record.measured("bench", {"model": "ViT-Nano/4"}, metrics={"img_per_s": None})

    monkeypatch.setattr(Infer, "run", unmeasured)
    r = cli("bench", "ViT-Nano/4", "--threads", "1", "--json")
    assert r.exit_code == 1 and "task 'infer' measured no img_per_s (got None)" in " ".join(r.output.split())
    assert '"status": "ok"' not in r.output


def test_every_key_of_train_with_real_input_is_declared(one_torch_thread):
    p = Train.Params(model="ViT-Nano/4", task="train", batch_size=2, min_steps=1, min_seconds=0.01,
                     warmup_steps=0, threads=1, real_input_dataset="synthetic", real_input_steps=1,
                     real_input_synthetic_images=16)
    rec = Train().run(p)
    assert rec.status == "ok" and "real_input_img_per_s" in rec.metrics
    assert not _undeclared(rec), _undeclared(rec)
    # the config names the images timed (a command's row matches on it), the real-input fields as set
    assert {k: v for k, v in rec.config.items() if k.startswith("real_input_")} == {
        "real_input_dataset": "synthetic", "real_input_steps": 1, "real_input_synthetic_images": 16}
    assert row_check()(rec) is None


def test_real_input_windows_under_other_load_make_the_row_unstable(one_torch_thread, monkeypatch):
    """The real-image windows are checked as the synthetic steps are: measured while other processes kept 1.9
    cores busy, they are said (real_input_other_load_cores, real_input_noise) and the row is unstable; they went
    unflagged, the row's checks covering its synthetic steps only (found by a review)."""
    import vitbench.protocols.input_bench as ib

    class Busy:  # what vitbench.measure.load.LoadMeter reads on a shared host
        other_cores = 1.9

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(ib, "LoadMeter", Busy)
    p = Train.Params(model="ViT-Nano/4", task="train", batch_size=2, min_steps=1, min_seconds=0.01,
                     warmup_steps=0, threads=1, real_input_dataset="synthetic", real_input_steps=1,
                     real_input_synthetic_images=16)
    rec = Train().run(p)
    assert rec.metrics["real_input_other_load_cores"] == 1.9 and "1.9 CPU cores" in rec.metrics["real_input_noise"]
    assert rec.metrics["unstable"] is True and "real images: " in rec.metrics["noise"]
    assert not _undeclared(rec) and row_check()(rec) is None


def test_the_undeclared_keys_are_settings_named_like_a_field_or_no_single_value():
    assert not set(UNDECLARED) & set(DECLARED)
    fields = set(Train.fields()) | set(Infer.fields())
    assert {k for k in UNDECLARED if k not in fields} == {"rank_img_per_s"}  # a list, one img/s per rank
    assert set(TABLE) | set(REAL_INPUT_TABLE) <= set(DECLARED)
    assert not set(DECLARED) & fields  # a declared metric named like a field would take its tidy column


def _row(**metrics) -> Record:
    rec = Record.measured("bench", {"model": "ViT-Nano/4", "task": "infer", "batch_size": 2},
                          metrics={"img_per_s": 100.0, "step_ms_median": 20.0, **metrics}, raw={"step_s": [0.02]})
    return rec


@pytest.mark.parametrize("metrics", [{"step_cv": -0.5}, {"model_tflops_per_s": "fast"}, {"step_ms_p90": -1.0},
                                     {"img_per_s_mean": 0.0}, {"windows": -3}, {"mfu": 7.5}])
def test_an_ok_row_with_a_declared_number_vitbench_never_writes_is_refused(metrics):
    problem = row_check()(_row(**metrics))
    assert problem is not None and problem.refuse and next(iter(metrics)) in problem.text


def test_an_ok_row_with_a_fraction_above_1_is_refused_for_every_task():
    """A FRACTION (an accuracy, an input-bound share, MFU) is at most 1 wherever it is declared: an edited accuracy
    of 5.0 was an ok row's (session 31; mfu alone declared its bound)."""
    from vitbench.tasks import FRACTION, tasks

    seen = set()
    for task in tasks(include_hidden=True).values():
        for m in task.metrics:
            if m.unit != FRACTION:
                continue
            seen.add(m.name)
            assert m.maximum == 1.0, (task.name, m.name)
            rec = Record.measured(task.kind, {"model": "ViT-Nano/4"}, metrics={m.name: 1.5})
            problem = row_check()(rec)
            assert problem is not None and problem.refuse and f"{m.name} = 1.5" in problem.text, task.name
    assert {"accuracy", "mfu", "input_bound_fraction"} <= seen


def test_an_ok_row_that_says_it_shared_the_host_in_words_is_refused():
    """`runner.overlapped: "yes"` was read as no overlap (report.caveats.overlaps: a text is none): a row that says
    it shared the host was shown clean. vitbench writes a list (of objects; of trial keys before): anything else is
    refused; a list of either, or none, is read."""
    for bad in ("yes", 1, [3]):
        rec = _row()
        rec.runner["overlapped"] = bad
        problem = row_check()(rec)
        assert problem is not None and problem.refuse and "runner.overlapped" in problem.text, bad
    for good in (None, [], ["s/legacy-key"], [{"trial": "s/k9", "own": False}]):
        rec = _row()
        rec.runner["overlapped"] = good
        assert row_check()(rec) is None, good


def test_an_old_row_with_nulls_and_texts_is_read():
    """Rows of earlier versions: nulls where nothing was measured (energy on a CPU, mfu without a peak, p99 in
    throughput timing), texts and flags where the declarations say so."""
    old = _row(step_ms_p99=None, mfu=None, peak_tflops=None, energy_j_per_img=None, power_w_mean=None,
               mfu_over_peak=None, compile_s=None, timer="host_clock", memory_kind="host_rss", unstable=False,
               noise=None, peak_measured_at="2026-11-30T00:37:09", compile_mode=None, window_steps=3)
    assert row_check()(old) is None


def test_tidy_keeps_the_config_column_of_a_setting_bench_echoes(tmp_path):
    from vitbench import tidy

    rec = _row(step_cv=0.1, window_steps=3, compile_mode="default")
    rec.config = {**rec.config, "window_steps": None, "compile_mode": None}
    (tmp_path / "results.jsonl").write_text(json.dumps(rec.to_dict()) + "\n")
    df = tidy.load(tmp_path)
    assert df.loc[0, "step_cv"] == 0.1 and "config.window_steps" not in df and "config.compile_mode" not in df
    assert df.loc[0, "metric.window_steps"] == 3 and df.loc[0, "metric.compile_mode"] == "default"


def test_plugins_lists_every_bench_metric_with_its_unit(cli):
    rows = json.loads(cli("plugins", "--json").stdout)
    infer = next(r for r in rows if r["kind"] == "task" and r["name"] == "infer")
    assert infer["metrics"]["step_cv"] == "stdev/mean" and infer["metrics"]["model_tflops_per_s"] == "TFLOP/s"
    assert infer["metrics"]["step_ms_p90"] == "ms"


def test_the_bench_table_shows_each_number_with_its_declared_unit(cli):
    r = cli("bench", "ViT-Nano/4", "-b", "2", "--min-seconds", "0.01", "--min-steps", "1", "--threads", "1",
            "--timing", "latency")
    assert r.exit_code == 0, r.output
    cells = [[c.strip() for c in line.strip().strip("│").split("│")] for line in r.stdout.splitlines()
             if line.startswith("│")]
    rows = {c[0]: c[1:] for c in cells if c[0]}  # field -> [value, unit]
    for name in ("img_per_s", "step_ms_median", "step_ms_p90", "step_cv", "model_tflops_per_s", "first_step_s"):
        assert rows[name][1] == DECLARED[name].unit, (name, rows[name])
    assert DECLARED["timer"].unit in NOT_NUMBERS and rows["timer"] == ["host_clock", ""]  # no unit: a text


def test_the_report_says_each_number_column_s_unit_from_the_declarations(tmp_path, cli):
    from test_compare import bench_record

    rec = bench_record("ViT-Nano/4")
    rec.metrics.update(step_cv=0.05, mfu=0.2, model_tflops_per_s=0.01, first_step_s=0.1)
    (tmp_path / "results.jsonl").write_text(json.dumps(rec.to_dict()) + "\n")
    r = cli("report", str(tmp_path), "--out", str(tmp_path / "out"), "--no-plots")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "out" / "report.md").read_text()
    units = next(line for line in md.splitlines() if line.startswith("_Units: img_per_s"))
    for name in ("img_per_s", "step_ms_median", "step_cv", "mfu"):
        assert f"{name} {DECLARED[name].unit}" in units, units
    assert "model " not in units and "repeats" not in units  # a setting or a count of the report's: no unit
