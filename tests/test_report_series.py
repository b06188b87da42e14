"""A figure's series are the configurations its table keeps apart: rows of two device counts, two precisions or two
server batch sizes are never one line (or one scatter series) under one label, and a marked (unstable or
shared-host) serve row is ringed in the latency figure as in its table. Found by a review of the report on
hand-made rows: devices 1 and 2 drawn as one zig-zag line [32, 32, 64, 64] px; fp32 and bf16 points one series
labelled bf16 with one reference line through both; Server rows at batch 1 and 32 one line
[100, 150, 200, 250] QPS; an unstable Server row marked in the serve table, not in the figure."""

from __future__ import annotations

import numpy as np
import pytest
from records import record

from vitbench.report.caveats import CAVEAT_LABEL
from vitbench.report.plots import gflops_vs_throughput, throughput_vs_resolution
from vitbench.report.serving import latency_vs_qps
from vitbench.report.tables import ok_rows
from vitbench.store import Store
from vitbench.tidy import load, load_each

NANO, MICRO = "ViT-Nano/4", "ViT-Micro/4"
BASE = {"backend": "torch", "task": "infer", "device": "cpu", "precision": "fp32", "compile": False,
        "resolution": 32, "batch_size": 8}


def _bench(model: str, ips: float, extra: dict | None = None, **cfg):
    cfg = {"model": model, **BASE, **cfg}
    key = "-".join(f"{v}" for v in cfg.values())
    return record("bench", cfg, metrics={"img_per_s": ips, "unstable": False, "noise": None, **(extra or {})},
                  key=key, study="s", run_id="r", repeat=0, trial=cfg, runner={"overlapped": []})


def _store(path, rows) -> None:
    with Store(path) as st:
        for r in rows:
            st.append(r)


def _lines(ax) -> dict[str, tuple[list, list]]:
    """The labelled lines of a panel: label -> (x, y)."""
    return {ln.get_label(): ([float(x) for x in ln.get_xdata()], [float(y) for y in ln.get_ydata()])
            for ln in ax.lines if not ln.get_label().startswith("_")}


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_throughput_vs_resolution_draws_a_line_per_device_count(tmp_path):
    """1 device at batch 8 and 2 devices (dp) at batch 16, each at 32 and 64 px: two lines, each over both sizes,
    labelled by the device count (the table's rows); one configuration keeps its bare label."""
    rows = []
    for res, ips in ((32, 100.0), (64, 30.0)):
        rows.append(_bench(NANO, ips, resolution=res))
        rows.append(_bench(NANO, ips * 1.9, resolution=res, devices=2, parallelism="dp", batch_size=16))
    _store(tmp_path / "res", rows)
    ok = ok_rows(load(tmp_path / "res"), ("bench",))
    lines = _lines(throughput_vs_resolution(ok).axes[0])
    assert lines == {f"{NANO} devices=1": ([32.0, 64.0], [100.0, 30.0]),
                     f"{NANO} devices=2": ([32.0, 64.0], [190.0, 57.0])}
    one = ok[ok["devices"] == 1]  # one value of each setting: the label as before, no key=value
    assert _lines(throughput_vs_resolution(one).axes[0]) == {NANO: ([32.0, 64.0], [100.0, 30.0])}


def test_gflops_vs_throughput_keeps_precisions_apart_and_draws_each_its_reference(tmp_path):
    """fp32 at 1 GFLOP/s achieved and bf16 at 4 (two models each): a series per model and precision, each holding
    its own precision's points, and a constant-FLOP/s line per precision (not one median over both)."""
    rows = []
    for model, g in ((NANO, 0.004), (MICRO, 0.02)):
        rows.append(_bench(model, 1.0 / g, extra={"gflops_per_img_fwd": g}))
        rows.append(_bench(model, 4.0 / g, extra={"gflops_per_img_fwd": g}, precision="bf16"))
    _store(tmp_path / "res", rows)
    ok = ok_rows(load(tmp_path / "res"), ("bench", "flops"))
    ax = gflops_vs_throughput(ok).axes[0]
    series = {c.get_label(): [tuple(p) for p in c.get_offsets().tolist()] for c in ax.collections}
    assert series == {NANO: [(0.004, 250.0)], f"{NANO} bf16": [(0.004, 1000.0)],
                      MICRO: [(0.02, 50.0)], f"{MICRO} bf16": [(0.02, 200.0)]}
    refs = sorted(t for t in _legend(ax) if t.startswith("constant"))
    assert refs == ["constant 1 GFLOP/s (precision=fp32)", "constant 4 GFLOP/s (precision=bf16)"]
    fp32 = gflops_vs_throughput(ok[ok["precision"] == "fp32"]).axes[0]  # one precision: one line, as before
    assert [t for t in _legend(fp32) if t.startswith("constant")] == ["constant 1 GFLOP/s"]
    assert {c.get_label() for c in fp32.collections} == {NANO, MICRO}


