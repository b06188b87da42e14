"""Every backend on one model in one interleaved run, each runtime's own tool beside vitbench's number (issue 53).

For each round and batch size, `vitbench bench MODEL --backend B` runs once per backend (torch eager, jax,
onnxruntime, openvino; the order rotated each round so no backend always runs first after a quiet spell), each
in its own process, fp32, the same thread count, the same timing settings. After the vitbench runs of a batch, in
the same round:

- OpenVINO's own tool, `benchmark_app` (shipped in the openvino wheel), on the very IR vitbench's openvino row ran
  (found by the row's graph key in the compile cache), with the same threads, one stream, f32, the same batch
  (`-shape`), synchronous API;
- for ONNX Runtime, `onnxruntime_perf_test` is not in the pip wheel (it is built from source with
  `--build_perf_test`...), so the comparison is the loop that tool runs, made as it makes it
  (benchmarks/ort_perf_loop.py: its session options, one warm-up run, each run timed alone, nothing of vitbench
  imported) on the very ONNX file vitbench's row ran. optimum-benchmark would also do, but is not installed here.

Each tool runs after vitbench's rows of its batch, not in alternation with them: for vitbench against a runtime's
own loop, alternated on one pinned CPU, run benchmarks/bench_runtimes_parity.py.

Prints one JSON line per measurement and a table of medians over rounds: img/s per backend and batch, each
backend's ratio to torch eager, and vitbench's number over the runtime tool's for the same runtime.

    python benchmarks/bench_runtimes.py --model ViT-B/16 --batches 1,8 --rounds 3 --threads 1
    python benchmarks/bench_runtimes.py --model ViT-Nano/4 --resolution 32 --rounds 1    # a quick check

Say the machine's load with the figures (`uptime` before and after; each vitbench row records other_load_cores).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_runtimes_parity import latency_ms  # benchmarks/: the directory of this script is on sys.path

HERE = Path(__file__).resolve().parent
BACKENDS = ("torch", "jax", "onnxruntime", "openvino")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def vitbench_bench(model: str, backend: str, batch: int, res: int | None, threads: int, args) -> dict:
    cmd = [sys.executable, "-c", "from vitbench.cli import main; main()", "bench", model, "--backend", backend,
           "-b", str(batch), "--precision", "fp32", "--threads", str(threads), "--timing", args.timing,
           "--warmup", str(args.warmup), "--min-steps", str(args.min_steps), "--min-seconds",
           str(args.min_seconds), "--json"]
    if res:
        cmd += ["-r", str(res)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:]}
    rec = json.loads(p.stdout[p.stdout.index("{"):])
    m, settings = rec["metrics"], rec["raw"].get("settings", {})
    return {"img_per_s": m["img_per_s"], "step_ms_median": m["step_ms_median"], "compile_s": m.get("compile_s"),
            "other_load_cores": m.get("other_load_cores"), "threads": rec["env"].get("threads"),
            "graph": settings.get("graph"), "compile_cache": rec["env"].get("compile_cache")}


def graph_file(row: dict, name: str) -> Path | None:
    if not row.get("graph") or not row.get("compile_cache"):
        return None
    path = Path(row["compile_cache"]) / row["graph"] / name
    return path if path.exists() else None


def benchmark_app(xml: Path, batch: int, res: int, threads: int, seconds: int) -> dict:
    """OpenVINO's benchmark_app on the IR: its reported throughput (FPS: images per second) and median latency."""
    exe = Path(sys.executable).with_name("benchmark_app")
    cmd = [str(exe), "-m", str(xml), "-d", "CPU", "-shape", f"[{batch},3,{res},{res}]", "-api", "sync",
           "-nstreams", "1", "-nthreads", str(threads), "-infer_precision", "f32", "-hint", "none", "-t",
           str(seconds)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 300)
    out = p.stdout + p.stderr
    fps = re.search(r"Throughput:\s+([\d.]+)\s+FPS", out)
    if not fps:
        return {"error": out.strip().splitlines()[-3:]}
    return {"img_per_s": float(fps.group(1)), "latency_ms_median": latency_ms(out, "Median")}


def ort_loop(onnx: Path, batch: int, res: int, threads: int, args) -> dict:
    p = subprocess.run([sys.executable, str(HERE / "ort_perf_loop.py"), str(onnx), "--batch", str(batch),
                        "--resolution", str(res), "--threads", str(threads), "--warmup", str(args.warmup),
                        "--runs", str(max(args.min_steps, 5))],
                       capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1:]}
    d = json.loads(p.stdout)
    return {"img_per_s": batch / (d["step_ms_median"] / 1e3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B/16")
    ap.add_argument("--resolution", type=int, default=None)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timing", default="latency", choices=("latency", "throughput"))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-steps", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=2.0)
    ap.add_argument("--tool-seconds", type=int, default=15)
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()
    from vitbench.models.specs import get_spec

    res = args.resolution or get_spec(args.model).resolution
    batches = [int(b) for b in args.batches.split(",")]
    print(json.dumps({"uptime_start": uptime()}), flush=True)
    got: dict[tuple, list[float]] = {}
    for r in range(args.rounds):
        for batch in batches:
            order = BACKENDS[r % len(BACKENDS):] + BACKENDS[:r % len(BACKENDS)]
            rows = {}
            for backend in order:
                t0 = time.time()
                row = rows[backend] = vitbench_bench(args.model, backend, batch, args.resolution, args.threads,
                                                     args)
                print(json.dumps({"round": r, "batch": batch, "who": f"vitbench {backend}", **row,
                                  "wall_s": time.time() - t0}), flush=True)
                if "img_per_s" in row:
                    got.setdefault((batch, f"vitbench {backend}"), []).append(row["img_per_s"])
            xml = graph_file(rows.get("openvino", {}), "model.xml")
            if xml is not None:
                tool = benchmark_app(xml, batch, res, args.threads, args.tool_seconds)
                print(json.dumps({"round": r, "batch": batch, "who": "benchmark_app (openvino)", **tool}),
                      flush=True)
                if "img_per_s" in tool:
                    got.setdefault((batch, "benchmark_app (openvino)"), []).append(tool["img_per_s"])
            onnx = graph_file(rows.get("onnxruntime", {}), "model.onnx")
            if onnx is not None:
                tool = ort_loop(onnx, batch, res, args.threads, args)
                print(json.dumps({"round": r, "batch": batch, "who": "plain loop (onnxruntime)", **tool}),
                      flush=True)
                if "img_per_s" in tool:
                    got.setdefault((batch, "plain loop (onnxruntime)"), []).append(tool["img_per_s"])
    print(json.dumps({"uptime_end": uptime()}), flush=True)
    print(f"\n{args.model} @ {res}px, fp32, {args.threads} thread(s), {args.timing} timing, "
          f"median over {args.rounds} round(s)")
    print(f"{'batch':>5}  {'who':32} {'img/s':>9} {'vs torch':>9}  runs")
    for batch in batches:
        ref = got.get((batch, "vitbench torch"))
        for (b, who), xs in sorted(got.items()):
            if b != batch:
                continue
            med = statistics.median(xs)
            ratio = f"{med / statistics.median(ref):9.2f}" if ref else " " * 9
            print(f"{b:>5}  {who:32} {med:9.2f} {ratio}  {', '.join(f'{x:.2f}' for x in xs)}")
        for backend, tool in (("openvino", "benchmark_app (openvino)"),
                              ("onnxruntime", "plain loop (onnxruntime)")):
            ours, theirs = got.get((batch, f"vitbench {backend}")), got.get((batch, tool))
            if ours and theirs:
                print(f"{batch:>5}  vitbench {backend} / {tool}: "
                      f"{statistics.median(ours) / statistics.median(theirs):.3f}")


if __name__ == "__main__":
    main()
