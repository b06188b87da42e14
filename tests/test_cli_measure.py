"""Every measurement command through the CLI, on tiny models; bad input exits 2 with a clear message."""

from __future__ import annotations

import json

import pytest


def test_models_lists_all_and_filters(cli):
    r = cli("models", "--json")
    rows = json.loads(r.stdout)
    assert r.exit_code == 0 and len(rows) >= 27
    b16 = next(x for x in rows if x["name"] == "ViT-B/16")
    # ViT-B/16 (1000 classes) holds 86,567,656 parameters (timm's vit_base_patch16_224): an integer count, shown in
    # millions to 3 decimals, so equal after the same rounding. GMACs 17.56 is given to 2 decimals (+-0.005) and
    # printed to 3 (+-0.0005)
    assert b16["params_m"] == round(86_567_656 / 1e6, 3) and b16["gmacs"] == pytest.approx(17.56, abs=0.0055)
    r = cli("models", "--family", "bit", "--json")
    assert {x["family"] for x in json.loads(r.stdout)} == {"bit"}
    r = cli("models")
    assert r.exit_code == 0 and "R50+ViT-B/16" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (("bench", "ViT-B/17"), "ViT-B/16"),
    (("bench", "ViT-Nano/4", "--precision", "fp8"), "fp32"),
    (("bench", "ViT-Nano/4", "--task", "eval"), "infer"),
    (("bench", "ViT-Nano/4", "--resolution", "30"), "multiple of 4"),
    (("bench", "ViT-Nano/4", "--backend", "tensorflow"), "torch"),
    (("models", "--family", "convnext"), "vit"),
    (("flops", "ViT-Nano/4", "--images", "10"), "--epochs"),
    (("max-batch", "ViT-Nano/4", "--memory-limit-gib", "-1"),
     "--memory-limit-gib: Input should be greater than 0"),
])
def test_bad_input_exits_2_with_the_allowed_values(cli, args, needle):
    r = cli(*args)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("timing,quantiles", [("latency", True), ("throughput", False)])
def test_bench_json_has_raw_times_and_units(cli, timing, quantiles):
    r = cli("bench", "vit-nano/4", "--task", "train", "-b", "2", "--min-seconds", "0.05", "--min-steps", "3",
            "--threads", "1", "--timing", timing, "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["config"]["model"] == "ViT-Nano/4" and rec["config"]["timing"] == timing
    assert len(rec["raw"]["step_s"]) >= (3 if quantiles else 5)
    assert {"img_per_s", "step_ms_median", "step_ms_iqr", "peak_mem_mib", "compile_peak_mem_mib", "memory_kind",
            "mfu", "peak_tflops", "peak_source", "matmul_precision", "unstable"} <= rec["metrics"].keys()
    assert ({"step_ms_p90", "step_ms_p99"} <= rec["metrics"].keys()) == quantiles


def test_bench_table(cli):
    r = cli("bench", "R-Nano", "-b", "2", "--min-seconds", "0.05", "--min-steps", "3", "--threads", "1")
    assert r.exit_code == 0 and "img_per_s" in r.stdout and "mfu" in r.stdout
    assert "throughput timing" in r.stdout and "peak_tflops (measured" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (("--timing", "wallclock"), "--timing"),
    (("--compile-mode", "max-autotune"), "needs --compile"),
    (("--compile", "--compile-mode", "turbo"), "reduce-overhead"),
    (("--backend", "jax", "--compile"), "no optional compiler"),
])
def test_bench_timing_and_compile_modes_are_checked(cli, args, needle):
    r = cli("bench", "ViT-Nano/4", *args)
    assert r.exit_code == 2 and needle in r.stderr, r.output


def test_flops_table_and_pretrain_compute(cli):
    r = cli("flops", "R-Nano+ViT-Micro/8", "--images", "1000", "--epochs", "2")
    assert r.exit_code == 0 and "fvcore" in r.stdout and "torch_flop_counter" in r.stdout
    assert "exaFLOPs" in r.stdout
    rec = json.loads(cli("flops", "ViT-Nano/4", "--no-count", "--json").stdout)
    # exact: 2 * macs / 1e9 and macs / 1e9 round the same quotient scaled by 2 (a power of two scales a rounding
    # exactly), and JSON writes a float's shortest repr, read back to the same double
    assert rec["metrics"]["gflops"] == 2 * rec["metrics"]["gmacs"]


def test_max_batch_cli(cli):
    r = cli("max-batch", "R-Nano", "--max-batch-size", "2", "--memory-limit-gib", "8", "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["metrics"]["max_batch_size"] == 2 and len(rec["raw"]["probes"]) == 2


def test_env_shows_the_device_peak(cli):
    first = json.loads(cli("env", "--json", "--threads", "1").stdout)
    again = json.loads(cli("env", "--json", "--threads", "1").stdout)
    assert first["peak"]["peak_tflops"] > 0 and first["peak"]["peak_source"] == "measured"
    assert again["peak"]["peak_tflops"] >= first["peak"]["peak_tflops"]  # cached, and a peak only rises
    assert first["env"]["threads"] == 1 and first["env"]["torch"]


def test_max_batch_on_a_device_that_is_not_here_is_refused_after_one_probe(cli):
    """--device cuda on a CPU machine: bad input (exit 2, one line), as bench says it, not 'max_batch_size = 0'
    after a traceback per probe. The device is tried in the first probe's process, never in the CLI's."""
    r = cli("max-batch", "ViT-Nano/4", "--device", "cuda", "--max-batch-size", "4")
    assert r.exit_code == 2, r.output
    assert "cuda" in r.stderr and "Traceback" not in r.output and "max_batch_size" not in r.stdout


def test_max_batch_budget_below_the_framework_says_so(cli):
    """A budget below what importing the framework takes answers 0 for every model: exit 1 with the reason and
    the option to raise, not a bare 0."""
    r = cli("max-batch", "ViT-Nano/4", "--memory-limit-gib", "0.05", "--max-batch-size", "4")
    assert r.exit_code == 1, r.output
    assert "max_batch_size = 0" in r.stdout and "nothing fits" in r.stdout and "--memory-limit-gib" in r.stdout
