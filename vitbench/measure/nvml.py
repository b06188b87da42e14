"""NVIDIA's management library (NVML), optional: device-used memory, energy, clocks, temperature, throttling.

NVML comes with the driver; its Python binding is the `nvidia-ml-py` distribution (module `pynvml`), an optional
dependency. Without it, or without an NVIDIA device, every function here says so (`NvmlUnavailable` from `open`,
`None` fields) and the measurement goes on without these numbers. Units as NVML gives them, converted once here:
memory bytes -> MiB, energy mJ -> J (nvmlDeviceGetTotalEnergyConsumption, Volta and later), power mW -> W,
clocks MHz, temperature degrees C.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from vitbench.backends.base import Device, DeviceKind

# nvmlClocksEventReasons (nvml.h; formerly ClocksThrottleReasons): bits that mean the GPU ran below the clock
# asked for because of heat or a hardware signal (noise), and the power cap (a property of the board: noted).
SLOWDOWN_REASONS = {0x08: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                    0x80: "hw_power_brake_slowdown"}
POWER_CAP = 0x04
NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t
NVML_CLOCK_SM = 1  # nvmlClockType_t
# The SM clock, power and slowdown reasons are read this often while a phase runs: one reading at its end missed
# what moved during it (the GPU check's torch training rows stepped by 6-12 % for seconds, clocks at their maximum
# at the end; docs/gpu.md). Three NVML calls, tens of microseconds, ten times a second, on a thread of their own.
# Power is NVML's (on Ampere and later boards, an average over about a second: nvmlDeviceGetPowerUsage's
# documentation), the clock the instant's.
SAMPLE_S = 0.1
# The readings a phase keeps (the clock's range and the slowdowns go on past it): 10,000 is 1,000 s at SAMPLE_S,
# a bench row's max_seconds is 60 by default, and a row stays far under the row reader's line bound (vitbench.rows)
MAX_SAMPLES = 10_000


class NvmlUnavailable(RuntimeError):
    """No NVML here (package missing, no driver, not an NVIDIA device); the message says which."""


def _module():
    try:
        import pynvml  # noqa: PLC0415 - optional dependency
    except ImportError as e:
        raise NvmlUnavailable("NVML is not installed (pip install nvidia-ml-py)") from e
    return pynvml


@dataclass
class Snapshot:
    """What NVML says about a device at one moment (None: not supported by this device/driver)."""

    used_mib: float | None = None
    energy_j: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None
    slowdown: tuple[str, ...] = ()
    power_capped: bool = False
    other_processes: int | None = None
    pids: tuple[int, ...] | None = None  # the processes NVML lists on the device, in the driver's PID namespace


@dataclass
class Samples:
    """Readings taken every SAMPLE_S during a phase, as columns: seconds since the phase began, the SM clock
    (MHz), power (W) and the slowdown reasons (SLOWDOWN_REASONS' names) seen at any of them."""

    t_s: list[float] = field(default_factory=list)
    sm_clock_mhz: list[float | None] = field(default_factory=list)
    power_w: list[float | None] = field(default_factory=list)
    slowdown: set[str] = field(default_factory=set)
    clock_min: float | None = None  # over every reading, those past MAX_SAMPLES too
    clock_max: float | None = None

    def add(self, t_s: float, clock: float | None, power_w: float | None) -> None:
        if clock is not None:
            self.clock_min = clock if self.clock_min is None else min(self.clock_min, clock)
            self.clock_max = clock if self.clock_max is None else max(self.clock_max, clock)
        if len(self.t_s) < MAX_SAMPLES:
            self.t_s.append(t_s)
            self.sm_clock_mhz.append(clock)
            self.power_w.append(power_w)

    def raw(self) -> dict | None:
        """The columns for a record's raw data (None: no reading was taken)."""
        if not self.t_s:
            return None
        return {"t_s": self.t_s, "sm_clock_mhz": self.sm_clock_mhz, "power_w": self.power_w}

    def clock_range(self) -> tuple[float | None, float | None]:
        return self.clock_min, self.clock_max


class Nvml:
    """An NVML session on the device a backend runs on. `Nvml.open(device)` raises NvmlUnavailable."""

    def __init__(self, lib, handle) -> None:
        self.lib, self.handle = lib, handle

    @classmethod
    def open(cls, device: Device) -> Nvml:
        if device.kind is not DeviceKind.GPU:
            raise NvmlUnavailable(f"NVML covers NVIDIA GPUs; this device is a {device.kind.value}")
        lib = _module()
        try:
            lib.nvmlInit()
        except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise NvmlUnavailable(f"NVML could not start: {e}") from e
        try:
            return cls(lib, _handle(lib, device))
        except Exception as e:  # noqa: BLE001
            raise NvmlUnavailable(f"NVML has no handle for {device.name} (index {device.index}): {e}") from e

    def _try(self, fn, *args):
        try:
            return fn(self.handle, *args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: the field stays None
            return None

    def slowdown(self) -> tuple[tuple[str, ...], bool] | None:
        """The slowdown reasons now (SLOWDOWN_REASONS' names) and whether the power cap holds the clock; None
        where the driver does not tell."""
        lib = self.lib
        reasons = self._try(getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
                            or getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        if reasons is None:
            return None
        return tuple(name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit), bool(reasons & POWER_CAP)

    def sample(self, into: Samples, t_s: float) -> None:
        """One reading of the SM clock, power and slowdown reasons, appended to `into`."""
        power = self._try(self.lib.nvmlDeviceGetPowerUsage)  # mW
        into.add(t_s, self._try(self.lib.nvmlDeviceGetClockInfo, NVML_CLOCK_SM),
                 power / 1000 if power is not None else None)
        now = self.slowdown()
        if now is not None:
            into.slowdown.update(now[0])

    def snapshot(self) -> Snapshot:
        lib, s = self.lib, Snapshot()
        mem = self._try(lib.nvmlDeviceGetMemoryInfo)
        s.used_mib = mem.used / 2**20 if mem is not None else None
        energy = self._try(lib.nvmlDeviceGetTotalEnergyConsumption)  # mJ since the driver loaded
        s.energy_j = energy / 1000 if energy is not None else None
        power = self._try(lib.nvmlDeviceGetPowerUsage)  # mW
        s.power_w = power / 1000 if power is not None else None
        limit = self._try(lib.nvmlDeviceGetEnforcedPowerLimit)  # mW
        s.power_limit_w = limit / 1000 if limit is not None else None
        s.sm_clock_mhz = self._try(lib.nvmlDeviceGetClockInfo, NVML_CLOCK_SM)
        s.sm_clock_max_mhz = self._try(lib.nvmlDeviceGetMaxClockInfo, NVML_CLOCK_SM)
        s.temperature_c = self._try(lib.nvmlDeviceGetTemperature, NVML_TEMPERATURE_GPU)
        now = self.slowdown()
        if now is not None:
            s.slowdown, s.power_capped = now
        procs = self._try(lib.nvmlDeviceGetComputeRunningProcesses)
        if procs is not None:
            s.pids = tuple(getattr(p, "pid", -1) for p in procs)
            s.other_processes = sum(1 for p in s.pids if p != os.getpid())
        return s

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _handle(lib, device: Device):
    """The NVML handle of a framework's device: by UUID or PCI bus id where the framework gives one, else by the
    index through CUDA_VISIBLE_DEVICES (frameworks number the visible devices; NVML numbers all of them)."""
    if device.uuid:
        uuid = device.uuid if device.uuid.startswith(("GPU-", "MIG-")) else f"GPU-{device.uuid}"
        return lib.nvmlDeviceGetHandleByUUID(uuid)
    if device.pci_bus_id:
        return lib.nvmlDeviceGetHandleByPciBusId_v2(device.pci_bus_id)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if device.index < len(visible):
        v = visible[device.index]
        handle = lib.nvmlDeviceGetHandleByIndex(int(v)) if v.isdigit() else lib.nvmlDeviceGetHandleByUUID(v)
    else:
        handle = lib.nvmlDeviceGetHandleByIndex(device.index)
    # By index, CUDA numbers the fastest device first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML in PCI order: on a
    # node of mixed GPUs the same number can be another device. A name that differs says so (identical GPUs tie
    # in CUDA's order by PCI bus id, so the numbers agree).
    name = lib.nvmlDeviceGetName(handle)
    name = name.decode() if isinstance(name, bytes) else str(name)
    if device.name and name.strip().lower() != device.name.strip().lower():
        raise LookupError(f"NVML's device {device.index} is a {name}, not this {device.name} (set "
                          "CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA numbers devices as NVML does)")
    return handle


class EnergyMeter:
    """Device energy and memory over a phase: `with EnergyMeter(device) as m: ...`; `m.why` when unavailable."""

    def __init__(self, device: Device, sample_s: float = SAMPLE_S) -> None:
        self.device = device
        self.nvml: Nvml | None = None
        self.why: str | None = None
        self.start: Snapshot | None = None
        self.end: Snapshot | None = None
        self.wall_s = 0.0
        self.sample_s = sample_s
        self.samples = Samples()  # the SM clock, power and slowdown reasons every sample_s in between
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> EnergyMeter:
        try:
            self.nvml = Nvml.open(self.device)
            self.start = self.nvml.snapshot()
        except NvmlUnavailable as e:
            self.why = str(e)
        self._t0 = time.perf_counter()
        if self.nvml is not None:  # the start snapshot is the first reading: a phase shorter than sample_s has it
            self.samples.add(0.0, self.start.sm_clock_mhz, self.start.power_w)
            self.samples.slowdown.update(self.start.slowdown)
            self._thread = threading.Thread(target=self._sample, name="vitbench-nvml", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        nvml = self.nvml
        while nvml is not None and not self._stop.wait(self.sample_s):
            nvml.sample(self.samples, time.perf_counter() - self._t0)

    @property
    def slowdown(self) -> tuple[str, ...]:
        """Every slowdown reason NVML gave during the phase, its end included (SLOWDOWN_REASONS' order)."""
        seen = self.samples.slowdown | set(self.end.slowdown if self.end else ())
        return tuple(name for name in SLOWDOWN_REASONS.values() if name in seen)

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self._t0
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self.nvml is not None:
            self.end = self.nvml.snapshot()  # while the workload is still allocated: device-used memory
            if self.end.pids and os.getpid() not in self.end.pids:
                # this process holds the device now, so NVML's PIDs are of another namespace (a container
                # without --pid=host: NVIDIA/nvidia-docker#1483): which of them are others is unknown
                self.end.other_processes = None
            self.nvml.close()

    @property
    def energy_j(self) -> float | None:
        if self.start is None or self.end is None or self.start.energy_j is None or self.end.energy_j is None:
            return None
        return self.end.energy_j - self.start.energy_j
