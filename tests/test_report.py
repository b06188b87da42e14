"""Report: every promised file is written, images are valid non-empty PNGs, tables summarise repeats."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pandas as pd
import pytest
from records import record
from tolerances_stat import gamma

from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import get_spec
from vitbench.report import build_report
from vitbench.report.accuracy_plots import pareto_front
from vitbench.report.build import REPORT
from vitbench.store import Store
from vitbench.tidy import load
from vitbench.study import trial_key

MANIFEST = REPORT.manifest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _add(st: Store, kind: str, cfg: dict, metrics: dict, repeat: int = 0, status: str = "ok", **kw) -> None:
    st.append(record(kind, cfg, metrics=metrics, status=status, env={"torch": "2.x", "cpu_model": "test cpu"},
                     key=trial_key(cfg, repeat), study="synthetic", run_id=f"run{repeat}", repeat=repeat,
                     trial=cfg, **kw))


def make_results(path, backends=("torch",), accuracy=False) -> None:
    """A small synthetic store: throughput at 3 sizes x 2 repeats, max batch, FLOPs, a failure, calibration."""
    rng = random.Random(0)
    with Store(path) as st:
        for rep in range(2):
            for model in ("ViT-Nano/4", "R-Nano", "R-Nano+ViT-Micro/8"):
                spec = get_spec(model)
                for res in (32, 64, 128):
                    g = analytic_counts(spec, res).gflops
                    for backend in backends:
                        for task in ("infer", "train"):
                            cfg = dict(model=model, backend=backend, task=task, device="cpu", resolution=res,
                                       batch_size=8, precision="fp32", compile=False)
                            ips = 50 / g * (0.4 if task == "train" else 1) * rng.uniform(0.9, 1.1)
                            steps = [8 / ips * rng.uniform(0.95, 1.05) for _ in range(5)]
                            _add(st, "bench", cfg, dict(img_per_s=ips, step_ms_median=8e3 / ips, step_cv=0.02,
                                                        gflops_per_img_fwd=g, peak_mem_mib=10.0 + res),
                                 repeat=rep, raw={"step_s": steps})
                    if rep == 0:
                        cfg = dict(model=model, backend="torch", task="max_batch", device="cpu", resolution=res,
                                   precision="fp32", mode="infer")
                        _add(st, "max_batch", cfg, dict(max_batch_size=int(4096 / (res / 32) ** 2),
                                                        capped=res == 32, memory_limit_mib=2048.0))
                        cfg = dict(model=model, backend="torch", task="flops", resolution=res, num_classes=10)
                        _add(st, "flops", cfg, dict(gflops=g, gmacs=g / 2, params_m=0.1))
                if accuracy:
                    for shots in (1, 10):
                        cfg = dict(model=model, backend="torch", task="fewshot", dataset="digits", shots=shots)
                        _add(st, "fewshot", cfg, dict(accuracy=rng.uniform(0.3, 0.9),
                                                      pretrain_exaflops=1e-6 * rng.uniform(1, 100)), repeat=rep)
        cfg = dict(model="ViT-Micro/4", backend="torch", task="infer", device="cpu", resolution=32, batch_size=8,
                   precision="fp32", compile=False)
        _add(st, "bench", cfg, {}, status="oom", error={"type": "OutOfMemoryError", "message": "out of memory",
                                                        "tail": "..."})
        st.append(record("calibration", {"backend": "torch", "task": "calibration", "device": "cpu"},
                         metrics={"matmul_tflops_per_s": 0.05}, raw={"matmul_tflops_per_s": [0.05, 0.051]},
                         key=None, study="synthetic", run_id="run0"))


def _valid_png(path) -> None:
    import matplotlib.image as mpimg

    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000, path
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300
    assert float(np.std(img[..., :3])) > 0.01  # not a blank canvas


@pytest.fixture(scope="module")
def first_report(tmp_path_factory):
    """(results, report folder, Report) of one full report (every format, the figures) of make_results, built
    into a folder that already held a file of the user's (notes.txt), once for the tests that read it."""
    base = tmp_path_factory.mktemp("first-report")
    make_results(base / "res")
    out = base / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")  # not the report's: never touched
    return base / "res", out, build_report(base / "res", out, allow_other_files=True)


def test_report_writes_every_promised_file(first_report):
    _, out, rep = first_report
    names = {p.name for p in rep.files}
    for fig in ("throughput_vs_resolution", "max_batch_vs_resolution", "gflops_vs_throughput"):
        assert {f"{fig}.png", f"{fig}.svg"} <= names
        _valid_png(out / f"{fig}.png")
        assert (out / f"{fig}.svg").read_text().lstrip().startswith("<?xml") and "<svg" in (
            out / f"{fig}.svg").read_text()[:2000]
    assert "accuracy_vs_compute.png" not in names  # no accuracy rows: no Figure 5 panel
    for table in ("trials", "throughput", "max_batch", "flops", "failures"):
        assert {f"{table}.csv", f"{table}.parquet"} <= names
    assert {"report.md", "report.html"} <= names
    assert all(p.exists() and p.stat().st_size > 0 for p in rep.files)

    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "src=\"http" not in html and "<link" not in html
    md = (out / "report.md").read_text()
    assert "![throughput_vs_resolution](throughput_vs_resolution.png)" in md and "| model |" in md
    trials = pd.read_parquet(out / "trials.parquet")
    assert len(trials) == len(rep.df) == 2 * 3 * 3 * 2 + 3 * 3 * 2 + 1
    assert "raw" in trials.columns and trials["raw"].str.contains("step_s").any()
    assert pd.read_csv(out / "trials.csv").shape[0] == len(trials)
    assert "calibration" in " ".join(rep.meta) and "0.05" in " ".join(rep.meta)


def test_throughput_table_collapses_repeats(tmp_path):
    make_results(tmp_path)
    rep = build_report(tmp_path, formats="csv", plots=False)
    t = rep.tables["throughput"]
    assert len(t) == 3 * 3 * 2 and set(t["repeats"]) == {2}
    raw = rep.df[(rep.df["kind"] == "bench") & (rep.df["status"] == "ok")]
    one = raw[(raw["model"] == "R-Nano") & (raw["resolution"] == 64) & (raw["task"] == "infer")]["img_per_s"]
    row = t[(t["model"] == "R-Nano") & (t["resolution"] == 64) & (t["task"] == "infer")].iloc[0]
    # the median of 2 repeats is their mean: 2 float64 roundings on each side (pandas' groupby and Series)
    assert row["img_per_s"] == pytest.approx(one.median(), rel=gamma(2 + 2))
    assert row["img_per_s_min"] == one.min() and row["img_per_s_max"] == one.max()
    assert list(rep.tables["failures"]["status"]) == ["oom"]
    assert {p.suffix for p in rep.files} == {".csv"}


def test_the_pooled_commits_are_named_by_short_shas_git_takes(tmp_path):
    """The warning named each commit clipped, '1b334ed54ccff505fcf050f5... (40 characters)', which no git command
    takes: now its first 10 hex digits (as `vitbench history` names them), a dirty run's '-dirty' kept (it is not
    its commit's code), and a $VITBENCH_GIT_SHA that is no SHA clipped as before."""
    from vitbench.env import short_sha

    full = "1b334ed54ccff505fcf050f5e7a1f0c3d2b4a697"
    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "infer", "device": "cpu", "resolution": 32,
           "batch_size": 8}
    with Store(tmp_path) as st:
        for repeat, sha in enumerate((full, full + "-dirty", "e" * 64)):
            st.append(record("bench", cfg, metrics={"img_per_s": 100.0}, env={"git_sha": sha},
                             key=trial_key(cfg, repeat), study="s", run_id=f"r{repeat}", repeat=repeat, trial=cfg))
    said = [w for w in build_report(tmp_path, formats="csv", plots=False).warnings if "commits" in w]
    assert len(said) == 1 and "3 vitbench commits (1b334ed54c, 1b334ed54c-dirty, eeeeeeeeee)" in said[0], said
    assert "characters" not in said[0]
    assert short_sha("v1.2 release build " * 20).endswith("characters)")  # no SHA: clipped, bounded


