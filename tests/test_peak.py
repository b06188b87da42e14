"""One peak per device and precision: the datasheet table, the measured peak's bookkeeping, MFU never above 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from vitbench.backends.base import Backend, Device, DeviceKind, Step, StopRule
from vitbench.backends.torch import SPEC as TORCH_SPEC
from vitbench.errors import ConfigError
from vitbench.measure import peak as peak_mod
from vitbench.measure.datasheet import TABLE, datasheet_tflops, lookup
from vitbench.measure.peak import PeakPolicy, PeakSource, Reading, device_peak, offer, peak_key, read_entry
from vitbench.measure.throughput import bench

FAST = dict(warmup_steps=1, stop=StopRule(min_steps=3, min_seconds=0.02, max_seconds=60.0), threads=1)


# ------------------------------------------------------------------------------------------------------------
# The datasheet table
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,row,precision,tflops", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", "bf16", 989.5),  # datasheet 1979 with sparsity
    ("NVIDIA H100 PCIe", "H100 PCIe", "tf32", 378.0),  # 756 with sparsity
    ("NVIDIA H100 NVL", "H100 NVL", "fp32", 60.0),
    ("NVIDIA H200", "H200 SXM", "fp16", 989.5),
    ("NVIDIA A100-SXM4-80GB", "A100", "tf32", 156.0),
    ("NVIDIA A100 80GB PCIe", "A100", "fp32", 19.5),
    ("NVIDIA L4", "L4", "bf16", 121.0),
    ("NVIDIA L40S", "L40S", "bf16", 362.05),
    ("NVIDIA L40", "L40", "fp32", 90.5),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", "bf16", 165.2),
    ("NVIDIA GeForce RTX 3090", "RTX 3090", "fp16", 71.0),
    ("TPU v4", "TPU v4", "bf16", 275.0),
    ("TPU v5 lite", "TPU v5e", "bf16", 197.0),
    ("TPU v5", "TPU v5p", "bf16", 459.0),
    ("TPU v6 lite", "TPU v6e", "bf16", 918.0),
])
def test_datasheet_rows_match_driver_names(name, row, precision, tflops):
    got = datasheet_tflops(name, precision)
    # exact: the table's literal, or a literal integer / 2 (dense from "with sparsity"), read back
    assert got is not None and got[1].device == row and got[0] == tflops


@pytest.mark.parametrize("name", ["cpu", "NVIDIA A10G", "NVIDIA GeForce RTX 4090 D", "TPU v4 lite",
                                  "NVIDIA GeForce RTX 3090 Ti", "AMD Instinct MI300X",
                                  # MIG slices: a fraction of the chip, whose whole-chip peak divided MFU up to 7x
                                  "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA H100 80GB HBM3 MIG 3g.40gb"])
def test_devices_without_a_datasheet_row(name):
    assert lookup(name) is None


def test_datasheet_has_no_figure_it_does_not_publish():
    assert datasheet_tflops("TPU v5 lite", "fp32") is None  # fp32 on a TPU: bf16 passes, measured instead
    assert datasheet_tflops("Tesla V100-SXM2-16GB", "bf16") is None  # Volta has no bf16
    for row in TABLE:  # every row cites its source and only has precisions vitbench knows
        assert row.source and row.tflops and set(row.tflops) <= {"fp32", "tf32", "bf16", "fp16"}
        assert all(v > 0 for v in row.tflops.values())


# ------------------------------------------------------------------------------------------------------------
# Bookkeeping of a measured peak, with a scripted backend
# ------------------------------------------------------------------------------------------------------------
class _Scripted(Backend):
    """A CPU backend whose matmul rates are scripted (TFLOP/s per call)."""

    spec = TORCH_SPEC  # a backend that can measure on a CPU; its name keys nothing in the peak's cache

    def __init__(self, rates: list[float], device: Device | None = None):
        self.rates, self.calls = list(rates), 0
        self._device = device or Device(DeviceKind.CPU, "cpu")

    def device_info(self) -> Device:
        return self._device

    def setup(self, device="cpu", threads=None):
        return {"threads": threads}

    def prepare(self, step):
        raise NotImplementedError

    def reset_peak_memory(self):
        pass

    def peak_memory_mib(self):
        return 0.0

    def process_peak_mib(self):
        return 0.0

    def cleanup(self):
        pass

    def matmul_flops_per_s(self, precision="fp32", n=2048, seconds=1.0):
        self.calls += 1
        return self.rates.pop(0) * 1e12


class _Load:
    """LoadMeter stand-in: other processes used `cores` cores."""

    cores = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    @property
    def other_cores(self):
        return _Load.cores

    @property
    def busy(self):
        return _Load.cores >= 0.5


ONE_SIZE = PeakPolicy(cpu_sizes=(64,), seconds=0.01, busy_retries=2)


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A fresh cache, a scripted machine load, and no other backend measuring (unless a test says so)."""
    monkeypatch.setenv("VITBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(peak_mod, "LoadMeter", _Load)
    monkeypatch.setattr(peak_mod, "_measurers", lambda device, precision: [])
    monkeypatch.setattr(peak_mod, "others_now", lambda seconds: _Load.cores)  # the host's load now: scripted too
    _Load.cores = 0.0
    return tmp_path


def test_a_busy_first_measurement_is_not_the_peak_forever(isolated):
    be = _Scripted([1.0, 0.8, 2.0, 1.5])
    _Load.cores = 1.5  # the first measurement shares the machine
    p = device_peak(be, "fp32", 1, policy=ONE_SIZE)
    assert p.tflops == 1.0 and p.provisional and p.source is PeakSource.MEASURED
    assert device_peak(be, "fp32", 1, policy=ONE_SIZE).tflops == 1.0 and be.calls == 1  # nor on a busy row
    assert p.metrics()["peak_basis"] == "measured_busy"
    p = device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE)  # a calibration, env, doctor
    assert p.tflops == 1.0 and p.provisional and be.calls == 2  # still busy: 0.8 does not lower it
    _Load.cores = 0.0
    p = device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE)
    assert p.tflops == 2.0 and not p.provisional and be.calls == 3  # a quiet reading settles it, higher
    assert p.metrics()["peak_basis"] == "measured_quiet"
    p = device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE)
    assert p.tflops == 2.0 and be.calls == 3  # settled: not measured again
    p = device_peak(be, "fp32", 1, refresh=True, policy=ONE_SIZE)
    assert p.tflops == 2.0 and be.calls == 4  # a refresh measures (1.5) but the peak only rises


