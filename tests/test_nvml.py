"""NVML is optional: with a fake `pynvml` the units and handles are right; without it, or off a GPU, every
measurement goes on and says why there is no energy or device memory."""

from __future__ import annotations

import sys
import types

import pytest

from vitbench.backends.base import Device, DeviceKind, TimerKind
from vitbench.measure.noise import NoiseFlag, assess
from vitbench.measure.nvml import EnergyMeter, Nvml, NvmlUnavailable

H100 = Device(DeviceKind.GPU, "NVIDIA H100 80GB HBM3", 0, uuid="1234-abcd")


def _fake_pynvml(energy_mj: list[int], reasons: int = 0x08 | 0x04, others: int = 1,
                 name: str = "NVIDIA L4") -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.calls = []
    energy = iter(energy_mj)

    def record(name, value=None):
        def f(*args):
            m.calls.append((name, args))
            return value() if callable(value) else value
        return f

    m.nvmlInit = record("init")
    m.nvmlShutdown = record("shutdown")
    m.nvmlDeviceGetHandleByUUID = record("by_uuid", "handle")
    m.nvmlDeviceGetHandleByIndex = record("by_index", "handle")
    m.nvmlDeviceGetName = record("name", name)
    m.nvmlDeviceGetMemoryInfo = record("mem", types.SimpleNamespace(used=3 * 2**30, total=80 * 2**30))
    m.nvmlDeviceGetTotalEnergyConsumption = record("energy", lambda: next(energy))
    m.nvmlDeviceGetPowerUsage = record("power", 350_000)  # mW
    m.nvmlDeviceGetEnforcedPowerLimit = record("limit", 700_000)
    m.nvmlDeviceGetClockInfo = record("clock", 1755)
    m.nvmlDeviceGetMaxClockInfo = record("max_clock", 1980)
    m.nvmlDeviceGetTemperature = record("temp", 61)
    m.nvmlDeviceGetCurrentClocksThrottleReasons = record("reasons", reasons)
    m.nvmlDeviceGetComputeRunningProcesses = record(
        "procs", [types.SimpleNamespace(pid=-1) for _ in range(others)])
    return m


def test_snapshot_units_and_handle_by_uuid(monkeypatch):
    fake = _fake_pynvml([10_000, 25_000])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nv = Nvml.open(H100)
    s = nv.snapshot()
    assert ("by_uuid", ("GPU-1234-abcd",)) in fake.calls  # torch's UUID without NVML's "GPU-" prefix
    assert s.used_mib == 3 * 1024 and s.energy_j == 10.0 and s.power_w == 350.0 and s.power_limit_w == 700.0
    assert s.sm_clock_mhz == 1755 and s.sm_clock_max_mhz == 1980 and s.temperature_c == 61
    assert s.slowdown == ("hw_slowdown",) and s.power_capped and s.other_processes == 1


def test_energy_over_a_phase(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([10_000, 25_000], reasons=0, others=0))
    with EnergyMeter(H100) as m:
        pass
    # exact: the counter's mJ (integers) / 1000 are 10.0 and 25.0, and their difference 15.0, in float64
    assert m.why is None and m.energy_j == 15.0 and m.end.used_mib == 3 * 1024
    assert ("shutdown", ()) in sys.modules["pynvml"].calls


def test_index_goes_through_cuda_visible_devices(monkeypatch):
    fake = _fake_pynvml([0])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    Nvml.open(Device(DeviceKind.GPU, "NVIDIA L4", 1))  # the framework's device 1 is NVML's device 5
    assert ("by_index", (5,)) in fake.calls