def test_repeats_measured_by_two_vitbench_commits_are_said_to_pool_them(tmp_path):
    """A sweep resumed after an update measures a trial's later repeats with other code, and the report's median
    pooled them without a word (the header listed both commits). Now said; one commit alone says nothing."""
    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "infer", "device": "cpu", "resolution": 32,
           "batch_size": 8}
    for name, shas in (("two", ("a" * 40, "b" * 40)), ("one", ("a" * 40, "a" * 40))):
        with Store(tmp_path / name) as st:
            for repeat, sha in enumerate(shas):
                st.append(record("bench", cfg, metrics={"img_per_s": 100.0 + repeat}, env={"git_sha": sha},
                                 key=trial_key(cfg, repeat), study="s", run_id=f"r{repeat}", repeat=repeat,
                                 trial=cfg))
            st.append(record("bench", {**cfg, "resolution": 64}, metrics={"img_per_s": 50.0},
                             env={"git_sha": "c" * 40}, key=trial_key({**cfg, "resolution": 64}), study="s",
                             run_id="r2", trial={**cfg, "resolution": 64}))  # another trial: its own commit
    said = [w for w in build_report(tmp_path / "two", formats="csv", plots=False).warnings if "commits" in w]
    assert len(said) == 1 and said[0].startswith("1 trial(s) pool ok repeats measured by 2 vitbench commits (")
    assert "a" * 10 in said[0] and "b" * 10 in said[0] and "c" * 10 not in said[0]
    assert not [w for w in build_report(tmp_path / "one", formats="csv", plots=False).warnings if "commits" in w]
    with Store(tmp_path / "failed") as st:  # an error repeat at another commit is in no median: not said
        for repeat, (sha, status) in enumerate((("a" * 40, "ok"), ("a" * 40, "ok"), ("b" * 40, "error"))):
            st.append(record("bench", cfg, metrics={"img_per_s": 100.0} if status == "ok" else {},
                             env={"git_sha": sha}, key=trial_key(cfg, repeat), study="s", run_id=f"r{repeat}",
                             repeat=repeat, trial=cfg, status=status,
                             error=None if status == "ok" else {"type": "RuntimeError", "message": "boom"}))
    warned = build_report(tmp_path / "failed", formats="csv", plots=False).warnings
    assert not [w for w in warned if "commits" in w]


def test_backends_side_by_side_and_accuracy_plot(tmp_path):
    make_results(tmp_path, backends=("torch", "jax"), accuracy=True)
    rep = build_report(tmp_path, formats="md,html")
    piv = rep.tables["backends"]
    assert {"img_per_s_torch", "img_per_s_jax", "jax_vs_torch"} <= set(piv.columns) and len(piv) == 18
    _valid_png(tmp_path / "report" / "accuracy_vs_compute.png")
    assert "Backends side by side" in (tmp_path / "report" / "report.md").read_text()


def test_pareto_front():
    x = [1, 2, 3, 4, 5]
    y = [0.5, 0.4, 0.7, 0.6, 0.9]
    assert list(pareto_front(x, y)) == [0, 2, 4]
    assert list(pareto_front([2, 1], [0.5, 0.5])) == [1]  # same accuracy for less compute wins


def test_cli_report(tmp_path, cli):
    make_results(tmp_path / "res")
    r = cli("report", tmp_path / "res", "--out", tmp_path / "o", "--format", "md,csv")
    assert r.exit_code == 0, r.output
    assert "Throughput" in r.output and "ViT-Nano/4" in r.output and (tmp_path / "o" / "report.md").exists()
    assert not (tmp_path / "o" / "report.html").exists()
    r = cli("report", tmp_path / "res", "--format", "pdf")
    assert r.exit_code == 2 and "allowed: md, html, csv, parquet" in r.output
    r = cli("report", tmp_path / "nothing-here")
    assert r.exit_code == 2 and "does not exist" in r.output


