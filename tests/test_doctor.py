"""Noise flags, and `vitbench doctor`: it runs here (CPU), explains every check, and catches a dishonest timer
or a precision that is not what it claims."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from vitbench.backends.base import DeviceKind, MatmulWorkload, TimerKind
from vitbench.errors import ConfigError
from vitbench.doctor import checks as doctor
from vitbench.doctor import host_checks
from vitbench.doctor.checks import Status
from vitbench.measure.noise import NoiseFlag, assess


def test_a_measured_peak_far_above_this_run_s_matmul_is_a_warning(monkeypatch):
    """The measured branch rated a cached peak of 5 TFLOP/s ok beside this run's 0.025 (a cache directory shared
    between machines of one name): under MIN_PEAK_SHARE of it warns, saying why, as the datasheet branch does."""
    import vitbench.measure.peak as peak_mod
    from vitbench.backends.base import get_backend

    monkeypatch.setattr(peak_mod, "device_peak", lambda *a, **k: peak_mod.Peak(
        5.0, peak_mod.PeakSource.MEASURED, "torch", at="2026-12-03T10:00:00"))
    be = get_backend("torch")
    low = doctor.check_peak(be, "fp32", 1, {"torch": 0.025})
    assert low.status is Status.WARN and "= 0% of the peak" in low.found and "--refresh" in low.found, low
    near = doctor.check_peak(be, "fp32", 1, {"torch": 4.0})
    assert near.status is Status.OK and "of the peak" not in near.found, near


def test_noise_flags_have_known_triggers():
    steady = [0.100, 0.101, 0.099, 0.100, 0.102]
    assert assess(steady, TimerKind.HOST_CLOCK, other_cores=0.1) == []
    flags = {n.flag for n in assess([0.1, 0.1, 0.3, 0.1, 0.1], TimerKind.HOST_CLOCK)}
    assert flags == {NoiseFlag.HIGH_CV}  # stdev/mean 0.60: pyperf's 10 % rule
    assert {n.flag for n in assess(steady, TimerKind.HOST_CLOCK, other_cores=1.2)} == {NoiseFlag.OTHER_LOAD}
    assert {n.flag for n in assess([0.1, 0.1], TimerKind.HOST_CLOCK)} == {NoiseFlag.FEW_SAMPLES}
    short = [0.0004] * 5
    assert {n.flag for n in assess(short, TimerKind.HOST_CLOCK)} == {NoiseFlag.SHORT_SAMPLES}
    assert assess(short, TimerKind.DEVICE_EVENTS) == []  # device events resolve far below 1 ms


def test_samples_that_drift_while_timed_are_flagged_though_their_cv_is_low():
    # The GPU check on an H200: a training row's 15 windows fell from 81 to 60 ms (CV 0.09, not flagged), the next
    # row's steps rose from 29 to 37 ms, and the throughput row read 13 % below the latency row
    windows = [81.3, 76.5, 73.8, 72.9, 74.1, 71.2, 73.0, 73.0, 69.7, 64.0, 60.3, 60.6, 64.0, 65.6, 62.8]
    noise = assess([w / 1e3 for w in windows], TimerKind.DEVICE_EVENTS)
    assert [n.flag for n in noise] == [NoiseFlag.DRIFT] and "-15%" in noise[0].detail
    level = [0.100, 0.102, 0.099, 0.101, 0.099, 0.102, 0.100, 0.101, 0.100, 0.099, 0.102, 0.101, 0.099, 0.101, 0.1]
    assert assess(level, TimerKind.DEVICE_EVENTS) == []
    assert assess(sorted(level), TimerKind.DEVICE_EVENTS) == []  # in order, but a shift of 2 % < 5 %
    rising = [0.1 * (1 + i / 50) for i in range(14)]  # 4 per third: too few to judge, though a steady 26 %
    assert assess(rising, TimerKind.DEVICE_EVENTS) == []
    assert [n.flag for n in assess(rising + [0.127], TimerKind.DEVICE_EVENTS)] == [NoiseFlag.DRIFT]


def test_a_noisy_bench_row_says_so(monkeypatch, one_torch_thread):
    from vitbench.backends.base import Step, StopRule
    from vitbench.measure import throughput

    class Busy:
        other_cores, busy = 1.7, True

        def __init__(self, own=None):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(throughput, "LoadMeter", Busy)
    rec = throughput.bench(Step("ViT-Nano/4", batch_size=2), threads=1, warmup_steps=3,
                           stop=StopRule(min_steps=3, min_seconds=0.01, max_seconds=60.0), with_mfu=False)
    m = rec.metrics
    assert m["unstable"] is True and "1.7 CPU cores" in m["noise"] and m["other_load_cores"] == 1.7
    assert {"flag": "other_load", "detail": "other processes used 1.7 CPU cores meanwhile"} in rec.raw["noise"]


class _Matmul(MatmulWorkload):
    """numpy a @ b whose result is rounded to `bits` significand bits (fp32 24, TF32 11, bf16 8)."""

    def __init__(self, bits: int, n: int = 512):
        rng = np.random.default_rng(0)
        self.a, self.b, self.bits = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n),
                                                                                                np.float32), bits
        self.settings = {"framework": f"{bits}-bit"}

    def step(self):
        def round_to(x):
            m, e = np.frexp(x.astype(np.float64))
            return np.ldexp(np.round(m * 2**self.bits) / 2**self.bits, e)

        return (round_to(self.a) @ round_to(self.b)).astype(np.float32)

    def sync(self, out):
        pass

    def operands_host(self):
        return self.a, self.b

    def result_host(self, out):
        return out


class _Slow(_Matmul):
    """A matmul that takes a steady 20 ms (a sleep: the timing comparison must not hinge on this CPU's load)."""

    def step(self):
        import time

        time.sleep(0.02)
        return super().step()


class _Fake:
    name = "fake"

    def __init__(self, bits=24, timer_scale=1.0, timer=TimerKind.HOST_CLOCK, slow=False):
        self.bits, self.scale, self.timer, self.slow = bits, timer_scale, timer, slow

    def matmul_workload(self, precision="fp32", n=512):
        return _Slow(self.bits, 16) if self.slow else _Matmul(self.bits, min(n, 256))

    def time_windows(self, work, window_steps, stop):
        import time

        t0 = time.perf_counter()
        work.sync_window([work.step() for _ in range(window_steps)])
        return [(time.perf_counter() - t0) * self.scale]


@pytest.mark.parametrize("bits,arithmetic,status", [(24, "fp32", Status.OK), (11, "tf32-like", Status.FAIL),
                                                    (8, "bf16-like", Status.FAIL)])
def test_precision_check_tells_the_arithmetic_from_the_error(bits, arithmetic, status):
    c = doctor.check_precision(_Fake(bits), "before", ("fp32",))
    assert c.data["fp32"]["arithmetic"] == arithmetic and c.status is status and c.why


def test_a_timer_that_disagrees_with_the_wall_clock_fails_on_a_quiet_machine(monkeypatch):
    class Quiet:
        other_cores, busy = 0.0, False

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(doctor, "LoadMeter", Quiet)
    honest = doctor.check_timing(_Fake(slow=True), "fp32", 16, steps=2, rounds=3)
    assert honest.status is Status.OK, honest.found
    liar = doctor.check_timing(_Fake(timer_scale=0.5, slow=True), "fp32", 16, steps=2, rounds=3)
    assert liar.status is Status.FAIL and "must agree" in liar.why


def test_threads_above_the_usable_cores_warn():
    cpus, _ = host_checks.usable_cores()
    assert host_checks.check_threads({"a": cpus + 1}).status is Status.WARN
    assert host_checks.check_threads({"a": 1}).status is Status.OK


def test_threads_above_the_cores_others_leave_free_warn_with_the_remedy(monkeypatch):
    """The issue's host: 2 cores, others using 1.5 of them, a backend on 2 threads (doctor said `ok`)."""
    monkeypatch.setattr(host_checks, "cpu_limit", lambda: 2)
    busy = host_checks.check_threads({"a": 2, "b": 1}, other_cores=1.5, chosen={"a": "default", "b": "free_cores"})
    assert busy.status is Status.WARN and busy.data["over_free_cores"] == ["a"] and busy.data["free_cores"] == 1
    assert "--threads 1" in busy.why and "leave threads unset" in busy.why
    assert "a 2 (default)" in busy.found and "b 1 (free_cores)" in busy.found and "others used 1.50" in busy.found
    assert host_checks.check_threads({"a": 1}, other_cores=1.5).status is Status.OK  # one thread meets no one
    assert host_checks.check_threads({"a": 2}, other_cores=0.2).status is Status.OK  # quiet: both cores free


class _Setup:
    """A backend that set itself up on 2 threads, chosen from the free cores."""

    def numerics_in_force(self):
        return None

    def setup(self, device, threads):
        return {"threads": 2, "threads_chosen": "free_cores"}


def test_doctor_passes_the_load_it_saw_to_the_threads_check(monkeypatch):
    seen = {}

    def check_threads(threads, other_cores=None, chosen=None):
        seen.update(threads=threads, other_cores=other_cores, chosen=chosen)
        return host_checks.Check("threads", Status.OK, "", "")

    monkeypatch.setattr(doctor, "check_load", lambda seconds: host_checks.Check(
        "other load", Status.WARN, "", "", {"other_cores": 1.5}))
    monkeypatch.setattr(doctor, "check_threads", check_threads)
    for name in ("check_timing", "check_precision", "check_peak", "check_gpu", "check_cpu_frequency", "check_smt",
                 "check_thermal", "check_memory"):
        monkeypatch.setattr(doctor, name, lambda *a, **k: host_checks.Check("x", Status.OK, "", "", {"tflops": 1}))
    monkeypatch.setattr("vitbench.backends.base.get_backend", lambda name: _Setup())
    checks = doctor.run(backends=["torch"], quick=True)
    assert checks[1].name == "threads" and seen == {"threads": {"torch": 2}, "other_cores": 1.5,
                                                     "chosen": {"torch": "free_cores"}}


def test_device_names():
    assert doctor.parse_device("cuda:1") == (DeviceKind.GPU, 1)
    assert doctor.parse_device("cpu") == (DeviceKind.CPU, 0)
    with pytest.raises(ConfigError, match="cpu, cuda, gpu, tpu, each with an optional :N"):
        doctor.parse_device("npu")
    with pytest.raises(ConfigError, match="a device number, 0 or more"):  # it said "must be a number" of -1
        doctor.parse_device("gpu:-1")
    with pytest.raises(ConfigError, match="a device number, 0 or more"):  # it read a bare ':' as device 0
        doctor.parse_device("gpu:")


def test_doctor_runs_here_and_explains_itself(cli):
    # a fresh process: each framework sizes its CPU thread pools once per process
    r = subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", "doctor", "--quick",
                        "--threads", "1", "--json"], capture_output=True, text=True, timeout=600)
    doc = json.loads(r.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    for name in ("other load", "threads", "timing [torch]", "timing [jax]", "matmul precision [torch]",
                 "matmul precision [jax]", "peak", "gpu", "cpu clocks", "memory"):
        assert name in checks, sorted(checks)
    assert all(c["found"] and c["why"] for c in checks.values())
    for name in ("matmul precision [torch]", "matmul precision [jax]"):
        assert checks[name]["data"]["fp32"]["arithmetic"] == "fp32" and checks[name]["status"] == "ok"
    assert checks["peak"]["data"]["peak_source"] == "measured" and checks["gpu"]["status"] == "skip"
    assert r.returncode == (1 if any(c["status"] == "fail" for c in checks.values()) else 0)
    table = cli("doctor", "--quick", "--threads", "1", "--backend", "torch")
    assert "timing [torch]" in table.stdout and "matmul precision [torch]" in table.stdout


def test_doctor_bad_options_exit_2(cli):
    r = cli("doctor", "--device", "npu")
    assert r.exit_code == 2 and "cpu, cuda, gpu, tpu" in r.stderr
    r = cli("doctor", "--backend", "tensorflow")
    assert r.exit_code == 2 and "torch" in r.stderr
    # a precision no backend here times a matmul in: refused with the ones that do (int8 was listed as allowed,
    # then refused by the framework in other words); one the device cannot run: each backend says why
    r = cli("doctor", "--precision", "int8", "--quick")
    assert r.exit_code == 2 and "--precision 'int8': allowed: fp32, tf32, bf16, fp16" in r.stderr, r.stderr
    r = cli("doctor", "--precision", "tf32", "--quick", "--backend", "torch")
    assert r.exit_code == 2 and "no backend can run there (torch: tf32 is an NVIDIA GPU tensor-core format" in r.stderr
    # a backend with no matmul of its own (an inference runtime) is named as such, not as a precision problem
    r = cli("doctor", "--backend", "onnxruntime", "--quick")
    assert r.exit_code == 2 and "--backend onnxruntime: doctor checks a device by timing each backend's own" \
        in " ".join(r.stderr.split()), r.stderr