def test_an_unwritable_cache_still_gives_the_peak_just_measured(isolated, monkeypatch):
    taken = isolated / "file"
    taken.write_text("x")
    monkeypatch.setenv("VITBENCH_CACHE_DIR", str(taken / "sub"))  # below a file: nothing can be written there
    be = _Scripted([1.0, 1.2])
    p = device_peak(be, "fp32", 1, policy=ONE_SIZE)
    assert p is not None and p.tflops == 1.0 and be.calls == 1


def test_a_peak_cache_vitbench_never_wrote_is_neither_trusted_nor_overwritten(isolated):
    """An edited entry (a peak of -1, NaN or text) is as if unmeasured: measured again, never an MFU divided by it
    (before: an ok row with MFU -0.004, or a traceback); a peaks.json that is not a JSON object (a user's file)
    is left as it is, the reading counting for this run only (before: replaced). Found by an audit."""
    from vitbench.errors import VitbenchWarning

    be = _Scripted([1.0] * 6)
    key = peak_key(be.device_info(), "fp32", 1)
    for bad in (-1.0, "NaN", "abc", True):
        (isolated / "peaks.json").write_text(json.dumps({key: {"peak_tflops": bad, "quiet_readings": 1}}))
        assert read_entry(key) is None
        p = device_peak(be, "fp32", 1, policy=ONE_SIZE)
        assert p is not None and p.tflops == 1.0
    (isolated / "peaks.json").write_text('["my", "own", "peaks"]')
    with pytest.warns(VitbenchWarning, match="not vitbench's peak cache"):
        p = device_peak(be, "fp32", 1, policy=ONE_SIZE)
    assert p.tflops == 1.0 and (isolated / "peaks.json").read_text() == '["my", "own", "peaks"]'
    # a JSON object that is not vitbench's entries (a user's own peaks.json) was re-indented and given an entry
    theirs = '{"my": "mountain peaks list", "everest": 8849}'
    (isolated / "peaks.json").write_text(theirs)
    with pytest.warns(VitbenchWarning, match=r"not vitbench's peak cache \(not a JSON object of its entries\)"):
        p = device_peak(be, "fp32", 1, policy=ONE_SIZE)
    assert p.tflops == 1.0 and (isolated / "peaks.json").read_text() == theirs


@pytest.mark.parametrize("field,bad", [("readings", 5), ("readings", [7]), ("quiet_readings", "abc"),
                                       ("busy_readings", 1.5), ("quiet_readings", True), ("measured_by", 7),
                                       ("measured_by", [1]), ("by", None), ("measured_at", 3)])
