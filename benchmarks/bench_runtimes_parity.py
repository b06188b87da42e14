"""vitbench's number for an inference runtime against the runtime's own timing loop, on one pinned CPU (issue 53:
"vitbench within 5 % of the runtime's own tool").

For each round, batch size and runtime, vitbench's leg and the runtime's own loop each run in a process of their
own, both pinned to the same CPU(s) (`--cpus`; default: the last CPU this process may use), scheduled one of two
ways (`--schedule`):

- `turns` (the default): both processes at once, taking turns through one referee (vitbench.compare.turns.Referee,
  used as a library; the protocol: vitbench.turns), one timed inference a turn on each side, so the two sides'
  timed windows alternate tens of milliseconds apart and a slowdown of the CPU lasting longer than a window (this
  VM's vCPU slows for about a second at a time: docs/compare.md, "Cores that differ") lands on both. The loop
  starts first and holds the turn while it loads the graph and makes its untimed runs; vitbench's process starts
  once the loop holds it, and takes it for its whole run (`vitbench.turns.held()` around the CLI: `vitbench bench`
  runs its task in its own process), handing it over after each timed step (its latency loop). The loop makes N
  timed runs, vitbench N + 1 timed steps: the windows go vitbench, loop, vitbench, ..., loop, vitbench, each while
  the other process waits, and neither process's start or exit lies beside the other's timed window. A wait for
  the turn is never inside a time. Each round's JSON line keeps both sides' raw window times, the referee's log
  (who held the turn, when) and the ratio of each window pair;
- `alternate`: the two legs one after the other, their order swapped every round (vitbench first in even rounds,
  the loop first in odd ones), so a CPU that speeds up or slows down between moments weighs on both sides alike
  over rounds, though not within one.

The legs:

- vitbench: `vitbench bench MODEL --backend RUNTIME -b B --precision fp32 --threads T --timing latency
  --warmup W --min-steps N --min-seconds 0`: its first step and W warm-up steps untimed, then exactly N timed
  steps (N + 1 with `turns`); its number is batch / the median step;
- the runtime's own loop, on the very graph file vitbench's row ran (found by the row's graph key in its compile
  cache; every vitbench leg's key is checked to be the one the reference ran: the key holds vitbench's source, so
  an edit to it during the run exports a new graph and leaves that pair out; run it on a frozen checkout, e.g. a
  `git worktree` of HEAD with PYTHONPATH set to it), the same threads, 1 + W untimed runs and N timed ones:
  - onnxruntime: benchmarks/ort_perf_loop.py, the loop onnxruntime_perf_test runs, its session options (its
    docstring says which, from the tool's source); the tool itself is not in the pip wheel;
  - openvino, `turns`: benchmarks/ov_perf_loop.py, benchmark_app's configuration, compiled model and sync loop
    and its statistic written out from the tool's source (benchmark_app cannot take turns; a test holds the two
    compiled models' properties equal), 1 + W untimed runs;
  - openvino, `alternate`: OpenVINO's `benchmark_app` (shipped in the wheel) on the IR, `-niter N -api sync
    -nstreams 1 -nthreads T -infer_precision f32 -hint none -shape [B,3,R,R]`, its median latency (it runs one
    untimed first inference: with W > 0 its legs still run one, said in the output);
  their number is batch / the median run (openvino: benchmark_app's median, of OpenVINO's own `latency`).

Per round the ratio vitbench img/s / reference img/s (> 1: vitbench reads faster), each side's number from all its
timed windows; per runtime and batch size the rounds' ratios, their median and their range. With `--cpu-time`
each leg also records the process CPU time of every timed step (vitbench's CLI run through a wrapper that reads it
around each timed step; the loops read it themselves; benchmark_app gives none) and the ratio of the medians of
CPU time: on a CPU shared with others it leaves out the waits, though not the slowdown of sharing caches and the
core (at a load of 9 on this 2-core VM a ViT-B/16 step's CPU time still moved by 1.6x between processes: not a
substitute for a quiet host).
`--loop-import MODULE` has the ONNX Runtime loop import a module first (torch, vitbench...): a gap that closes with
it comes from what vitbench's process has loaded, not from what it asks of the runtime. Say the load with the
figures (uptime is printed before and after; each vitbench leg records `other_load_cores`).

    python benchmarks/bench_runtimes_parity.py                                    # ViT-B/16, batch 1 and 8
    python benchmarks/bench_runtimes_parity.py --model ViT-Nano/4 --resolution 32 --rounds 2 --cpu-time
    python benchmarks/bench_runtimes_parity.py --schedule alternate               # the legs one after the other
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIMES = ("onnxruntime", "openvino")
LOOPS = {"onnxruntime": "ort_perf_loop.py", "openvino": "ov_perf_loop.py"}  # each runtime's own loop
SCHEDULES = ("turns", "alternate")

# vitbench's CLI (PLAIN_CLI below), each timed step's process CPU time recorded around it (`--cpu-time`) and
# printed to stderr at exit; the timed steps are Backend.time_steps' (latency timing), whose wall times the record
# keeps.
CPU_TIMED_CLI = r"""
import atexit, json, sys, time
from vitbench.backends import base
cpu_s = []
time_steps = base.Backend.time_steps
def cpu_timed(self, work, stop):
    step = work.step
    def counted():
        c0 = time.process_time()
        out = step()
        cpu_s.append(time.process_time() - c0)
        return out
    work.step = counted
    return time_steps(self, work, stop)