# ----------------------------------------------------------------------------------------------------------
# Where a report goes, what it leaves behind, how its numbers read
# ----------------------------------------------------------------------------------------------------------
def test_a_report_into_a_folder_with_an_older_report_leaves_no_stale_file(first_report, tmp_path):
    res, built, first = first_report  # a full report built into a folder holding notes.txt
    out = tmp_path / "out"
    shutil.copytree(built, out)  # the folder as that report left it (the module's copy stays as it was)
    assert (out / "throughput.csv").is_file() and (out / "throughput_vs_resolution.png").is_file()
    assert (out / "notes.txt").read_text() == "mine"
    second = build_report(res, out, formats=("md",), plots=False, allow_other_files=True)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["notes.txt", "report.md"]
    assert [p.name for p in second.files] == ["report.md"] and len(first.files) > 10
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [MANIFEST]  # no staging left


def test_report_out_that_cannot_be_a_directory_is_a_clean_error(tmp_path, cli):
    make_results(tmp_path / "res")
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target, expected in ((afile, "is a file; give a directory"), (afile / "sub", "which is a file"),
                             ("/sys/vitbench-test-report", "/sys/vitbench-test-report")):
        r = cli("report", tmp_path / "res", "--out", target, "--no-plots")
        assert r.exit_code == 2 and expected in " ".join(r.output.split()), r.output
        assert "Traceback" not in r.output
    assert afile.read_text() == "x"