def test_an_entry_whose_bookkeeping_was_edited_is_measured_again(isolated, field, bad):
    """An entry whose fields are not of the types vitbench writes (a hand edit: readings 5, quiet_readings "abc",
    measured_by 7) is as if unmeasured, as an edited peak is: measured again and written whole (before: a
    TypeError or ValueError traceback out of `vitbench env`, a calibration or a quiet bench row, or "peak from
    None"). Found by a hostile-user round."""
    be = _Scripted([1.0] * 4)
    key = peak_key(be.device_info(), "fp32", 1)
    entry = {"readings": [], "quiet_readings": 1, "busy_readings": 0, "measured_by": ["torch"],
             "peak_tflops": 0.5, "by": "torch", "measured_at": "2026-12-03T10:00:00", field: bad}
    (isolated / "peaks.json").write_text(json.dumps({key: entry}))
    assert read_entry(key) is None
    p = device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE)
    assert p is not None and p.tflops == 1.0 and be.calls == 1 and isinstance(p.by, str)
    assert read_entry(key)["readings"][-1]["tflops"] == 1.0  # the entry written again, whole
    offer(key, Reading(0.7, "a step", "2026-12-03T11:00:00", "how"), ONE_SIZE)  # an observation on top of it
    assert read_entry(key)["peak_tflops"] == 1.0


def test_re_measuring_while_busy_gives_up_after_the_retries(isolated):
    be = _Scripted([1.0] * 10)
    _Load.cores = 2.0
    for _ in range(6):
        device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE)
    assert be.calls == 1 + ONE_SIZE.busy_retries  # then the provisional peak stands (and says so)
    assert read_entry(peak_key(be.device_info(), "fp32", 1))["busy_readings"] == be.calls


def test_a_busy_peak_is_measured_again_by_its_first_quiet_user_after_the_retries(isolated):
    """Another process measured the peak while the host was busy and gave up re-measuring: it is not the divisor
    for good. A row whose steps were quiet measures it again, so do env and doctor when their sample is quiet."""
    be = _Scripted([1.0] * (1 + ONE_SIZE.busy_retries) + [3.0, 4.0])
    _Load.cores = 2.0
    for _ in range(1 + ONE_SIZE.busy_retries):
        device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE)
    calls = be.calls
    assert device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE).provisional  # retries spent
    assert device_peak(be, "fp32", 1, quiet_now=False, policy=ONE_SIZE).provisional and be.calls == calls
    _Load.cores = 0.0  # quiet now, while measuring too
    p = device_peak(be, "fp32", 1, quiet_now=True, policy=ONE_SIZE)  # a bench row whose timed steps were quiet
    assert p.tflops == 3.0 and p.metrics()["peak_basis"] == "measured_quiet" and be.calls == calls + 1
    assert device_peak(be, "fp32", 1, quiet_now=True, policy=ONE_SIZE).tflops == 3.0 and be.calls == calls + 1


def test_env_and_doctor_sample_the_host_before_measuring_a_busy_peak_again(isolated):
    be = _Scripted([1.0] * (1 + ONE_SIZE.busy_retries) + [3.0])
    _Load.cores = 2.0
    for _ in range(2 + ONE_SIZE.busy_retries):
        device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE)
    assert be.calls == 1 + ONE_SIZE.busy_retries
    _Load.cores = 0.0
    p = device_peak(be, "fp32", 1, remeasure_provisional=True, policy=ONE_SIZE)
    assert p.tflops == 3.0 and not p.provisional and be.calls == 2 + ONE_SIZE.busy_retries


def test_a_quiet_row_measures_a_busy_peak_again_before_dividing_by_it(isolated):
    from vitbench.measure.throughput import mfu_metrics

    sizes = len(peak_mod.current_policy().cpu_sizes)  # a row measures with the policy in force
    be = _Scripted([0.5] + [2.0] * sizes)
    _Load.cores = 2.0
    device_peak(be, "fp32", 1, policy=ONE_SIZE)  # someone's busy measurement
    busy_row = mfu_metrics(be, Step("ViT-Nano/4"), 1, 0.25, _Load())
    assert busy_row["peak_basis"] == "measured_busy" and busy_row["mfu"] == 0.5 and be.calls == 1  # 0.25 / 0.5
    _Load.cores = 0.0
    quiet_row = mfu_metrics(be, Step("ViT-Nano/4"), 1, 0.25, _Load())
    assert quiet_row["peak_basis"] == "measured_quiet" and quiet_row["mfu"] == 0.125  # 0.25 / 2.0: exact
    assert be.calls == 1 + sizes


def test_the_peak_is_the_best_any_backend_showed_and_is_keyed_by_device_not_backend(isolated, monkeypatch):
    monkeypatch.setattr(peak_mod, "_measurers", lambda device, precision: ["other"])
    elsewhere = []

    def other(name, device, precision, threads, policy=None):
        elsewhere.append((name, device.name, precision, threads))
        return Reading(3.0, name, "t", "scripted", backend=name)

    monkeypatch.setattr(peak_mod, "measure_elsewhere", other)
    be = _Scripted([1.0])
    p = device_peak(be, "fp32", 1, policy=ONE_SIZE)
    assert p.tflops == 3.0 and p.by == "other" and elsewhere == [("other", "cpu", "fp32", 1)]
    entry = read_entry(peak_key(be.device_info(), "fp32", 1))
    assert entry["measured_by"] == sorted(["other", be.name])
    assert device_peak(_Scripted([]), "fp32", 1, policy=ONE_SIZE).tflops == 3.0  # nobody measures again
    assert peak_key(be.device_info(), "fp32", 1) != peak_key(be.device_info(), "fp32", 2)  # threads matter on CPU
    gpu = Device(DeviceKind.GPU, "Some GPU")
    assert peak_key(gpu, "fp32", 1) == peak_key(gpu, "fp32", 16)  # ... not on a GPU


def test_observations_raise_but_never_settle(isolated):
    key = peak_key(Device(DeviceKind.CPU, "cpu"), "fp32", 1)
    offer(key, Reading(1.0, "x", "t", "full", busy=True, backend="x"), ONE_SIZE)
    entry = offer(key, Reading(5.0, "calibration", "t", "observation"), ONE_SIZE)
    assert entry["peak_tflops"] == 5.0 and entry["quiet_readings"] == 0 and entry["measured_by"] == ["x"]


def test_datasheet_devices_are_never_measured(isolated):
    be = _Scripted([], device=Device(DeviceKind.GPU, "NVIDIA H100 PCIe"))
    p = device_peak(be, "bf16", None, refresh=True)
    assert p.source is PeakSource.DATASHEET and p.tflops == 756.5 and be.calls == 0  # 1513 / 2: exact
    assert "H100 datasheet" in p.by and p.metrics()["peak_source"] == p.metrics()["peak_basis"] == "datasheet"


def test_mfu_is_capped_and_flagged_when_a_step_beats_the_datasheet(isolated):
    from vitbench.measure.throughput import mfu_metrics

    be = _Scripted([], device=Device(DeviceKind.GPU, "NVIDIA H100 PCIe"))
    m = mfu_metrics(be, Step("ViT-Nano/4"), None, 102.0, _Load())  # twice the 51 TFLOP/s fp32 datasheet peak
    assert m["mfu"] == 1.0 and m["mfu_over_peak"] == 2.0 and m["peak_tflops"] == 51.0  # 102 / 51: exact


def test_a_step_faster_than_the_measured_peak_raises_it(isolated, one_torch_thread):
    """A stale low peak on record: the model step shows the device does more, so mfu = 1, never above."""
    from vitbench.backends.torch.backend import TorchBackend

    be = TorchBackend()
    be.setup("cpu", 1)
    key = peak_key(be.device_info(), "fp32", 1)
    offer(key, Reading(1e-9, "torch", "t", "stale", backend="torch"))
    rec = bench(Step("ViT-Nano/4", batch_size=4), backend=be, **FAST)
    m = rec.metrics
    assert m["mfu"] == 1.0 and m["mfu_over_peak"] > 1
    # exact: the step's own rate (/ 1 device) becomes the peak, and the cache's JSON reads a float64 back as it was
    assert m["peak_tflops"] == m["model_tflops_per_s"] and "ViT-Nano/4 infer step" in m["peak_by"]
    assert read_entry(key)["peak_tflops"] == m["model_tflops_per_s"]


def test_policy_from_the_environment(monkeypatch):
    monkeypatch.setenv("VITBENCH_PEAK_POLICY", '{"cpu_sizes": [32, 64], "seconds": 0.5}')
    p = peak_mod.current_policy()
    assert p.cpu_sizes == (32, 64) and p.seconds == 0.5 and p.accelerator_sizes == PeakPolicy().accelerator_sizes
    monkeypatch.setenv("VITBENCH_PEAK_POLICY", '{"sizes": 3}')
    with pytest.raises(ConfigError, match="VITBENCH_PEAK_POLICY"):
        peak_mod.current_policy()


# ------------------------------------------------------------------------------------------------------------
# The two real backends: one device, one peak
# ------------------------------------------------------------------------------------------------------------
def _bench_json(*args: str, env: dict) -> dict:
    """`vitbench bench ... --json` in a fresh process (each framework sizes its CPU thread pools once)."""
    out = subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", "bench", *args, "--json"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_torch_and_jax_rows_of_one_device_and_precision_carry_the_same_peak(tmp_path):
    # no peak yet: the first row establishes it; matrices large enough that a tiny model's step cannot beat it
    env = {**os.environ, "VITBENCH_CACHE_DIR": str(tmp_path),
           "VITBENCH_PEAK_POLICY": '{"cpu_sizes": [512, 1024], "seconds": 0.1}'}
    args = ("ViT-Nano/4", "-b", "4", "--threads", "1", "--min-steps", "3", "--min-seconds", "0.05")
    rows = {be: _bench_json(*args, "--backend", be, env=env)["metrics"] for be in ("torch", "jax")}
    # the JAX row divides by the peak the torch row made, unless that one was measured while the host was busy
    # (provisional) and the host is quiet now: then it is measured again, and a peak only rises (two full-suite
    # runs under -n 2 saw 0.096 then 0.106)
    if rows["torch"]["peak_basis"] == "measured_quiet":
        assert rows["torch"]["peak_tflops"] == rows["jax"]["peak_tflops"] > 0
    else:
        assert 0 < rows["torch"]["peak_tflops"] <= rows["jax"]["peak_tflops"]
    for m in rows.values():
        # measured by a backend's matmuls; or, where the host was so loaded that the tiny model's step beat the
        # matmuls' reading (a full suite beside other work, load average 14), by that step: the peak rises to it
        # and that row's mfu is 1 (docs/measurement.md, "MFU is never above 1")
        by_step = re.fullmatch(r"ViT-Nano/4 infer step \((torch|jax)\)", m["peak_by"]) is not None
        assert 0 < m["mfu"] <= 1 and m["peak_source"] == "measured" and (m["peak_by"] in ("torch", "jax")
                                                                           or by_step and m["mfu"] == 1)
    cache = json.loads((tmp_path / "peaks.json").read_text())
    (entry,) = cache.values()  # one entry: machine + device + precision + threads, not one per backend
    assert entry["measured_by"] == ["jax", "torch"]  # the first row had both backends measure
    assert entry["peak_tflops"] == max(r["tflops"] for r in entry["readings"])


def test_another_backend_measures_in_its_own_process():
    from vitbench.measure.peak import measure_elsewhere

    r = measure_elsewhere("jax", Device(DeviceKind.CPU, "cpu"), "fp32", 1,
                          PeakPolicy(cpu_sizes=(128,), seconds=0.05))
    assert r is not None and r.backend == "jax" and r.tflops > 0 and "n=128" in r.how
    assert measure_elsewhere("jax", Device(DeviceKind.CPU, "not this cpu"), "fp32", 1,
                             PeakPolicy(cpu_sizes=(128,), seconds=0.05)) is None  # another device: no reading


class _Sized(_Scripted):
    """Records the matrix size it is asked for."""

    def matmul_flops_per_s(self, precision="fp32", n=2048, seconds=1.0):
        self.sizes = [*getattr(self, "sizes", []), n]
        return 1e12


@pytest.mark.parametrize("device, want", [(Device(DeviceKind.CPU, "cpu"), peak_mod.POLICY.cpu_calibration_n),
                                          (Device(DeviceKind.GPU, "NVIDIA H200"),
                                           max(peak_mod.POLICY.accelerator_sizes))])
def test_the_calibration_matmul_is_sized_for_the_device_s_kind(isolated, monkeypatch, device, want):
    # the GPU check: on an H200 the calibration's n=1024 left most SMs idle (bf16 100-126 of ~790 TFLOP/s)
    from vitbench.backends import base
    from vitbench.tasks import get_task

    be = _Sized([], device)
    monkeypatch.setattr(base, "get_backend", lambda name: be)
    task = get_task("calibration")()
    p = task.Params(task="calibration", backend="torch", device="cpu", precision="fp32")
    rec = task.run(p)
    assert be.sizes[:p.reps] == [want] * p.reps and rec.metrics["matmul_n"] == want  # then a CPU's peak (sizes)
    rec = task.run(task.Params(task="calibration", backend="torch", device="cpu", precision="fp32", matmul_n=64))
    assert be.sizes[-1] == 64 == rec.metrics["matmul_n"]  # a size given is the size used
