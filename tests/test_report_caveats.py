"""The report marks what it cannot vouch for (issue 49): unstable or co-scheduled speeds in every table, ratio and
figure, never pooled with clean repeats; overlaps that name what overlapped; figures drawn only from enough points
and numbers that were measured (a 1-device row's own "efficiency", a capped max batch, Figure 13's speeds)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from records import record

from vitbench.report import build_report, figure
from vitbench.report.caveats import CAVEAT, CAVEAT_LABEL, LEGEND, MARK, calibration_line
from vitbench.report.parts import NotDrawn
from vitbench.report.tables import ok_rows, peak_throughput
from vitbench.store import Store
from vitbench.tidy import load

BASE = {"backend": "torch", "task": "infer", "device": "cpu", "precision": "fp32", "compile": False,
        "resolution": 32, "batch_size": 8}
OTHER = {"trial": "s/k9", "run_id": "their-run", "own": False, "pid": 4242, "launcher_pid": 4240,
         "cmd": "vitbench sweep smoke --results /elsewhere", "cwd": "/home/someone"}


def _bench(st: Store, model: str, ips: float, unstable: bool = False, repeat: int = 0, overlapped=None, **cfg):
    cfg = {"model": model, **BASE, **cfg}
    st.append(record("bench", cfg, metrics={"img_per_s": ips, "unstable": unstable,
                                            "noise": "CV 0.90 >= 0.10" if unstable else None},
                     key=f"{model}-{cfg['backend']}-{cfg['resolution']}-{cfg['batch_size']}-{repeat}",
                     study="s", run_id="r", repeat=repeat, trial=cfg,
                     runner={"overlapped": overlapped or []}))


@pytest.fixture()
def store(tmp_path):
    """ViT-Nano/4: two clean repeats (100, 102) and an unstable 900; R-Nano: unstable only; R-Micro: measured
    while another process's trial ran; Axial: clean on torch, unstable on jax."""
    with Store(tmp_path / "res") as st:
        for rep, (ips, bad) in enumerate(((100.0, False), (102.0, False), (900.0, True))):
            _bench(st, "ViT-Nano/4", ips, bad, rep)
        for rep in range(2):
            _bench(st, "R-Nano", 50.0 + rep, True, rep)
        _bench(st, "R-Micro", 70.0, overlapped=[OTHER, "s/legacy-key"])
        _bench(st, "ViT-Nano/4", 200.0, backend="jax")
        _bench(st, "ViT-Nano/4", 999.0, True, batch_size=16)  # faster, but unstable: not the peak
        _bench(st, "ViT-Nano/4", 30.0, resolution=64)  # a second input size: the figure has a line to draw
    return tmp_path / "res"


def test_tables_mark_unstable_and_shared_rows_and_never_pool_them_with_clean_ones(store):
    rep = build_report(store, formats=("md",), plots=False)
    t = rep.tables["throughput"].set_index(["model", "backend", "resolution", "batch_size"])
    nano = t.loc[("ViT-Nano/4", "torch", 32, 8)]
    # exact: the median of 100 and 102 is their mean, 101, an integer (the unstable 900 is not in it)
    assert nano["img_per_s"] == 101 and nano["repeats"] == 2 and nano[CAVEAT] == "1 unstable left out"
    assert nano["img_per_s_max"] == 102  # the spread is the clean repeats' too
    rnano = t.loc[("R-Nano", "torch", 32, 8)]
    assert rnano["img_per_s"] == 50.5 and rnano[CAVEAT] == f"{MARK} unstable (2 of 2 rows)"
    assert t.loc[("R-Micro", "torch", 32, 8)][CAVEAT] == f"{MARK} shared host (1 of 1 rows)"
    assert t.loc[("ViT-Nano/4", "jax", 32, 8)][CAVEAT] == ""
    md = (store / "report" / "report.md").read_text()
    assert f"_{LEGEND}_" in md and md.count(MARK) >= 4
    assert any("5 ok timed row(s) are flagged" in w for w in rep.warnings)  # 900, 999, R-Nano x2, R-Micro