def test_integers_stay_integers_in_csv_and_numbers_read_one_way(tmp_path):
    """batch_size is missing in the FLOP rows, so pandas would make it 8.0; the CSV says 8. Terminal, Markdown
    and HTML show every number by one rule (vitbench.numfmt): no exponent between 1,000 and 10^7."""
    from vitbench.numfmt import fmt

    make_results(tmp_path / "res")
    rep = build_report(tmp_path / "res", tmp_path / "out", formats=("csv", "md"), plots=False)
    trials = pd.read_csv(tmp_path / "out" / "trials.csv", dtype=str, keep_default_na=False)
    assert set(trials.loc[trials["kind"] == "bench", "batch_size"]) == {"8"}
    assert set(trials.loc[trials["kind"] == "flops", "batch_size"]) == {""}
    assert str(rep.df["batch_size"].dtype) == "Int64"  # resolution is in every row: a plain int64
    assert [fmt(x) for x in (14683.2, 9218, 9218.0, 8.0, 0.0044741, 2.577e-7, 1.5e8, float("nan"), None, True)] \
        == ["14683", "9218", "9218", "8", "0.004474", "2.577e-07", "1.5e+08", "", "", "yes"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "e+0" not in md.replace("e+07", "").replace("e+08", "")


def test_legend_tells_the_backends_apart(tmp_path):
    """jax and torch lines of one model share its colour and marker; their legend entries must show the line
    style: a dash period at least on each side of the marker (a 2-unit handle showed one blurred dash)."""
    from vitbench.report.plots import throughput_vs_resolution
    from vitbench.report.tables import ok_rows
    from vitbench.tidy import load

    make_results(tmp_path / "res", backends=("torch", "jax"))
    fig = throughput_vs_resolution(ok_rows(load(tmp_path / "res"), ("bench",)))
    leg = fig.axes[0].get_legend()
    styles = {}
    for text, handle in zip(leg.get_texts(), leg.legend_handles):
        styles[text.get_text()] = handle.get_linestyle()
        if "(jax)" in text.get_text():
            period = sum(handle._dash_pattern[1])  # points, scaled by the line width
            handle_pts = leg.handlelength * leg.prop.get_size_in_points()
            assert (handle_pts - handle.get_markersize()) / 2 >= period, (handle_pts, period)
    assert styles["ViT-Nano/4 (jax)"] != styles["ViT-Nano/4 (torch)"]


def test_a_median_never_crosses_a_setting_that_varies(tmp_path):
    """Rows of 1 and 4 threads, of sgd and adamw, of two method versions: each its own row in the throughput
    table (before: 1 thread's 100 img/s and 4 threads' 350 were reported as 225, n 2); settings that do not vary
    add no column. Found by a review of the report on hand-made rows."""
    from vitbench.report.tables import throughput

    base = dict(model="ViT-Nano/4", backend="torch", task="train", device="cpu", resolution=32, batch_size=8,
                precision="fp32", compile=False)
    with Store(tmp_path) as st:
        for i, (extra, speed) in enumerate(((dict(threads=1, optimizer="sgd"), 100.0),
                                            (dict(threads=4, optimizer="sgd"), 350.0),
                                            (dict(threads=1, optimizer="adamw"), 60.0))):
            _add(st, "bench", {**base, **extra}, {"img_per_s": speed})
        _add(st, "bench", {**base, "threads": 1, "optimizer": "sgd", "resolution": 64}, {"img_per_s": 30.0},
             method_version=2)
        _add(st, "bench", {**base, "threads": 1, "optimizer": "sgd", "resolution": 128}, {"img_per_s": 20.0})
        _add(st, "bench", {**base, "threads": 1, "optimizer": "sgd", "resolution": 128}, {"img_per_s": 22.0},
             repeat=1, method_version=2)
    t = throughput(load(tmp_path))
    assert sorted(t["img_per_s"]) == [20.0, 22.0, 30.0, 60.0, 100.0, 350.0] and set(t["repeats"]) == {1}
    assert {"threads", "optimizer", "method_version"} <= set(t.columns) and "channels_last" not in t.columns


def test_a_setting_that_differs_between_rows_is_shown_though_it_splits_no_group(tmp_path):
    """The GPU check's training rows: batch 64 with Adam beside batch 256 with SGD. The optimizer split no group
    (it changed with the batch), so no column said it, and the table read as a change of batch alone. A setting
    that differs between the rows is shown; the rows stay as they were."""
    from vitbench.report.tables import throughput

    base = dict(model="ViT-Nano/4", backend="torch", task="train", device="cpu", resolution=32, precision="fp32",
                compile=False)
    with Store(tmp_path) as st:
        _add(st, "bench", {**base, "batch_size": 8, "optimizer": "adam"}, {"img_per_s": 100.0})
        _add(st, "bench", {**base, "batch_size": 32, "optimizer": "sgd"}, {"img_per_s": 300.0})
    t = throughput(load(tmp_path))
    assert dict(zip(t["batch_size"], t["optimizer"])) == {8: "adam", 32: "sgd"} and len(t) == 2
    # one value, and rows it does not apply to (inference rows have no optimizer): nothing differs, no column
    with Store(tmp_path / "one") as st:
        _add(st, "bench", {**base, "batch_size": 8, "optimizer": "adam"}, {"img_per_s": 100.0})
        _add(st, "bench", {**base, "task": "infer", "batch_size": 8}, {"img_per_s": 300.0})
    assert "optimizer" not in throughput(load(tmp_path / "one")).columns


def test_peak_memory_of_two_kinds_shows_its_kind_beside_it(tmp_path):
    """A compiled row replaying CUDA graphs reports the reserved peak, the others the allocated one (the GPU check:
    367 MiB allocated, 800 reserved): set side by side without their kinds they read as one quantity. Where the
    table's kinds differ, each row's is shown beside its peak_mem_mib; where they are one, no column."""
    from vitbench.report.tables import throughput_table

    base = dict(model="ViT-Nano/4", backend="torch", task="infer", device="cuda", resolution=32, batch_size=8,
                precision="bf16", compile=True)
    with Store(tmp_path / "two") as st:
        _add(st, "bench", {**base, "compile_mode": "default"},
             {"img_per_s": 100.0, "peak_mem_mib": 593.0, "memory_kind": "allocator"})
        _add(st, "bench", {**base, "compile_mode": "reduce-overhead"},
             {"img_per_s": 103.0, "peak_mem_mib": 800.0, "memory_kind": "allocator_reserved"})
    t = throughput_table(load(tmp_path / "two"))
    cols = list(t.columns)
    assert cols.index("memory_kind") == cols.index("peak_mem_mib") + 1
    assert dict(zip(t["compile_mode"], t["memory_kind"])) == {"default": "allocator",
                                                              "reduce-overhead": "allocator_reserved"}
    with Store(tmp_path / "one") as st:
        _add(st, "bench", {**base, "compile_mode": "default"},
             {"img_per_s": 100.0, "peak_mem_mib": 593.0, "memory_kind": "allocator"})
        _add(st, "bench", {**base, "compile_mode": "max-autotune-no-cudagraphs"},
             {"img_per_s": 101.0, "peak_mem_mib": 590.0, "memory_kind": "allocator"})
    assert "memory_kind" not in throughput_table(load(tmp_path / "one")).columns


def test_every_setting_that_varies_splits_a_summary_and_seeds_pool(tmp_path):
    """A review fed the report rows that differ in a setting no table's keys named: serve rows at 32 and 64 px,
    compile off and on, read as one row of 3 repeats; train rows with 0 and 4 input workers as 2 repeats of one.
    Every setting (vitbench.tasks.setting_columns, from the tasks' Params) now splits a summary where it varies
    within one; seeds (and bookkeeping) pool as repeats, and a list-valued setting (lr_grid) groups by value."""
    from vitbench.report import serving
    from vitbench.report.tables import accuracy, throughput

    serve = dict(model="ViT-Nano/4", backend="torch", task="serve", device="cpu", precision="fp32",
                 scenario="Offline", batch_size=8, max_wait_ms=2.0, latency_bound_ms=100.0, min_duration_s=1.0)
    train = dict(model="ViT-Nano/4", backend="torch", task="train", device="cpu", resolution=32, batch_size=8,
                 precision="fp32", compile=False)
    few = dict(model="ViT-Nano/4", backend="torch", task="finetune", device="cpu", dataset="digits",
               pretrain_steps=50, resolution=16)
    with Store(tmp_path) as st:
        for i, (extra, speed) in enumerate(((dict(resolution=32, compile=False), 100.0),
                                            (dict(resolution=64, compile=False), 30.0),
                                            (dict(resolution=32, compile=True), 150.0))):
            _add(st, "serve", {**serve, **extra}, {"samples_per_s": speed})
        for seed, workers, speed in ((0, 0, 50.0), (0, 4, 200.0), (1, 4, 210.0)):
            _add(st, "bench", {**train, "seed": seed, "real_input_workers": workers}, {"img_per_s": speed})
        for grid, acc in (([0.01, 0.03], 0.8), ([0.1], 0.6), ([0.01, 0.03], 0.9)):
            _add(st, "finetune", {**few, "lr_grid": grid, "seed": int(acc * 10)}, {"accuracy": acc})
    df = load(tmp_path)
    s = serving.table(df[df["kind"] == "serve"])
    assert sorted(s["samples_per_s"]) == [30.0, 100.0, 150.0] and set(s["repeats"]) == {1}
    assert {"resolution", "compile"} <= set(s.columns)
    t = throughput(df[df["kind"] == "bench"])
    assert sorted(zip(t["real_input_workers"], t["repeats"], t["img_per_s"])) == [(0, 1, 50.0), (4, 2, 205.0)]
    assert "seed" not in t.columns
    a = accuracy(df[df["kind"] == "finetune"])
    assert sorted(zip(a["repeats"], a["accuracy"].round(6))) == [(1, 0.6), (2, 0.85)]


def test_a_figure_of_more_benchmarks_than_panels_says_how_many_it_left_out():
    """Figure 5's panels stop at plots.MAX_PANELS; the 7th and 8th benchmarks were dropped without a word."""
    from vitbench.report.accuracy_plots import accuracy_vs_compute
    from vitbench.report.plots import MAX_PANELS

    rows = [{"model": m, "family": "vit", "kind": "fewshot", "dataset": f"d{i}", "shots": 5, "accuracy": a,
             "pretrain_exaflops": x, "backend": "torch", "resolution": 32, "status": "ok"}
            for i in range(MAX_PANELS + 2) for m, a, x in (("ViT-Nano/4", 0.5, 1.0), ("ViT-Micro/4", 0.6, 2.0))]
    fig = accuracy_vs_compute(pd.DataFrame(rows))
    assert len(fig.axes) >= MAX_PANELS and fig._suptitle is not None
    assert fig._suptitle.get_text().startswith(f"the first {MAX_PANELS} of {MAX_PANELS + 2} benchmarks shown")


def test_a_swept_max_batch_row_shows_the_batch_found_not_the_search_s_cap(tmp_path):
    # A sweep's row keeps its trial config, whose cap is the field `max_batch_size`, the name of the result too:
    # the GPU check's report showed the cap, 4096, where the search found 2127
    from vitbench.tasks import get_task

    t = get_task("max_batch")
    cfg = t.Params(task="max_batch", model="ViT-Nano/4", backend="torch", device="cpu", mode="train",
                   max_batch_size=4096).config()
    with Store(tmp_path) as st:
        _add(st, "max_batch", cfg, dict(max_batch_size=2127, capped=False, memory_limit_mib=2048.0))
    df = load(tmp_path)
    assert df.loc[0, "max_batch_size"] == 2127 and df.loc[0, "config.max_batch_size"] == 4096
    rep = build_report(tmp_path, formats="csv", plots=False)
    assert list(rep.tables["max_batch"]["max_batch"]) == ["2127"]


def test_the_terminals_max_batch_rows_say_their_devices_and_compile(tmp_path, cli):
    """Three max-batch searches of one model: 1 device (128), 2 devices (64 per device), compiled (96). The
    terminal showed 'ViT-Nano/4  >= 128', 'ViT-Nano/4  96', 'ViT-Nano/4  64' with nothing telling them apart
    (devices, parallelism, compile and device are the table's keys, not columns it printed); each row now says
    its own, and the title says the batch is per device."""
    from vitbench.tasks import get_task

    t = get_task("max_batch")
    with Store(tmp_path / "res") as st:
        for devices, compile_, best in ((1, False, 128), (2, False, 64), (1, True, 96)):
            cfg = t.Params(task="max_batch", model="ViT-Nano/4", backend="torch", device="cpu", mode="infer",
                           devices=devices, compile=compile_, max_batch_size=128).config()
            _add(st, "max_batch", cfg, dict(max_batch_size=best, max_batch_size_global=best * devices,
                                            capped=best >= 128, memory_limit_mib=2048.0))
    rep = build_report(tmp_path / "res", tmp_path / "o", formats="csv", plots=False)
    assert sorted(zip(rep.tables["max_batch"]["devices"], rep.tables["max_batch"]["compile"],
                      rep.tables["max_batch"]["max_batch"])) == [(1, False, "\u2265 128"), (1, True, "96"),
                                                                 (2, False, "64")]
    r = cli("report", tmp_path / "res", "--out", tmp_path / "o2", "--format", "csv", "--no-plots")
    assert r.exit_code == 0, r.output
    text = r.output[r.output.index("Largest batch"):]
    assert "per device" in " ".join(text.split()[:40])
    header = next(line for line in text.splitlines() if "max_batch" in line and "model" in line)
    assert "devices" in header and "compile" in header
    rows = {" ".join(line.split()[1:]) for line in text.splitlines() if line.strip().startswith("ViT-Nano/4")}
    assert rows == {"1 no \u2265 128", "2 no 64", "1 yes 96"}


def test_the_terminal_shows_every_key_that_tells_two_summary_rows_apart(tmp_path, cli):
    """Two compile modes (100 and 150 img/s) and FLOPs at 10 and 1000 classes (0.0045 and 0.0066 GFLOPs): the
    keys compile_mode and num_classes are not among their sections' terminal columns, so the terminal printed
    'ViT-Nano/4 100' beside 'ViT-Nano/4 150' (and 0.0045 beside 0.0066) with nothing saying which is which."""
    with Store(tmp_path / "res") as st:
        for mode, ips in (("default", 100.0), ("max-autotune", 150.0)):
            _add(st, "bench", dict(model="ViT-Nano/4", backend="torch", task="infer", device="cpu", resolution=32,
                                   batch_size=8, precision="fp32", compile=True, compile_mode=mode),
                 dict(img_per_s=ips, unstable=False))
        for classes, g in ((10, 0.0045), (1000, 0.0066)):
            _add(st, "flops", dict(model="ViT-Nano/4", backend="torch", task="flops", resolution=32,
                                   num_classes=classes), dict(gflops=g, gmacs=g / 2, params_m=0.1))
    r = cli("report", tmp_path / "res", "--out", tmp_path / "o", "--format", "csv", "--no-plots")
    assert r.exit_code == 0, r.output
    rows = {" ".join(line.split()[1:]) for line in r.output.splitlines() if line.strip().startswith("ViT-Nano/4")}
    assert rows == {"default 100 100 100", "max-autotune 150 150 150", "10 0.0045", "1000 0.0066"}


def test_the_terminal_folds_only_a_column_that_is_the_same_in_every_row():
    """A column filled in one row of three (the FLOPs table's gflops_xla: only the jax row has an XLA count) was
    printed as the caption's `gflops_xla=...` for every row, and the columns the other rows filled vanished."""
    from rich.console import Console

    from vitbench.cli.study_cmd import _df_table

    df = pd.DataFrame({"model": ["A", "A", "A"], "backend": ["torch", "jax", "onnx"], "res": [32, 32, 32],
                       "gflops_xla": [None, 0.0058, None], "gflops_onnx": [None, None, 0.0045]})
    con = Console(width=200, record=True)
    con.print(_df_table(df, "flops"))
    text = con.export_text()
    assert "every row: res=32" in text and "gflops_xla=" not in text
    assert "gflops_xla" in text and "gflops_onnx" in text and "0.0058" in text and "0.0045" in text


def test_settings_are_read_per_kind_and_a_comparison_across_a_key_never_crosses_a_setting(tmp_path, monkeypatch):
    """A review's three cases: a plug-in metric named `threads` took bench's thread count out of the settings
    (1 and 4 threads pooled again); torch at 1 thread was set beside jax at 4 in the backends table (the setting
    varied only across the key it compares over); the serve table's merge dropped what split it, so the terminal
    hid the resolution column."""
    import vitbench.tasks as tasks_mod
    from vitbench.report import serving
    from vitbench.report.tables import SPLIT_BY, backend_pivot, throughput
    from vitbench.tasks import Metric, Task, get_task, setting_columns

    class Probe(Task):  # a plug-in kind whose metric is named like bench's setting
        name, kind, description = "probe_threads", "probe", "test-only"
        Params = get_task("calibration").Params
        metrics = (Metric("threads", "threads", True, "t"),)

        def run(self, p):
            raise NotImplementedError

    monkeypatch.setattr(tasks_mod, "tasks", lambda include_hidden=False, _t=tasks_mod.tasks: {
        **_t(include_hidden), "probe_threads": Probe})
    assert "threads" in setting_columns(["bench"]) and "config.threads" in setting_columns(["probe"])
    base = dict(model="ViT-Nano/4", task="infer", device="cpu", resolution=32, batch_size=8, precision="fp32",
                compile=False)
    with Store(tmp_path / "b") as st:
        for i, (backend, threads, speed) in enumerate((("torch", 1, 100.0), ("torch", 4, 350.0),
                                                       ("jax", 4, 300.0))):
            _add(st, "bench", {**base, "backend": backend, "threads": threads}, {"img_per_s": speed})
    df = load(tmp_path / "b")
    t = throughput(df)
    assert sorted(zip(t["backend"], t["threads"], t["img_per_s"])) == [("jax", 4, 300.0), ("torch", 1, 100.0),
                                                                      ("torch", 4, 350.0)]
    p = backend_pivot(df)  # jax at 4 threads beside torch at 4, never torch at 1
    assert list(p["threads"]) == [4] and list(p["jax_vs_torch"]) == [300.0 / 350.0], p
    serve = dict(model="ViT-Nano/4", backend="torch", task="serve", device="cpu", precision="fp32",
                 scenario="Server", batch_size=8, max_wait_ms=2.0, latency_bound_ms=100.0, min_duration_s=1.0)
    with Store(tmp_path / "s") as st:
        for res, speed in ((32, 100.0), (64, 30.0)):
            _add(st, "serve", {**serve, "resolution": res}, {"samples_per_s": speed,
                                                             "qps_search_bracket": "VALID up to 1"})
    s = serving.table(load(tmp_path / "s"))
    assert s.attrs.get(SPLIT_BY) == ["resolution"] and "qps_search_bracket" in s.columns