def test_a_training_panels_reference_line_reads_the_training_steps_flop_rate(tmp_path):
    """Inference and training at 1 forward GFLOP/s (forward GFLOPs per image x img/s) each: the training step
    does 3x the forward FLOPs (docs/measurement.md, model_tflops_per_s), so its panel's line reads 3 GFLOP/s; it
    read 1, a third of the rate the step achieved. The line itself stays through the points (x: forward cost)."""
    rows = []
    for model, g in ((NANO, 0.004), (MICRO, 0.02)):
        for task in ("infer", "train"):
            rows.append(_bench(model, 1.0 / g, extra={"gflops_per_img_fwd": g}, task=task))
    _store(tmp_path / "res", rows)
    fig = gflops_vs_throughput(ok_rows(load(tmp_path / "res"), ("bench", "flops")))
    refs = {ax.get_title().split(" speed")[0]: [t for t in _legend(ax) if t.startswith("constant")]
            for ax in fig.axes if ax.get_legend()}
    assert refs == {"Theoretical cost vs measured inference": ["constant 1 GFLOP/s"],
                    "Theoretical cost vs measured training": ["constant 3 GFLOP/s (3x forward: a training step)"]}
    train = next(ax for ax in fig.axes if "training" in ax.get_title())
    (xs, ys), = [(ln.get_xdata(), ln.get_ydata()) for ln in train.lines if ln.get_label().startswith("constant")]
    assert np.allclose(xs * ys, 1.0)


def test_figure13s_reference_lines_keep_precisions_apart():
    """Figure 13 (c), two models at 1 GFLOP/s in fp32 and 4 in bf16 on one backend: a constant-FLOP/s line per
    precision, through its own points; one line per backend drew 2.5 GFLOP/s (the median over both), through
    neither, as gflops_vs_throughput did before."""
    import pandas as pd

    from vitbench.report import figure13

    rows = []
    for model in (NANO, MICRO):
        rows.append(dict(kind="fewshot", model=model, resolution=32, accuracy=0.5, pretrain_exaflops=1e-6,
                         shots=10, backend="torch", seed=0))
        g = figure13._gflops(pd.DataFrame(rows), model, 32)
        for precision, rate in (("fp32", 1.0), ("bf16", 4.0)):
            rows.append(dict(kind="bench", task="infer", model=model, resolution=32, backend="torch",
                             batch_size=8, precision=precision, img_per_s=rate / g))
    ax = figure13.figure(pd.DataFrame(rows)).axes[2]
    lines = sorted((ln.get_label(), round(float(ln.get_xdata()[0] * ln.get_ydata()[0]), 9)) for ln in ax.lines)
    assert lines == [("torch: constant 1 GFLOP/s (median model) precision=fp32", 1.0),
                     ("torch: constant 4 GFLOP/s (median model) precision=bf16", 4.0)]


def _serve(batch: int, qps: list[float], scale: float, unstable: bool | None = None):
    """A Server row as the task writes it (no LoadGen run), its probes at these target rates."""
    runs = [{"target_qps": q, "valid": True, "percentile": 99.0, "latency_bound_ms": 15.0,
             "latency_ms": {"p50": q * scale / 100, "p90": q * scale / 50, "p99": q * scale / 20}} for q in qps]
    best = max(qps)
    cfg = {"model": NANO, "backend": "torch", "task": "serve", "device": "cpu", "precision": "fp32",
           "scenario": "Server", "batch_size": batch, "max_wait_ms": 0.0, "latency_bound_ms": 15.0,
           "min_duration_s": 3.0}
    metrics = {"samples_per_s": best, "latency_ms_p50": best * scale / 100, "latency_ms_p90": best * scale / 50,
               "latency_ms_p99": best * scale / 20, "loadgen_valid": True, "probes": len(runs)}
    if unstable is not None:
        metrics.update(unstable=unstable, noise="other processes used 3.0 cores" if unstable else None)
    return record("serve", cfg, metrics=metrics, raw={"runs": runs}, key=f"serve-{batch}", study="s",
                  run_id="r", repeat=0, trial=cfg, runner={"overlapped": []})