def test_the_peak_is_the_fastest_clean_batch_and_a_ratio_with_a_marked_side_is_marked(store):
    ok = ok_rows(load(store), ("bench",))
    peak = peak_throughput(ok).set_index(["model", "backend", "resolution"])
    assert peak.loc[("ViT-Nano/4", "torch", 32), "batch_size"] == 8  # not the unstable 999 img/s at batch 16
    assert peak.loc[("R-Nano", "torch", 32), CAVEAT].startswith(MARK)  # no clean batch: the marked one, marked
    rep = build_report(store, formats=("csv",), plots=False)
    piv = rep.tables["backends"].set_index(["model", "batch_size"])
    row = piv.loc[("ViT-Nano/4", 8)]
    assert row["jax_vs_torch"] == 200 / 101 and row[CAVEAT] == "torch: 1 unstable left out"  # clean both sides
    with Store(store) as st:  # the jax side measured while unstable only: the ratio is marked, naming the side
        _bench(st, "R-Nano", 40.0, True, backend="jax")
    piv = build_report(store, formats=("csv",), plots=False).tables["backends"].set_index("model")
    assert piv.loc["R-Nano", CAVEAT] == f"{MARK} jax: unstable (1 of 1 rows); torch: unstable (2 of 2 rows)"


def test_figures_ring_marked_speeds_and_say_so_in_the_legend(store):
    df = load(store)
    fig = figure("throughput_vs_resolution", df)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert CAVEAT_LABEL in labels
    rings = [c for c in fig.axes[0].collections if c.get_label() != CAVEAT_LABEL
             and len(c.get_offsets()) and np.allclose(c.get_edgecolor()[0][:3], (1, 0, 0))]
    ringed = sorted(float(y) for c in rings for _, y in c.get_offsets())
    assert ringed == [50.5, 70.0]  # R-Nano (unstable) and R-Micro (shared host); ViT-Nano/4's clean peak not
    clean = df[(df["model"] == "ViT-Nano/4") & ~df["unstable"].astype(bool)]
    fig = figure("throughput_vs_resolution", clean)
    assert CAVEAT_LABEL not in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    one_size = figure("throughput_vs_resolution", df[df["resolution"] == 32])  # a figure of one point per line
    assert isinstance(one_size, NotDrawn) and "one input size measured (32 px)" in one_size.reason


def test_an_untimed_row_beside_timed_ones_is_never_marked():
    """A row without a noise flag (accuracy, FLOPs: nothing timed) read beside timed rows has NaN in the
    `unstable` column; measured while another trial ran it is still no speed to doubt: left unmarked, as alone."""
    from vitbench.report.caveats import OVERLAPPED, row_caveats

    df = pd.DataFrame({"unstable": [False, np.nan, True], OVERLAPPED: [[OTHER], [OTHER], []]})
    assert row_caveats(df).tolist() == ["shared host", "", "unstable"]


def test_the_shared_host_table_names_own_trials_and_other_processes(store, tmp_path):
    with Store(store) as st:
        _bench(st, "R-Micro", 70.0, repeat=1, overlapped=[{**OTHER, "own": True, "trial": "s/mine"}])
    rep = build_report(store, formats=("md",), plots=False)
    t = rep.tables["shared_host"].set_index("repeat")
    assert list(t.loc[0, ["shared_host", "own_sweep", "other_process"]]) == [2, 0, 2]
    assert t.loc[0, "overlapped"] == ("another process: s/k9 (run their-run, pid 4240: vitbench sweep smoke "
                                      "--results /elsewhere; cwd /home/someone); "
                                      "s/legacy-key (origin not recorded)")
    assert list(t.loc[1, ["own_sweep", "other_process"]]) == [1, 0]
    assert t.loc[1, "overlapped"] == "own sweep: s/mine"


