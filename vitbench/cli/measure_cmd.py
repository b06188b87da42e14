"""`vitbench bench | max-batch | flops | env`: one measurement each; bench, max-batch and flops build their task's
Params (what a study's trial with those fields is) and run the task (vitbench.tasks), env reads the machine."""

from __future__ import annotations

from typing import get_args

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.backends.base import PRECISIONS
from vitbench.backends.kinds import DEFAULT_PARALLELISM, Mode
from vitbench.backends.parallel import parallelism_help
from vitbench.cli import app
from vitbench.cli.common import (PRECISION_HELP, SET_FIELDS_HELP, choice, console, print_json, refuse_unsupported,
                                 shared_option, task_params)
from vitbench.cli.data_options import (
    DATA_PATH,
    DATA_TEST_PATH,
    DATA_WORKERS,
    FORMATS,
    SKIP_CORRUPT,
    SOURCE_OPTIONS,
    CHECK_DATA,
    data_option,
    source,
)
from vitbench.cli.options import cli_option, from_field
from vitbench.errors import ConfigError
from vitbench.measure.timing import TARGET_WINDOWS
from vitbench.numfmt import fmt
from vitbench.tasks import NOT_NUMBERS, run_checked
from vitbench.tasks.bench import Infer, Train
from vitbench.tasks.bench_metrics import DECLARED as BENCH_METRICS
from vitbench.tasks.bench_metrics import REAL_INPUT_TABLE, TABLE
from vitbench.tasks.flops import Flops
from vitbench.tasks.max_batch import CAPPED, MaxBatch
from vitbench.tasks.real_input import REAL_INPUT_PATHS

# Two names, two meanings (issue 52 item 5): a task is what runs (bench runs task infer or train, a study's
# `task`); a mode is the step a task times or probes, forward or a training update (kinds.Mode, Step.mode,
# max_batch's field `mode`). bench's tasks are named for their steps, so `bench --task` picks a task.
_BENCH_TASKS = (Infer.name, Train.name)
_MODES = get_args(Mode)


