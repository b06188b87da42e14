"""The runtimes' own loops as stand-ins for their tools, and benchmarks/bench_runtimes_parity.py's `turns` schedule
(issue 53; docs/runtimes.md, "vitbench against the runtimes' own loops, taking turns"): OpenVINO's loop compiles
what `benchmark_app` compiles, and vitbench's bench and the runtime's loop take turns window by window."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny_ir(path: Path) -> Path:
    """A dynamic-batch image model ([?,3,8,8] -> convolution -> relu) as an IR, made with OpenVINO's opset."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter(ov.PartialShape([-1, 3, 8, 8]), ov.Type.f32, name="images")
    w = ops.constant(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = ops.relu(ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1]))
    ov.save_model(ov.Model([y], [x], "tiny"), str(path))
    return path


def test_the_openvino_loop_compiles_what_benchmark_app_compiles(tmp_path):
    """benchmarks/ov_perf_loop.py stands in for `benchmark_app -api sync -nstreams 1 -nthreads T -infer_precision
    f32 -hint none`: the configuration it passes is the one benchmark_app dumps (-dump_config), and every property
    of its compiled model reads back as benchmark_app prints it for the same IR and shape (its step 8). A loop that
    set a hint, pinning or another precision, or fed f32 where the tool feeds u8, would fail here."""
    import openvino as ov

    loop = _load("ov_perf_loop")
    ir = _tiny_ir(tmp_path / "tiny.xml")
    dumped = tmp_path / "config.json"
    exe = Path(sys.executable).with_name("benchmark_app")
    p = subprocess.run([str(exe), "-m", str(ir), "-d", "CPU", "-shape", "[2,3,8,8]", "-api", "sync", "-nstreams",
                        "1", "-nthreads", "2", "-infer_precision", "f32", "-hint", "none", "-niter", "2",
                        "-dump_config", str(dumped)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert json.loads(dumped.read_text()) == {"CPU": loop.config(2)}
    step8 = p.stdout[p.stdout.index("[Step 8/"):p.stdout.index("[Step 9/")]
    tool = dict(re.findall(r"\[ INFO \]   ([A-Z_]+): (.*)", step8))
    compiled = loop.compiled_model(ov.Core(), str(ir), 2, 8, 2)
    ours = {k: str(compiled.get_property(k)) for k in compiled.get_property("SUPPORTED_PROPERTIES")
            if k != "SUPPORTED_PROPERTIES"}
    assert ours == tool
    assert ours["INFERENCE_NUM_THREADS"] == "2" and ours["ENABLE_CPU_PINNING"] == "True"
    assert compiled.input(0).get_element_type() == ov.Type.u8  # the tool feeds an image input as u8
    assert loop.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0  # benchmark.py's median: the lower middle value


def test_the_openvino_loop_takes_turns_and_never_times_a_wait(tmp_path):
    """ov_perf_loop.py under a referee, against a side that holds the turn for 0.2 s each time: the loop holds the
    turn while it compiles and warms up, hands it over, then makes one timed run per turn (the log: r o r o ...
    o r). Its times are OpenVINO's latencies of a tiny model (well under the other side's 0.2 s), the waits apart."""
    import threading
    import time

    from vitbench.compare.turns import Referee
    from vitbench.turns import Turn

    runs, hold_s = 3, 0.2
    ir = _tiny_ir(tmp_path / "tiny.xml")
    ref = Referee(("reference", "other"), in_step=False)  # as bench_runtimes_parity.py
    try:
        p = subprocess.Popen([sys.executable, str(BENCHMARKS / "ov_perf_loop.py"), str(ir), "--batch", "2",
                              "--resolution", "8", "--runs", str(runs)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, **ref.env("reference"),
                                                                     "PYTHONPATH": str(ROOT)})
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.extend(p.communicate(timeout=120)))
        reader.start()
        deadline = time.monotonic() + 120
        while ref.turns["reference"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        other = Turn(ref.paths["other"])
        other.take()  # then runs + 1 windows of hold_s, as vitbench's N + 1 steps, handing over between them
        time.sleep(hold_s)
        for _ in range(runs):
            other.pass_over()
            time.sleep(hold_s)
        other.give_back()
        ref.finished("other")
        reader.join()
        sides = "".join("r" if side == "reference" else "o" for side, _ in ref.log)
    finally:
        ref.close()
    assert p.returncode == 0, out
    d = json.loads(out[0])
    assert sides == "ro" * (runs + 1) + "r"
    assert len(d["step_ms"]) == runs and max(d["step_s"]) < hold_s
    assert d["turn_wait_s"] >= runs * hold_s


def test_vitbench_and_the_runtimes_loop_take_turns_and_each_round_has_its_ratio(tmp_path):
    """End to end on ViT-Nano/4 at 32 px, one round, 3 timed runs: the loop takes the turn first (loading and
    warming up), then vitbench's bench and the loop alternate one timed window each, vitbench's first and last
    (the referee's log: r v r v ... v r, the final r the loop's last hand-over); vitbench times 3 + 1 steps, the
    loop 3 runs, both kept raw, and the round's ratio and its windows' ratios are in the output."""
    steps = 3
    # a copy of vitbench's source, as the script's docstring asks (a graph's key holds the source: an edit to the
    # working tree between the script's two vitbench processes would leave the pair out)
    shutil.copytree(ROOT / "vitbench", tmp_path / "src" / "vitbench")
    # only the copy on the path: a plug-in another test named in $VITBENCH_PLUGINS is not importable from it
    env = {**{k: v for k, v in os.environ.items() if k != "VITBENCH_PLUGINS"}, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(tmp_path / "src")}
    p = subprocess.run([sys.executable, str(BENCHMARKS / "bench_runtimes_parity.py"), "--model", "ViT-Nano/4",
                        "--resolution", "32", "--batches", "1", "--runtimes", "onnxruntime", "--rounds", "1",
                        "--steps", str(steps)], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    (pair,) = [d for d in lines if "round" in d]
    assert pair["schedule"] == "turns" and "error" not in pair["vitbench"], pair["vitbench"]
    assert pair["turns"] == "rv" * (steps + 1) + "r" and pair["repeats"] == 0, pair["turn_log"]
    assert [t for _, t in pair["turn_log"]] == sorted(t for _, t in pair["turn_log"])
    assert len(pair["vitbench"]["step_s"]) == steps + 1 and len(pair["reference"]["window_s"]) == steps
    assert len(pair["window_ratios"]) == steps and all(r > 0 for r in pair["window_ratios"])
    assert pair["reference"]["turn_wait_s"] > 0  # it waited for vitbench's windows, outside its times
    ratio = pair["vitbench"]["img_per_s"] / pair["reference"]["img_per_s"]
    assert re.search(rf"onnxruntime +/ ort_perf_loop.py +batch +1: median {ratio:.3f} ", p.stdout), p.stdout


@pytest.mark.parametrize("argv, says", [
    (["--schedule", "both"], "argument --schedule: invalid choice"),
    (["--rounds", "0"], "--rounds must be >= 1"),
])
def test_the_harness_refuses_bad_options_in_one_line(argv, says):
    p = subprocess.run([sys.executable, str(BENCHMARKS / "bench_runtimes_parity.py"), *argv], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr
