"""Every measurement command through the CLI, on tiny models; bad input exits 2 with a clear message."""

from __future__ import annotations

import json

import pytest


def test_models_lists_all_and_filters(cli):
    r = cli("models", "--json")
    rows = json.loads(r.stdout)
    assert r.exit_code == 0 and len(rows) >= 27
    b16 = next(x for x in rows if x["name"] == "ViT-B/16")
    assert b16["params_m"] == pytest.approx(86.57, abs=0.01) and b16["gmacs"] == pytest.approx(17.56, abs=0.01)
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
    (("max-batch", "ViT-Nano/4", "--memory-limit-gib", "-1"), "--memory-limit-gib: Input should be greater than 0"),
])
def test_bad_input_exits_2_with_the_allowed_values(cli, args, needle):
    r = cli(*args)
    assert r.exit_code == 2, r.output
    assert needle in r.stderr and "Traceback" not in r.output


def test_bench_json_has_raw_times_and_units(cli):
    r = cli("bench", "vit-nano/4", "--task", "train", "-b", "2", "--min-seconds", "0.05", "--min-steps", "3",
            "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["config"]["model"] == "ViT-Nano/4" and len(rec["raw"]["step_s"]) >= 3
    assert {"img_per_s", "step_ms_median", "step_ms_p90", "step_ms_p99", "step_ms_iqr", "peak_mem_mib",
            "mfu"} <= rec["metrics"].keys()


def test_bench_table(cli):
    r = cli("bench", "R-Nano", "-b", "2", "--min-seconds", "0.05", "--min-steps", "3")
    assert r.exit_code == 0 and "img_per_s" in r.stdout and "mfu" in r.stdout


def test_flops_table_and_pretrain_compute(cli):
    r = cli("flops", "R-Nano+ViT-Micro/8", "--images", "1000", "--epochs", "2")
    assert r.exit_code == 0 and "fvcore" in r.stdout and "torch_flop_counter" in r.stdout
    assert "exaFLOPs" in r.stdout
    rec = json.loads(cli("flops", "ViT-Nano/4", "--no-count", "--json").stdout)
    assert rec["metrics"]["gflops"] == pytest.approx(2 * rec["metrics"]["gmacs"])


def test_max_batch_cli(cli):
    r = cli("max-batch", "R-Nano", "--max-batch-size", "2", "--memory-limit-gib", "8", "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["metrics"]["max_batch_size"] == 2 and len(rec["raw"]["probes"]) == 2


def test_env_measures_and_caches_the_peak(cli):
    first = json.loads(cli("env", "--json").stdout)
    again = json.loads(cli("env", "--json").stdout)
    assert first["matmul_peak"]["peak_tflops"] > 0 and again["matmul_peak"]["cached"]
    assert first["env"]["threads"] >= 1 and first["env"]["torch"]