base.Backend.time_steps = cpu_timed
atexit.register(lambda: print("CPU_S " + json.dumps(cpu_s), file=sys.stderr))
"""
# vitbench's CLI, holding the turn (vitbench.turns; nothing without VITBENCH_TURNS) while it runs: `vitbench bench`
# runs its task in its own process, not through vitbench.trial.run_trial, which takes the turn for `vitbench ab`.
PLAIN_CLI = """
from vitbench import turns
from vitbench.cli import main
with turns.held():
    main()
"""
CPU_TIMED_CLI += PLAIN_CLI


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run_pinned(cmd: list[str], cpus: set[int], timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=lambda: os.sched_setaffinity(0, cpus))


def last_line(p: subprocess.CompletedProcess) -> str:
    lines = [x for x in (p.stderr or p.stdout).strip().splitlines() if not x.startswith("CPU_S ")]
    return lines[-1] if lines else f"exit {p.returncode}"


def vitbench_cmd(runtime: str, batch: int, steps: int, args) -> list[str]:
    cmd = [sys.executable, "-c", CPU_TIMED_CLI if args.cpu_time else PLAIN_CLI, "bench", args.model, "--backend",
           runtime, "-b", str(batch), "--precision", "fp32", "--threads", str(args.threads), "--timing", "latency",
           "--warmup", str(args.warmup), "--min-steps", str(steps), "--min-seconds", "0", "--max-seconds",
           str(args.timeout), "--seed", str(args.seed), "--json"]
    return cmd + (["-r", str(args.resolution)] if args.resolution else [])


def vitbench_leg(runtime: str, batch: int, steps: int, args) -> dict:
    return vitbench_result(run_pinned(vitbench_cmd(runtime, batch, steps, args), args.cpu_set, args.timeout))


def vitbench_result(p) -> dict:
    """vitbench's row (its `--json` output) from a finished process, or the error it ended with."""
    if p.returncode != 0:
        return {"error": last_line(p)}
    rec = json.loads(p.stdout[p.stdout.index("{"):])
    if rec.get("status") != "ok":
        return {"error": f"status {rec.get('status')}: {rec.get('error')}"}
    m, settings = rec["metrics"], rec["raw"].get("settings", {})
    out = {"img_per_s": m["img_per_s"], "step_ms_median": m["step_ms_median"], "step_s": rec["raw"]["step_s"],
           "other_load_cores": m.get("other_load_cores"), "threads": rec["env"].get("threads"),
           "graph": settings.get("graph"), "compile_cache": rec["env"].get("compile_cache")}
    cpu = [ln for ln in p.stderr.splitlines() if ln.startswith("CPU_S ")]
    if cpu:
        out["cpu_s"] = json.loads(cpu[-1][len("CPU_S "):])
    return out


def loop_cmd(runtime: str, graph: Path, batch: int, res: int, steps: int, args) -> list[str]:
    """The runtime's own loop in a process that can take turns: ort_perf_loop.py or ov_perf_loop.py."""
    cmd = [sys.executable, str(HERE / LOOPS[runtime]), str(graph), "--batch", str(batch), "--resolution", str(res),
           "--threads", str(args.threads), "--warmup", str(1 + args.warmup), "--runs", str(steps), "--seed",
           str(args.seed)]
    return cmd + [x for m in args.loop_import for x in ("--import", m)] if runtime == "onnxruntime" else cmd