def test_calibration_line_leaves_busy_runs_out_and_marks_an_all_busy_one():
    cal = pd.DataFrame({"matmul_tflops_per_s": [1.0, 3.0, 0.2], "other_load_cores": [0.1, 0.2, 1.5]})
    assert calibration_line(cal) == ("calibration (dense matmul, 2 run(s)): median 2 TFLOP/s, range 1 to 3; "
                                     "1 run(s) measured while other processes used >= 0.5 cores left out")
    assert calibration_line(cal.iloc[2:]).startswith(f"{MARK} calibration (dense matmul, 1 run(s)): median 0.2")
    assert "left out" not in calibration_line(cal.iloc[:2]) and MARK not in calibration_line(cal.iloc[:2])


def test_calibration_line_reads_ok_rows_only():
    """A failed calibration's number (an error row kept its metrics, 10x the device's) was the line's median."""
    cal = pd.DataFrame({"matmul_tflops_per_s": [1.0, 3.0, 20.0, 30.0], "other_load_cores": 0.1,
                        "status": ["ok", "ok", "error", "timeout"]})
    assert calibration_line(cal) == "calibration (dense matmul, 2 run(s)): median 2 TFLOP/s, range 1 to 3"
    assert calibration_line(cal.iloc[2:]) is None


def test_calibration_line_never_pools_backends_or_precisions():
    # the GPU check's line: "median 44.51 TFLOP/s, range 30.04 to 126.2" over fp32, tf32 and bf16 of torch and JAX
    cal = pd.DataFrame({"matmul_tflops_per_s": [38.0, 101.0, 35.0, 51.0, 38.2], "other_load_cores": 0.0,
                        "backend": ["torch", "torch", "jax", "jax", "torch"], "device": "cuda",
                        "precision": ["fp32", "bf16", "fp32", "bf16", "fp32"], "threads": None})
    assert calibration_line(cal) == (
        "calibration (dense matmul TFLOP/s by backend, precision: median (range, runs); busy: other processes "
        "used >= 0.5 cores): jax bf16 51 (51 to 51, 1 run(s)); jax fp32 35 (35 to 35, 1 run(s)); torch bf16 101 "
        "(101 to 101, 1 run(s)); torch fp32 38.1 (38 to 38.2, 2 run(s))")
    # a group whose every run was busy is still shown, marked (the review: it vanished with the busy rows)
    busy = cal.assign(other_load_cores=[0.0, 1.5, 0.0, 0.0, 1.5])
    line = calibration_line(busy)
    assert f"{MARK} torch bf16 101 (101 to 101, 1 run(s), every one shared the machine)" in line
    assert "torch fp32 38 (38 to 38, 1 run(s), 1 busy left out)" in line


def test_calibration_line_never_pools_matrix_sizes():
    # a GPU's calibration took n=1024 before 2026-11-29 and 8192 since: some 7x apart, never one median. The size
    # is the row's metric, else its config's (`config.matmul_n` in the frame), else 1024 (a row with neither)
    cal = pd.DataFrame({"matmul_tflops_per_s": [110.0, 120.0, 790.0, 100.0], "other_load_cores": 0.0,
                        "matmul_n": [None, None, 8192, None], "config.matmul_n": [1024, None, None, None]})
    assert calibration_line(cal) == (
        "calibration (dense matmul TFLOP/s by matmul_n: median (range, runs); busy: other processes used >= 0.5 "
        "cores): 1024 110 (100 to 120, 3 run(s)); 8192 790 (790 to 790, 1 run(s))")


# ---- figures from enough points, numbers that were measured ----------------------------------------------------
def test_a_fit_figure_from_one_point_is_a_note_not_a_fit(tmp_path):
    with Store(tmp_path) as st:
        cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "fewshot", "dataset": "digits", "shots": 10}
        st.append(record("fewshot", cfg, metrics={"accuracy": 0.6, "pretrain_exaflops": 1e-6}, key="k",
                         study="s", run_id="r", trial=cfg))
    drawn = figure("fit_curves", load(tmp_path))
    assert isinstance(drawn, NotDrawn) and "1 point(s): too few to fit a law" in drawn.reason
    rep = build_report(tmp_path, tmp_path / "out", formats=("md",))
    md = (tmp_path / "out" / "report.md").read_text()
    assert "fit_curves" not in rep.figures and not (tmp_path / "out" / "fit_curves.png").exists()
    assert rep.not_drawn["fit_curves"] == drawn.reason
    assert "_Not drawn: 1 group(s) of at most 1 point(s): too few to fit a law" in md