def _serve_figure(path, rows):
    _store(path, rows)
    df = load_each(path, (None,), raw_json=True)[0]
    return latency_vs_qps(ok_rows(df, ("serve",), failed=True))  # as the report: error rows too


def test_latency_vs_qps_draws_a_line_per_server_batch_size(tmp_path):
    """Server rows at batch 1 and 32: a line each over its own probes, labelled by its batch size; one row keeps
    the label 'model (backend) pNN'."""
    fig = _serve_figure(tmp_path / "r", [_serve(1, [100.0, 200.0], 1.0), _serve(32, [150.0, 250.0], 0.1)])
    judged = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in fig.axes[0].lines
              if ln.get_linewidth() == 1.6}
    assert judged == {f"{NANO} (torch) batch_size=1 p99": ([100.0, 200.0], [5.0, 10.0]),
                      f"{NANO} (torch) batch_size=32 p99": ([150.0, 250.0], [0.75, 1.25])}
    one = _serve_figure(tmp_path / "one", [_serve(1, [100.0, 200.0], 1.0)])
    assert _legend(one.axes[0]) == [f"{NANO} (torch) p99", "VALID", "INVALID"]


@pytest.mark.parametrize("unstable", [True, False])
def test_latency_vs_qps_rings_the_probes_of_a_marked_row(tmp_path, unstable):
    """An unstable Server row (its `caveat` marked, as in the serve table): its probes ringed red and the legend
    says what a ring means; a clean one: no ring, no entry."""
    fig = _serve_figure(tmp_path / "r", [_serve(8, [100.0, 200.0], 1.0, unstable=unstable)])
    ax = fig.axes[0]
    rings = [c for c in ax.collections if c.get_label() != CAVEAT_LABEL and len(c.get_offsets())
             and np.allclose(c.get_edgecolor()[0][:3], (1, 0, 0))]
    ringed = sorted(tuple(float(v) for v in p) for c in rings for p in c.get_offsets())
    assert ringed == ([(100.0, 5.0), (200.0, 10.0)] if unstable else [])
    assert (CAVEAT_LABEL in _legend(ax)) is unstable


def test_max_batch_vs_resolution_draws_a_line_per_device_count(tmp_path):
    """The largest batch per device at 1 and 2 devices, each at 32 and 64 px: two lines (the max_batch table's
    rows), not one over [32, 32, 64, 64] px (the figure grouped on a list without devices)."""
    from vitbench.report.plots import max_batch_vs_resolution

    rows = []
    for res, best in ((32, 64), (64, 16)):
        for devices in (1, 2):
            cfg = {"model": NANO, "backend": "torch", "task": "max_batch", "device": "cpu", "precision": "fp32",
                   "compile": False, "mode": "infer", "resolution": res, "devices": devices}
            rows.append(record("max_batch", cfg, metrics={"max_batch_size": best // devices, "capped": False},
                               key=f"mb-{res}-{devices}", study="s", run_id="r", repeat=0, trial=cfg))
    _store(tmp_path / "res", rows)
    ok = ok_rows(load(tmp_path / "res"), ("max_batch",))
    lines = _lines(max_batch_vs_resolution(ok).axes[0])
    assert lines == {f"{NANO} devices=1": ([32.0, 64.0], [64.0, 16.0]),
                     f"{NANO} devices=2": ([32.0, 64.0], [32.0, 8.0])}, lines


def test_settings_text_is_the_tables_spelling_and_skips_what_has_no_value():
    """Every figure names the settings that tell its series apart with one helper, in the tables' spelling
    (numfmt.fmt): a float setting read back as 2.0 reads 2, a flag yes/no, a missing value is left out."""
    import pandas as pd

    from vitbench import numfmt
    from vitbench.report.tables import settings_text

    pairs = [("devices", 2.0), ("compile", True), ("shots", float("nan")), ("precision", "bf16"), ("lr", 0.003),
             ("workers", None), ("mode", pd.NA)]
    assert settings_text(pairs) == "devices=2 compile=yes precision=bf16 lr=0.003"
    assert settings_text(pairs[:2], " / ") == f"devices={numfmt.fmt(2.0)} / compile={numfmt.fmt(True)}"
    assert settings_text([("shots", None)]) == ""