def _kv_table(title: str, rows: list[tuple[str, object]] | list[tuple[str, object, str]]) -> Table:
    """A table of (field, value) rows, or of (field, value, unit) rows: a third column then."""
    t = Table(title=title, show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", justify="right")
    units = any(len(r) > 2 for r in rows)
    if units:
        t.add_column("unit")
    for k, v, *unit in rows:
        t.add_row(escape(k), escape(fmt(v)), *([escape(unit[0] if unit else "")] if units else []))
    return t


def _print_record(rec) -> None:
    """The record as JSON; exit 1 where it is not ok (an oom or error row is no measurement, with --json too)."""
    from vitbench.record import Status

    print_json(rec.to_dict())
    if rec.status is not Status.OK:
        raise typer.Exit(1)


@app.command("bench")
@FORMATS
def bench_cmd(
    model: str = typer.Argument(..., help="Variant name, e.g. ViT-B/16, R50x1, R50+ViT-B/16, ViT-Nano/4."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_FIELDS_HELP),
    task: str = cli_option("bench_task", help="infer (forward) | train (forward + loss + backward + optimizer "
                                              "step)."),
    batch_size: int = from_field(Infer.Params, "batch_size", "--batch-size", "-b", min=1),
    resolution: int = typer.Option(None, "--resolution", "-r", help="Input size in pixels (default: native)."),
    precision: str = from_field(Infer.Params, "precision", help=PRECISION_HELP),
    backend: str = typer.Option(None, help="A registered backend "
                                           "(`vitbench plugins` lists them; default: the first registered)."),
    device: str = from_field(Infer.Params, "device",
                             help="cpu | cuda | cuda:N (torch); cpu | gpu | tpu (jax)."),
    threads: int = typer.Option(None, help="Intra-op threads (default: the cores others leave free where a "
                                           "backend's pool stalls under load, else the framework's; recorded)."),
    devices: int = typer.Option(None, min=1, help="Local devices (default 1): data parallel over N devices, the "
                                                 "batch split evenly (docs/devices.md)."),
    parallelism: str = typer.Option(None, help=parallelism_help()),
    compile: bool = from_field(Infer.Params, "compile",
                               "--compile/--no-compile", help="torch.compile the model (torch)."),
    compile_mode: str = typer.Option(None, "--compile-mode",
                                     help="With --compile: default | reduce-overhead (CUDA graphs) | max-autotune "
                                          "| max-autotune-no-cudagraphs (torch)."),
    timing: str = from_field(Infer.Params, "timing",
                             help="throughput: windows of steps queued between two device events "
                                  "(img/s) | latency: every step synchronised (p50/p90/p99)."),
    window_steps: int = typer.Option(None, "--window-steps", min=1,
                                     help="throughput: steps per window (default: enough for "
                                          f"{TARGET_WINDOWS} windows to cover the minimums)."),
    optimizer: str = from_field(Train.Params, "optimizer",
                                help="train: adam (paper pre-training) | sgd (momentum 0.9)."),
    channels_last: bool = typer.Option(None, "--channels-last/--no-channels-last",
                                       help="Default: on for BiT and hybrid, off for ViT."),
    warmup: int = from_field(Infer.Params, "warmup_steps",
                             min=0, help="Warm-up steps after the first (kept raw, not in throughput)."),
    min_steps: int = from_field(Infer.Params, "min_steps", min=1, help="Timed steps at least."),
    min_seconds: float = from_field(Infer.Params, "min_seconds", help="Wall-clock seconds of timing at least "
                                    "(gaps between steps included; timed_s sums the steps only)."),
    max_seconds: float = from_field(Infer.Params, "max_seconds",
                                    help="Stop timing after this long even if min_steps is not reached."),
    seed: int = from_field(Infer.Params, "seed"),
    data: str = data_option(" With --task train: also train on this dataset's images for --data-steps "
                            "and report real-input img/s beside the synthetic figure."),
    data_path: str = DATA_PATH, data_test_path: str = DATA_TEST_PATH, skip_corrupt: bool = SKIP_CORRUPT,
    data_workers: int = DATA_WORKERS, formats=None, check_data: bool = CHECK_DATA,
    data_steps: int = from_field(Train.Params, "real_input_steps", "--data-steps", min=1,
                                 help="With --data: timed training steps on the real images at least (windows, "
                                      "warm-up, --min-seconds and --max-seconds as the synthetic run)."),
    as_json: bool = cli_option("json", "--json", help="Print the whole record (with raw step times) as JSON."),
) -> None:
    """Throughput of one model: img/s, step time, spread, first-step/compile time, memory, energy, MFU.

    The first step (compilation, allocator warm-up) and the warm-up steps are timed apart and never enter the
    numbers. --timing throughput (default) queues windows of steps between two device events, as timm's
    benchmark and TorchBench do; --timing latency synchronises every step and reports per-step p50/p90/p99.
    MFU divides by the device's peak for the precision: a datasheet peak (NVIDIA, TPU) or the best matmul any
    backend has shown on this device. Unstable measurements (high CV, other load, GPU slowdown) are flagged.
    """
    from vitbench.record import Status

    values = dict(model=model, backend=backend, batch_size=batch_size, resolution=resolution,
                  precision=precision, compile=compile, compile_mode=compile_mode, device=device, threads=threads,
                  channels_last=channels_last, seed=seed, warmup_steps=warmup, min_steps=min_steps,
                  min_seconds=min_seconds, max_seconds=max_seconds, timing=timing, window_steps=window_steps,
                  devices=devices, parallelism=parallelism)
    # the real-input run (train's real_input_* fields, vitbench.tasks.real_input), named by these options
    given = source(data, data_path, data_test_path, skip_corrupt, data_workers, check_data=check_data,
                   **vars(formats))
    real = {field: given[path] for field, path in REAL_INPUT_PATHS.items() if path in given}
    train_only = dict(optimizer=optimizer, real_input_steps=data_steps, **real)
    if choice(task, _BENCH_TASKS, "--task") == Train.name:
        values.update(train_only)
    elif data is not None:
        raise ConfigError("--data measures training with real input: use it with --task train")
    else:  # train's settings given to infer were dropped in silence (--optimizer sgd, --data-path ...)
        fields = Train.Params.model_fields
        given = [f for f, v in train_only.items() if v != fields[f].get_default(call_default_factory=False)]
        if given:
            names = {"optimizer": "--optimizer", "real_input_steps": "--data-steps", **_REAL_INPUT_OPTIONS}
            one = len(given) == 1
            raise ConfigError(f"{', '.join(names[f] for f in given)}: {'a setting' if one else 'settings'} of "
                              f"--task train (with --data for real input), ignored by --task {task}: leave "
                              f"{'it' if one else 'them'} unset")
    t, params = task_params(task, _REAL_INPUT_OPTIONS, sets, command=bench_cmd, **values)
    rec = run_checked(t, params)  # with --data: the synthetic run, then the real images timed alike (one row)
    if as_json:
        _print_record(rec)
        return
    if rec.status is not Status.OK:
        console.print(f"[red]{rec.status}[/]: {escape(rec.error.message) if rec.error else ''}")
        raise typer.Exit(1)
    console.print(_kv_table(escape(_bench_title(rec)), _bench_rows(rec)))
    if "real_input_img_per_s" in rec.metrics:
        m = rec.metrics
        console.print(_kv_table(escape(f"with real input: {m['real_input_source']} (the transfer training loop, "
                                       f"timed as above: {m['real_input_windows']} windows of "
                                       f"{m['real_input_window_steps']} steps, warm-up and compile apart)"),
                                _declared_rows(m, REAL_INPUT_TABLE)))
    _print_warnings(rec)


# train's real-input fields -> the bench options that set them (read from the data options' declarations)
_REAL_INPUT_OPTIONS = {field: SOURCE_OPTIONS[path] for field, path in REAL_INPUT_PATHS.items()
                       if path in SOURCE_OPTIONS}


def _bench_title(rec) -> str:
    m, c = rec.metrics, rec.config
    compiled = f" | compile {m.get('compile_mode')}" if c.get("compile") else ""
    return (f"{c['model']} {c['task']} | {c['backend']} {c['device']} {c['precision']}{compiled} | "
            f"batch {m['batch_size_achieved']}{_group(rec)} @ {c['resolution']}px | {rec.env.get('threads')} threads | "
            f"{c['timing']} timing")


def _group(rec) -> str:
    """' over 2 devices (dp, gloo)' for a multi-device row, '' for one device (its config has no `devices`)."""
    c = rec.config
    if "devices" not in c:
        return ""
    return f" over {c['devices']} devices ({c.get('parallelism', DEFAULT_PARALLELISM)}, {rec.metrics.get('collective_backend')})"


def _bench_rows(rec) -> list[tuple[str, object, str]]:
    """The table of a bench record: the metrics tasks/bench_metrics.py's TABLE names, as the row holds them (null:
    left out), each with its declared unit; beside a few names, what this row's value is of."""
    m = rec.metrics
    qualifiers = {"windows": f"of {m.get('window_steps')} steps",
                  "peak_mem_mib": f"steady, {m.get('memory_kind')}", "compile_peak_mem_mib": "build..warm-up",
                  "peak_tflops": _peak_where(m)}
    values = {"matmul_precision": f"{m.get('matmul_precision')} ({m.get('matmul_settings')})"}
    return _declared_rows(m, TABLE, qualifiers, values)


def _declared_rows(m: dict, names: tuple[str, ...], qualifiers: dict[str, str] | None = None,
                   values: dict[str, object] | None = None) -> list[tuple[str, object, str]]:
    """(name [(qualifier)], value, unit) of each of `names` the metrics `m` hold a value of, the unit declared
    (tasks/bench_metrics.py; none shown for a text or a flag)."""
    rows = []
    for name in names:
        if m.get(name) is None:
            continue
        unit = BENCH_METRICS[name].unit
        q = (qualifiers or {}).get(name)
        rows.append((f"{name} ({q})" if q else name, (values or {}).get(name, m[name]),
                     "" if unit in NOT_NUMBERS else unit))
    return rows


def _peak_where(m: dict) -> str:
    if m.get("peak_source") == "datasheet":
        return f"datasheet: {m.get('peak_by')}"
    return (f"{m.get('peak_source')}: best matmul shown here, by {m.get('peak_by')} at {m.get('peak_measured_at')}"
            + (", provisional: measured while busy" if m.get("peak_provisional") else ""))


def _print_warnings(rec) -> None:
    m = rec.metrics
    if m.get("unstable"):
        console.print(f"[yellow]unstable measurement:[/] {escape(str(m.get('noise')))}", highlight=False)
    if m.get("mfu_over_peak") is not None:
        if m.get("peak_source") == "datasheet":
            console.print(f"[red]model FLOP/s are {m['mfu_over_peak']:.2f}x the datasheet peak:[/] the precision "
                          "in force is not the row's, or the device matched the wrong datasheet row; mfu capped "
                          "at 1", highlight=False)
        else:
            console.print(f"[yellow]this step beat the measured peak ({m['mfu_over_peak']:.2f}x):[/] the peak "
                          "was raised to its model FLOP/s (mfu 1)", highlight=False)


@app.command("max-batch")
def max_batch_cmd(
    model: str = typer.Argument(..., help="Variant name."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_FIELDS_HELP),
    mode: str = from_field(MaxBatch.Params, "mode", "--mode", "--task",
                           help="infer | train: the step probed (--task: its older spelling, kept)."),
    resolution: int = typer.Option(None, "--resolution", "-r"),
    precision: str = from_field(MaxBatch.Params, "precision", help=PRECISION_HELP),
    backend: str = typer.Option(None, help="A registered backend "
                                           "(`vitbench plugins` lists them; default: the first registered)."),
    device: str = from_field(MaxBatch.Params, "device"),
    threads: int = typer.Option(None),
    devices: int = typer.Option(None, min=1, help="Local devices (default 1): the batch searched is per device, "
                                                 "each probe runs the N-device step (docs/devices.md)."),
    parallelism: str = typer.Option(None, help=parallelism_help()),
    optimizer: str = from_field(Train.Params, "optimizer",
                                help="train: adam | sgd (optimizer state counts toward memory)."),
    memory_limit_gib: float = typer.Option(
        None, "--memory-limit-gib",
        help="Budget for the probe process's peak memory. CPU default: half the memory available now; "
             "GPU default: none (a real out-of-memory error decides)."),
    max_batch_size: int = from_field(MaxBatch.Params, "max_batch_size",
                                     "--max-batch-size", min=1, help="Stop doubling here."),
    start: int = from_field(MaxBatch.Params, "start", min=1, help="First batch size probed."),
    granularity: int = from_field(MaxBatch.Params, "granularity",
                                  min=1, help="Bisect until fitting and failing batches are this close."),
    probe_timeout_s: float = from_field(MaxBatch.Params, "probe_timeout_s",
                                        "--probe-timeout-s", "--probe-timeout",
                                        help="Seconds before a probe is killed and counted as failing."),
    as_json: bool = cli_option("json", "--json"),
) -> None:
    """Largest batch that fits: doubling probes, then bisection; every probe in a fresh process.

    On CPU the probe's resident memory is watched and the probe is killed the moment it passes the budget, so a
    search cannot take the machine down. Every probe is reported.
    """
    from vitbench.record import Status

    t, p = task_params("max_batch", None, sets, command=max_batch_cmd, model=model, backend=backend,
                       mode=choice(mode, _MODES, "--mode"),
                       resolution=resolution, precision=precision, device=device, threads=threads,
                       memory_limit_gib=memory_limit_gib, max_batch_size=max_batch_size, start=start,
                       granularity=granularity, probe_timeout_s=probe_timeout_s, devices=devices,
                       parallelism=parallelism, optimizer=optimizer)
    rec = run_checked(t, p)
    if as_json:
        _print_record(rec)
        return
    t = Table(title=escape(f"probes: {rec.config['model']} {p.mode} @ {rec.config['resolution']}px"))
    for col in ("batch", "fits", "status", "peak_mem_mib", "process_peak_mib", "seconds"):
        t.add_column(col, justify="right")
    for pr in rec.raw["probes"]:
        t.add_row(str(pr["batch"]), "yes" if pr["fits"] else "no", pr["status"],
                  f"{pr['peak_mem_mib']:.0f}" if pr["peak_mem_mib"] is not None else "-",
                  f"{pr['process_peak_mib']:.0f}" if pr["process_peak_mib"] is not None else "-",
                  f"{pr['seconds']:.1f}")
    console.print(t)
    m = rec.metrics
    budget = f"{m['memory_limit_mib']:.0f} MiB" if m["memory_limit_mib"] else "device memory"
    per = f" per device (x {rec.config['devices']} devices)" if "devices" in rec.config else ""
    console.print(f"max_batch_size = [bold]{m['max_batch_size']}[/]{per}{' (capped)' if m[CAPPED] else ''} "
                  f"(budget {budget}, {m['probes']} probes, {m['search_s']:.1f} s)")
    if rec.status is not Status.OK:
        console.print(f"[red]{rec.status}[/]: {escape(rec.error.message) if rec.error else ''}")
        raise typer.Exit(1)
    if m.get("limit_note"):  # what bounded the search was not memory (a probe's time): said, not a failure
        console.print(f"[yellow]note:[/] {escape(m['limit_note'])}", highlight=False)


@app.command("flops")
def flops_cmd(
    model: str = typer.Argument(..., help="Variant name."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_FIELDS_HELP),
    resolution: int = typer.Option(None, "--resolution", "-r"),
    num_classes: int = typer.Option(None, "--num-classes"),
    backend: str = typer.Option(None, help="A registered backend "
                                           "(`vitbench plugins` lists them; default: the first registered): whose "
                                           "FLOP counters run."),
    count: bool = from_field(Flops.Params, "count", "--count/--no-count",
                             help="Also run the framework counters (builds the model)."),
    images: int = from_field(Flops.Params, "exaflops_images", "--images",
                             help="Pre-training images per epoch (with --epochs): prints exaFLOPs."),
    epochs: float = from_field(Flops.Params, "exaflops_epochs", "--epochs",
                               help="Pre-training epochs (with --images)."),
    as_json: bool = cli_option("json", "--json"),
) -> None:
    """Params, GMACs and GFLOPs of one image (1 MAC = 2 FLOPs): analytic formula vs the framework's counters.

    Attention is counted: the model runs with unfused attention while counting (fvcore and FlopCounterMode do
    not see fused scaled_dot_product_attention). Pre-training compute (--images N --epochs E) follows the paper's
    convention: forward + backward for every image seen, backward = 2 x forward, so
    exaFLOPs = 3 x forward GFLOPs x N x E / 1e9.
    """
    t, p = task_params("flops", None, sets, command=flops_cmd, model=model, resolution=resolution, backend=backend,
                       num_classes=num_classes, count=count, exaflops_images=images, exaflops_epochs=epochs)
    rec = run_checked(t, p)
    if as_json:
        _print_record(rec)
        return
    m, c = rec.metrics, rec.config
    t = Table(title=escape(f"{c['model']} @ {c['resolution']}px, {c['num_classes']} classes, "
                           f"params {m['params_m']:.3f} M"))
    for col in ("method", "GMACs", "GFLOPs", "vs analytic", "excludes"):
        t.add_column(col, justify="left" if col in ("method", "excludes") else "right")
    ex = rec.raw["excludes"]
    t.add_row("analytic", f"{m['gmacs']:.4f}", f"{m['gflops']:.4f}", "-", ex["analytic"])
    for name in ex:
        if name != "analytic":
            t.add_row(name, f"{m[f'gmacs_{name}']:.4f}", f"{m[f'gflops_{name}']:.4f}",
                      f"{100 * m[f'rel_diff_{name}']:+.2f} %", ex[name])
    console.print(t)
    if "pretrain_exaflops" in m:
        console.print(f"pre-training compute: {m['pretrain_exaflops']:.6g} exaFLOPs "
                      f"({images} images x {epochs} epochs x 3 x forward)")


@app.command("env")
def env_cmd(
    backend: str = typer.Option(None, help="A registered backend "
                                           "(`vitbench plugins` lists them; default: the first registered)."),
    device: str = from_field(Infer.Params, "device"),
    threads: int = typer.Option(None),
    precision: str = from_field(Infer.Params, "precision", help="Precision of the peak."),
    refresh: bool = cli_option("refresh", "--refresh", help="Re-measure the peak with every backend (it only "
                                                            "rises)."),
    as_json: bool = cli_option("json", "--json"),
) -> None:
    """This machine: versions, device, CPU, threads, git SHA, and the device's peak (the MFU denominator).

    The peak is the device's datasheet dense peak for the precision where one exists (NVIDIA GPUs, TPUs), else
    the best matmul any backend has shown on this device (several sizes, cached per machine, device, precision
    and threads in ~/.cache/vitbench/peaks.json). `vitbench doctor` checks more. The cache directory (peaks and the
    persistent compile caches; $VITBENCH_CACHE_DIR moves it, $VITBENCH_COMPILE_CACHE=0 turns compile caching off)
    is shown as `cache_dir`, the backend's compile cache as `compile_cache`.
    """
    from vitbench.backends.base import default_backend, get_backend
    from vitbench.env import environment, lock_differences
    from vitbench.measure.peak import device_peak
    from vitbench.paths import cache_dir

    be = get_backend(shared_option("backend", backend) or default_backend())
    # a precision the device has not (tf32 on a CPU): refused as `bench` refuses it, before any setup
    refuse_unsupported(be.name, {"precision": choice(precision, PRECISIONS, "--precision"), "device": device})
    info = be.setup(device, shared_option("threads", threads))
    peak = device_peak(be, precision, info.get("threads"), refresh=refresh, remeasure_provisional=True)
    env = {**environment(info), "cache_dir": str(cache_dir())}
    differ, not_installed = lock_differences()
    if as_json:
        print_json({"env": env, "peak": peak.metrics() if peak else None, "lock": {
            "differ": [{"name": n, "installed": have, "locked": want} for n, have, want in differ],
            "not_installed": not_installed}})
        return
    rows = [(k, v) for k, v in env.items() if v is not None]
    if peak is not None:
        rows.append((f"peak {precision} (TFLOP/s, {peak.source.value})", peak.tflops))
        rows.append(("peak from", peak.by + (f" at {peak.at}" if peak.at else "")
                     + (" (provisional: measured while busy)" if peak.provisional else "")))
    console.print(_kv_table("vitbench env", rows))
    if differ:
        console.print(f"[yellow]{len(differ)} installed package(s) differ from vitbench's lock[/] (tested "
                      "versions; reinstall with `pip install -c vitbench/requirements.lock -e '.[all]'`):")
        for name, have, want in differ:
            console.print(f"  {name} {have} (lock {want})", highlight=False)