def loop_result(runtime: str, batch: int, p) -> dict:
    """A loop's output: its per-run times (seconds; openvino's are its `request.latency`, benchmark_app's
    measure) and its statistic (ort: the median; openvino: benchmark_app's percentile 50)."""
    if p.returncode != 0:
        return {"error": last_line(p)}
    d = json.loads(p.stdout)
    windows = d["step_s"] if runtime == "onnxruntime" else [ms / 1e3 for ms in d["step_ms"]]
    return {"img_per_s": batch / (d["step_ms_median"] / 1e3), "step_ms_median": d["step_ms_median"],
            "step_ms_mean": d["step_ms_mean"], "window_s": windows, "wall_s": d["step_s"], "cpu_s": d["cpu_s"],
            "turn_wait_s": d["turn_wait_s"]}


def ort_leg(graph: Path, batch: int, res: int, steps: int, args) -> dict:
    p = run_pinned(loop_cmd("onnxruntime", graph, batch, res, steps, args), args.cpu_set, args.timeout)
    return loop_result("onnxruntime", batch, p)


def openvino_leg(graph: Path, batch: int, res: int, steps: int, args) -> dict:
    exe = Path(sys.executable).with_name("benchmark_app")
    cmd = [str(exe), "-m", str(graph), "-d", "CPU", "-shape", f"[{batch},3,{res},{res}]", "-api", "sync",
           "-nstreams", "1", "-nthreads", str(args.threads), "-infer_precision", "f32", "-hint", "none",
           "-niter", str(steps)]
    p = run_pinned(cmd, args.cpu_set, args.timeout)
    out = p.stdout + p.stderr
    med, count = latency_ms(out, "Median"), re.search(r"Count:\s+(\d+)\s+iterations", out)
    if p.returncode != 0 or med is None:
        return {"error": out.strip().splitlines()[-1] if out.strip() else f"exit {p.returncode}"}
    return {"img_per_s": batch / (med / 1e3), "step_ms_median": med, "step_ms_mean": latency_ms(out, "Average"),
            "iterations": int(count.group(1)) if count else None}


def latency_ms(out: str, which: str) -> float | None:
    """A latency line of benchmark_app's report ("Median:  143.83 us", "Average:  2.01 ms") in ms."""
    m = re.search(rf"{which}:\s+([\d.]+)\s+(ms|us)\b", out)
    return None if m is None else float(m.group(1)) * (1e-3 if m.group(2) == "us" else 1.0)


def reference_leg(runtime: str, graph: Path, batch: int, res: int, steps: int, args) -> dict:
    leg = ort_leg if runtime == "onnxruntime" else openvino_leg
    return leg(graph, batch, res, steps, args)


def turns_pair(runtime: str, graph: Path, batch: int, res: int, steps: int, args) -> dict:
    """One round of the `turns` schedule: the runtime's own loop and vitbench's bench run at the same time on the
    same CPU(s), taking turns through one referee (vitbench.compare.turns.Referee), window by window (a window: one
    timed inference on each side). The loop starts first and holds the turn while it loads the graph and makes its
    untimed runs; vitbench starts once the loop holds the turn, and its first timed step follows its own untimed
    ones. The loop runs `steps` timed runs and vitbench `steps` + 1 timed steps, so the timed windows go
    vitbench, loop, vitbench, ..., loop, vitbench, each while the other process waits for the turn (neither
    process's start or exit lies beside the other's timed window). The referee's log says who held the turn when.
    """
    from vitbench.compare.turns import Referee

    ref = Referee(("reference", "vitbench"), in_step=False)  # vitbench starts once the loop holds the turn
    procs, outs = {}, {}

    def start(side: str, cmd: list[str]) -> None:
        procs[side] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env={**os.environ, **ref.env(side)},
                                       preexec_fn=lambda: os.sched_setaffinity(0, args.cpu_set))

        def wait() -> None:  # the side's output; once it has ended, the other no longer waits for it
            try:
                out, err = procs[side].communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                procs[side].kill()
                out, err = procs[side].communicate()
            outs[side] = subprocess.CompletedProcess(cmd, procs[side].returncode, out, err)
            ref.finished(side)
        waiters.append(threading.Thread(target=wait, daemon=True))
        waiters[-1].start()

    waiters: list[threading.Thread] = []
    t0 = time.perf_counter()
    try:
        start("reference", loop_cmd(runtime, graph, batch, res, steps, args))
        while ref.turns["reference"] < 1 and "reference" not in outs and time.perf_counter() - t0 < args.timeout:
            time.sleep(0.01)
        start("vitbench", vitbench_cmd(runtime, batch, steps + 1, args))
        for w in waiters:
            w.join()
        log = [(side, round(t - t0, 6)) for side, t in ref.log]
    finally:
        ref.close()
    ours = vitbench_result(outs["vitbench"])
    theirs = loop_result(runtime, batch, outs["reference"])
    sides = "".join("v" if side == "vitbench" else "r" for side, _ in log)
    pair = {"vitbench": ours, "reference": theirs, "turns": sides, "turn_log": log,
            "repeats": sum(a == b for a, b in zip(sides, sides[1:]))}
    if "step_s" in ours and "window_s" in theirs:  # window i of each side, next to each other in time
        pair["window_ratios"] = [r / v for v, r in zip(ours["step_s"], theirs["window_s"])]
    return pair