def test_figure13_shows_the_peak_speed_at_the_benchmark_resolution_and_the_accuracy():
    from vitbench.report import figure13

    rows = [dict(kind="fewshot", model="ViT-Nano/4", resolution=32, accuracy=acc, pretrain_exaflops=1e-6,
                 shots=10, backend="torch", seed=seed) for seed, acc in ((0, 0.5), (1, 0.7))]
    for batch, ips in ((4, 100.0), (16, 300.0)):  # best batch 16: 300, never their mean 200
        rows.append(dict(kind="bench", task="infer", model="ViT-Nano/4", resolution=32, backend="torch",
                         batch_size=batch, img_per_s=ips))
    rows.append(dict(kind="bench", task="infer", model="ViT-Nano/4", resolution=64, backend="torch", batch_size=4,
                     img_per_s=50.0))  # another input size than the benchmark's: not its speed
    t = figure13.table(pd.DataFrame(rows))
    assert len(t) == 1
    r = t.iloc[0]
    # exact: 300 is a stored value; the mean of 0.5 and 0.7 is one addition and one halving
    assert r["img_per_s"] == 300.0 and r["batch_size"] == 16 and r["resolution"] == 32
    assert r["accuracy"] == (0.5 + 0.7) / 2 and r["seeds"] == 2 and r["benchmark"] == "fewshot 10-shot"
    other = pd.DataFrame([{**x, "resolution": 128} if x["kind"] == "fewshot" else x for x in rows])
    assert figure13.table(other).empty  # the benchmark's input size was never timed: no speed is guessed


def test_a_capped_max_batch_reads_as_a_lower_bound(tmp_path):
    with Store(tmp_path) as st:
        for res, size, capped in ((32, 4096, True), (64, 1024, False)):
            cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "max_batch", "device": "cpu",
                   "resolution": res, "precision": "fp32", "mode": "infer"}
            st.append(record("max_batch", cfg, metrics={"max_batch_size": size, "capped": capped}, key=f"k{res}",
                             study="s", run_id="r", trial=cfg))
    rep = build_report(tmp_path, tmp_path / "out", formats=("md",))
    assert list(rep.tables["max_batch"]["max_batch"]) == ["\u2265 4096", "1024"]
    fig = figure("max_batch_vs_resolution", load(tmp_path))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "\u22654096" in texts and not any("1024" in t for t in texts)
    assert any(t.get_text().startswith("\u2265 N") for t in fig.axes[0].get_legend().get_texts())


def test_overlaps_round_trip_through_the_store_as_the_report_reads_them(tmp_path):
    """A row's overlaps are JSON in the store; the report's trials files keep them whole."""
    with Store(tmp_path) as st:
        _bench(st, "R-Micro", 70.0, overlapped=[OTHER])
    build_report(tmp_path, tmp_path / "out", formats=("csv",), plots=False)
    trials = pd.read_csv(tmp_path / "out" / "trials.csv")
    assert json.loads(trials.loc[0, "runner.overlapped"]) == [OTHER] and trials.loc[0, "shared_host"] == 1


def test_scaling_with_an_unstable_one_device_partner_is_marked_and_ringed(tmp_path):
    with Store(tmp_path) as st:
        for devices, ips, bad in ((1, 100.0, True), (2, 160.0, False)):
            cfg = {"devices": devices} if devices > 1 else {}
            _bench(st, "ViT-Nano/4", ips, bad, batch_size=2 * devices, task="train", **cfg)
    df = load(tmp_path)
    rep = build_report(tmp_path, tmp_path / "out", formats=("csv",), plots=False)
    two = rep.tables["devices"].set_index("devices").loc[2]
    assert two["scaling_efficiency"] == 0.8  # exact: 160 / (2 x 100), one rounding as the literal's
    assert two[CAVEAT] == f"{MARK} 1-device row (weak): unstable (1 of 1 rows)"
    fig = figure("efficiency_vs_devices", df)
    assert CAVEAT_LABEL in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