def test_by_index_another_model_at_that_number_is_no_handle(monkeypatch):
    """CUDA numbers the fastest device first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML in PCI order: on a node
    of mixed GPUs, NVML's device of the same number is another one, whose energy would be this row's."""
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([0], name="NVIDIA T4"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(NvmlUnavailable, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        Nvml.open(Device(DeviceKind.GPU, "NVIDIA L4", 0))
    with EnergyMeter(Device(DeviceKind.GPU, "NVIDIA L4", 0)) as m:
        pass
    assert m.energy_j is None and "NVIDIA T4" in m.why


def test_without_nvml_or_off_a_gpu_nothing_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py"):
        Nvml.open(H100)
    with EnergyMeter(H100) as m:
        pass
    assert m.energy_j is None and "nvidia-ml-py" in m.why
    with EnergyMeter(Device(DeviceKind.CPU, "cpu")) as m:
        pass
    assert m.energy_j is None and "cpu" in m.why


def test_a_gpu_slowdown_is_noise():
    flags = {n.flag for n in assess([0.01] * 10, TimerKind.DEVICE_EVENTS, gpu_slowdown=("sw_thermal_slowdown",),
                                    other_gpu_processes=2)}
    assert flags == {NoiseFlag.GPU_SLOWDOWN, NoiseFlag.OTHER_GPU_PROCESSES}


def test_gpu_processes_in_another_pid_namespace_are_not_counted_as_others(monkeypatch):
    """While the workload holds the device, NVML lists this process; in a container without --pid=host it lists
    host PIDs, so none is ours: every row was flagged `other_gpu_processes` and unstable. The count is then
    unknown (None); where our PID is listed the others are counted."""
    import os

    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([10_000, 25_000], reasons=0, others=1))
    with EnergyMeter(H100) as m:
        pass
    assert m.end.pids == (-1,) and m.end.other_processes is None

    fake = _fake_pynvml([10_000, 25_000], reasons=0, others=0)
    fake.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=os.getpid()),
                                                           types.SimpleNamespace(pid=-1)]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with EnergyMeter(H100) as m:
        pass
    assert m.end.other_processes == 1


def test_the_clock_power_and_a_slowdown_during_the_phase_are_sampled(monkeypatch):
    """One reading at the phase's end missed what moved during it: a thermal slowdown that had cleared by the end
    left the row unflagged. The meter reads the SM clock, power and slowdown reasons every sample_s while the
    phase runs; a slowdown at any reading is the phase's."""
    import time

    fake = _fake_pynvml([10_000, 25_000], reasons=0, others=0)
    reasons = iter([0, 0, 0x40, 0x40])  # the start's snapshot and first reading, then a thermal slowdown
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: next(reasons, 0)
    clocks = iter([1980, 1980, 1980, 1410])  # the start's snapshot, then the readings
    fake.nvmlDeviceGetClockInfo = lambda h, kind: next(clocks, 1980)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with EnergyMeter(H100, sample_s=0.005) as m:
        deadline = time.monotonic() + 5
        while len(m.samples.t_s) < 4 and time.monotonic() < deadline:
            time.sleep(0.005)
    raw = m.samples.raw()
    assert len(raw["t_s"]) >= 4 and raw["t_s"] == sorted(raw["t_s"]) and set(raw["power_w"]) == {350.0}
    assert m.end.slowdown == () and m.slowdown == ("hw_thermal_slowdown",)
    assert m.samples.clock_range() == (1410, 1980) and raw["t_s"][0] == 0.0  # a reading at the start too
    with EnergyMeter(Device(DeviceKind.CPU, "cpu")) as off:  # no NVML: no thread, no samples
        pass
    assert off.samples.raw() is None and off.samples.clock_range() == (None, None) and off.slowdown == ()


def test_the_readings_kept_are_bounded_and_the_clock_range_covers_them_all(monkeypatch):
    """A long timed phase kept a reading every 0.1 s without end (a row is a line of the store, read back whole):
    MAX_SAMPLES are kept; the clock's range and the slowdowns go on past them."""
    from vitbench.measure import nvml

    monkeypatch.setattr(nvml, "MAX_SAMPLES", 3)
    s = nvml.Samples()
    for i, clock in enumerate([1980, 1900, 1950, 1200, None]):
        s.add(i * 0.1, clock, 500.0)
    assert len(s.raw()["t_s"]) == 3 and s.clock_range() == (1200, 1980)