def graph_of(row: dict, runtime: str) -> Path | None:
    if not row.get("graph") or not row.get("compile_cache"):
        return None
    if runtime == "onnxruntime":  # the file each backend writes (imported here: both load their runtime)
        from vitbench.backends.onnxruntime.backend import FP32_FILE as name
    else:
        from vitbench.backends.openvino.backend import IR_FILE as name
    path = Path(row["compile_cache"]) / row["graph"] / name
    return path if path.exists() else None


ISSUE_BOUND = 0.05  # issue 53's "Done when": vitbench within 5 % of the runtime's own tool


def spread(xs: list[float]) -> str:
    """Median, range and the geometric standard deviation of the rounds' ratios, and how many rounds lie within
    the issue's 5 %."""
    if not xs:
        return "no rounds"
    sd = statistics.stdev(math.log(x) for x in xs) if len(xs) > 1 else float("nan")
    within = sum(abs(x - 1) <= ISSUE_BOUND for x in xs)
    return (f"median {statistics.median(xs):.3f}  range [{min(xs):.3f}, {max(xs):.3f}]  "
            f"sd(log) {sd:.3f}  within 5 %: {within} of {len(xs)} rounds  ({', '.join(f'{x:.3f}' for x in xs)})")


def options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B/16")
    ap.add_argument("--resolution", type=int, default=None, help="pixels (default: the model's)")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES), help=f"among {', '.join(RUNTIMES)}")
    ap.add_argument("--schedule", default="turns", choices=SCHEDULES,
                    help="turns: both at once on the same CPU(s), taking turns window by window (default); "
                         "alternate: one after the other, their order swapped every round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10, help="timed steps of each leg")
    ap.add_argument("--warmup", type=int, default=0,
                    help="vitbench's warm-up steps after its first; the loop runs 1 + this untimed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpus", default=None, help="CPUs every leg is pinned to, e.g. 1 or 0,1 (default: the last "
                                                 "CPU this process may use)")
    ap.add_argument("--cpu-time", action="store_true", help="record each timed step's process CPU time too")
    ap.add_argument("--loop-import", action="append", default=[], metavar="MODULE",
                    help="onnxruntime: a module the loop imports first, repeatable (e.g. torch, "
                         "vitbench.backends.onnxruntime.backend: whether vitbench's process makes the gap)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds, per leg")
    a = ap.parse_args()
    allowed = os.sched_getaffinity(0)
    try:
        a.cpu_set = {int(c) for c in a.cpus.split(",")} if a.cpus else {max(allowed)}
        a.batch_sizes = [int(b) for b in a.batches.split(",")]
    except ValueError:
        ap.error(f"--cpus and --batches take comma-separated integers, got {a.cpus!r} and {a.batches!r}")
    if not a.cpu_set <= allowed:
        ap.error(f"--cpus {a.cpus}: this process may use CPUs {sorted(allowed)} only")
    a.runtime_list = a.runtimes.split(",")
    if bad := [r for r in a.runtime_list if r not in RUNTIMES]:
        ap.error(f"--runtimes: {', '.join(bad)} not among {', '.join(RUNTIMES)}")
    for name in ("rounds", "steps", "threads"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0 or min(a.batch_sizes) < 1:
        ap.error("--warmup must be >= 0 and every batch size >= 1")
    return a


def main() -> None:
    args = options()
    from vitbench.models.specs import get_spec

    res = args.resolution or get_spec(args.model).resolution
    print(json.dumps({"uptime_start": uptime(), "cpus": sorted(args.cpu_set), "model": args.model,
                      "resolution": res, "threads": args.threads, "steps": args.steps, "warmup": args.warmup}),
          flush=True)
    graphs = {}
    for runtime in args.runtime_list:  # each graph exported (or found) once, before every leg: one for all batches
        row = vitbench_leg(runtime, 1, 1, args)
        graphs[runtime] = graph_of(row, runtime)
        print(json.dumps({"prepare": runtime, "graph": str(graphs[runtime]), "error": row.get("error")}),
              flush=True)
        if graphs[runtime] is None:
            sys.exit(f"{runtime}: no graph file from vitbench's row ({row.get('error', 'no graph in the row')})")
    ratios: dict[tuple, list[float]] = {}
    cpu_ratios: dict[tuple, list[float]] = {}
    wall_ratios: dict[tuple, list[float]] = {}  # openvino's loop: its wall time around infer(), as vitbench times

    def checked(leg: dict, runtime: str) -> dict:
        ran = graph_of(leg, runtime) if "graph" in leg else graphs[runtime]
        if ran != graphs[runtime]:  # vitbench's source changed under the run: the graph's key too
            graphs[runtime] = ran or graphs[runtime]
            return {"error": f"ran graph {ran}, not the reference's: pair left out, the next rounds use the new "
                             "graph"}
        return leg

    for r in range(args.rounds):
        for batch in args.batch_sizes:
            for runtime in args.runtime_list:
                if args.schedule == "turns":
                    pair = turns_pair(runtime, graphs[runtime], batch, res, args.steps, args)
                    pair["vitbench"] = checked(pair["vitbench"], runtime)
                    print(json.dumps({"round": r, "batch": batch, "runtime": runtime, "schedule": "turns",
                                      **pair}), flush=True)
                    ours, theirs = pair["vitbench"], pair["reference"]
                else:
                    legs = {}
                    for who in (("vitbench", "reference") if r % 2 == 0 else ("reference", "vitbench")):
                        legs[who] = (checked(vitbench_leg(runtime, batch, args.steps, args), runtime)
                                     if who == "vitbench" else
                                     reference_leg(runtime, graphs[runtime], batch, res, args.steps, args))
                        print(json.dumps({"round": r, "batch": batch, "runtime": runtime, "who": who,
                                          **legs[who]}), flush=True)
                    ours, theirs = legs["vitbench"], legs["reference"]
                if "img_per_s" in ours and "img_per_s" in theirs:
                    ratios.setdefault((runtime, batch), []).append(ours["img_per_s"] / theirs["img_per_s"])
                    if ours.get("cpu_s") and theirs.get("cpu_s"):
                        cpu_ratios.setdefault((runtime, batch), []).append(
                            statistics.median(theirs["cpu_s"]) / statistics.median(ours["cpu_s"]))
                    if runtime == "openvino" and theirs.get("wall_s"):
                        wall_ratios.setdefault((runtime, batch), []).append(
                            statistics.median(theirs["wall_s"]) / statistics.median(ours["step_s"]))
    print(json.dumps({"uptime_end": uptime()}), flush=True)
    more = " (vitbench's one more)" if args.schedule == "turns" else ""
    print(f"\n{args.model} @ {res}px, fp32, {args.threads} thread(s), CPUs {sorted(args.cpu_set)}, {args.steps} "
          f"timed steps a leg{more}, schedule {args.schedule}, vitbench img/s over the runtime's own loop's "
          f"(batch / median step), per round:")
    for runtime in args.runtime_list:
        tool = LOOPS[runtime] if args.schedule == "turns" or runtime == "onnxruntime" else "benchmark_app"
        for batch in args.batch_sizes:
            print(f"  {runtime:11} / {tool:16} batch {batch:>3}: {spread(ratios.get((runtime, batch), []))}")
            if (runtime, batch) in cpu_ratios:
                print(f"  {'':11}   {'(CPU time)':16} batch {batch:>3}: {spread(cpu_ratios[(runtime, batch)])}")
            if (runtime, batch) in wall_ratios:  # OpenVINO's `latency` leaves out the Python call around infer()
                print(f"  {'':11}   {'(its wall time)':16} batch {batch:>3}: "
                      f"{spread(wall_ratios[(runtime, batch)])}")
    if args.warmup and "openvino" in args.runtime_list and args.schedule == "alternate":
        print(f"  (benchmark_app ran 1 untimed inference, vitbench 1 + {args.warmup})")


if __name__ == "__main__":
    main()
