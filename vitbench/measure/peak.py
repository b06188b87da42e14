"""The MFU denominator: one peak per device and precision, never per framework.

- A device with a datasheet (NVIDIA GPUs, TPUs: vitbench.measure.datasheet) uses its dense datasheet peak.
- Any other device (CPUs, unlisted GPUs) uses a *measured* peak: the best dense-matmul throughput any backend
  has shown on it, in that precision, over several matrix sizes, each timed for `PeakPolicy.seconds` as queued
  windows (median window). The first time a device/precision/threads is asked for, every available backend that
  can multiply matrices on it measures (the asking one in-process, the others each in a fresh process), so the
  first row of every backend already shares the peak.
- It is cached per machine + device + precision (+ threads on a CPU), not per backend, in
  $VITBENCH_CACHE_DIR or $XDG_CACHE_HOME/vitbench (default ~/.cache/vitbench)/peaks.json. Every reading is kept
  (the last `keep`), the peak is the best of them and only ever rises. A backend installed later measures the
  first time it asks (the entry records which backends have measured).
- $VITBENCH_PEAK_POLICY (JSON of PeakPolicy fields, e.g. '{"cpu_sizes": [256, 512], "seconds": 0.1}') changes
  how a peak is measured, for quick looks and tests; it is inherited by trial processes.
- A busy measurement is never silently the divisor: a reading taken while other processes used the CPU
  (vitbench.cpus, BUSY_CORES) leaves the peak *provisional* until a full measurement is quiet, whichever process
  took the busy ones (the cache is the user's, keyed by machine; $VITBENCH_CACHE_DIR can share one between
  users). Every row says which peak divided its MFU (`peak_basis`: datasheet, measured_quiet or measured_busy).
  A provisional peak is measured again by the first user of it that finds the host quiet: a bench row whose
  timed steps were quiet, a calibration that was, `vitbench env` and `vitbench doctor` after a QUIET_SAMPLE_S
  sample; the calibration at the start of every sweep run, `vitbench env` and `vitbench doctor` also while busy,
  at most `busy_retries` times. Every calibration offers its own reading too, and a model step whose model
  FLOP/s beat the peak raises it (the step showed the device can do that much: its analytic FLOPs are matmul
  FLOPs), so its MFU is 1, flagged, never above.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from vitbench.backends.base import Backend, Capability, Device, DeviceKind, backend_names, backend_spec
from vitbench.choices import Choice
from vitbench.cpus import BUSY_CORES, others_now
from vitbench.env import machine_id
from vitbench.errors import ConfigError, VitbenchWarning, clip
from vitbench.measure.datasheet import datasheet_tflops
from vitbench.measure.load import LoadMeter
from vitbench.paths import cache_dir, locked, write_atomic
from vitbench.procmem import last_marked
from vitbench.record import finite_number

PEAK_MARK = "VITBENCH_PEAK "
QUIET_SAMPLE_S = 0.5  # is the host quiet enough to settle a provisional peak: others' load over this long


class PeakSource(Choice):
    DATASHEET = "datasheet"
    MEASURED = "measured"


class PeakBasis(Choice):
    """What a row's MFU divided by (its `peak_basis`): a datasheet figure, a measured peak with at least one full
    measurement taken while other processes left the CPU alone, or one every measurement of which was busy. A
    measured peak is the best reading, quiet or busy: other load only lowers a reading, so a busy one that beats
    the quiet ones is still a speed the device showed, and `peak_measured_at` names that reading (its `busy` in
    the cache). `measured_quiet` says a quiet measurement was made, not that it set the figure."""

    DATASHEET = "datasheet"
    MEASURED_QUIET = "measured_quiet"
    MEASURED_BUSY = "measured_busy"


@dataclass(frozen=True)
class PeakPolicy:
    """How a measured peak is taken."""

    # Square sizes: on CPUs BLAS reaches its best by 1-2k; GPUs need 4-8k to fill every SM with large tiles.
    cpu_sizes: tuple[int, ...] = (512, 1024, 2048)
    accelerator_sizes: tuple[int, ...] = (2048, 4096, 8192)
    seconds: float = 1.0  # timed seconds per size (after warm-up): long enough for a stable median window
    busy_retries: int = 3  # a peak measured while busy is re-measured on use at most this many times
    keep: int = 20  # readings kept per entry (for inspection)
    timeout_s: float = 600.0  # a backend measuring in its own process

    # The sweep's calibration (tasks/calibration.py) times one size: on CPUs 1024 (a few ms per matmul, many in the
    # 0.25 s of a repetition); on accelerators 8192, which fills a big GPU (on an H200 n=1024 left most SMs idle:
    # bf16 100-126 TFLOP/s where 8192 reaches ~790; docs/gpu.md). compare --normalize matches calibrations by size.
    cpu_calibration_n: int = 1024
    accelerator_calibration_n: int = 8192

    def sizes(self, kind: DeviceKind) -> tuple[int, ...]:
        return self.cpu_sizes if kind is DeviceKind.CPU else self.accelerator_sizes

    def calibration_n(self, kind: DeviceKind) -> int:
        return self.cpu_calibration_n if kind is DeviceKind.CPU else self.accelerator_calibration_n

    def updated(self, data: dict) -> PeakPolicy:
        """This policy with `data`'s fields (JSON: lists become the tuples the sizes are)."""
        return replace(self, **{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


POLICY = PeakPolicy()
POLICY_ENV = "VITBENCH_PEAK_POLICY"


def current_policy() -> PeakPolicy:
    """POLICY with $VITBENCH_PEAK_POLICY's fields on top."""
    text = os.environ.get(POLICY_ENV)
    if not text:
        return POLICY
    names = {f.name for f in fields(PeakPolicy)}
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) - names:
            raise ValueError
        policy = POLICY.updated(data)
    except (ValueError, TypeError, RecursionError):
        raise ConfigError(f"${POLICY_ENV} must be a JSON object with fields among {', '.join(sorted(names))}; "
                          f"got {clip(text, 200)!r}") from None
    bad = [f"{f.name} must be {_WANT[_kind(f.default)]}" for f in fields(PeakPolicy)
           if not _policy_value_ok(getattr(policy, f.name), _kind(f.default))]
    if bad:
        raise ConfigError(f"${POLICY_ENV}: {'; '.join(bad)} (got {clip(text, 200)!r})")
    return policy


_WANT = {"sizes": "a non-empty list of integers > 0", "int": "an integer > 0", "float": "a number > 0"}


def _kind(default) -> str:
    """A PeakPolicy field's kind (_WANT), from its default's type."""
    return "sizes" if isinstance(default, tuple) else "int" if isinstance(default, int) else "float"


def _policy_value_ok(v, kind: str) -> bool:
    def positive(x) -> bool:
        return finite_number(x) and x > 0

    if kind == "sizes":
        return isinstance(v, tuple) and bool(v) and all(isinstance(x, int) and positive(x) for x in v)
    return positive(v) and (kind == "float" or isinstance(v, int))


@dataclass(frozen=True)
class Reading:
    """One showing of a device's matmul throughput."""

    tflops: float
    by: str  # the backend that measured it, or the model step that showed it
    at: str  # ISO time
    how: str
    other_cores: float | None = None  # CPU cores other processes used meanwhile
    busy: bool = False
    backend: str | None = None  # set for a full matmul measurement by that backend (not for observations)


@dataclass(frozen=True)
class Peak:
    """The peak a row divides by, and where it came from."""

    tflops: float
    source: PeakSource
    by: str  # datasheet: its source; measured: the backend (or step) that showed the best reading
    at: str | None = None  # when the best reading was taken (measured peaks)
    provisional: bool = False  # every reading so far was taken while other processes loaded the CPU

    @property
    def basis(self) -> PeakBasis:
        if self.source is PeakSource.DATASHEET:
            return PeakBasis.DATASHEET
        return PeakBasis.MEASURED_BUSY if self.provisional else PeakBasis.MEASURED_QUIET

    def metrics(self) -> dict:
        return {"peak_tflops": self.tflops, "peak_source": self.source.value, "peak_basis": self.basis.value,
                "peak_by": self.by, "peak_measured_at": self.at, "peak_provisional": self.provisional}


# -----------------------------------------------------------------------------------------------------------------
# The cache
# -----------------------------------------------------------------------------------------------------------------
def cache_path() -> Path:
    return cache_dir() / "peaks.json"


def peak_key(device: Device, precision: str, threads: int | None) -> str:
    """Machine + device + precision (+ threads on a CPU, where the thread count is part of the device's speed)."""
    parts = [machine_id(), device.name, precision]
    if device.kind is DeviceKind.CPU:
        parts.append(f"threads={threads}")
    return "|".join(parts)


def _load(path: Path) -> dict | None:
    """The peak cache's entries ({} where there is no file yet); None where the file is not a JSON object of
    vitbench's entries (a file of someone else's: never written over; a user's own peaks.json, {"everest": 8849},
    was re-indented and given an entry): every key a peak_key ("|"-joined) and every value an entry (an object
    with its readings or its peak)."""
    if not os.path.lexists(path):
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    ours = isinstance(data, dict) and all(
        isinstance(k, str) and "|" in k and isinstance(v, dict) and ("readings" in v or "peak_tflops" in v)
        for k, v in data.items())
    return data if ours else None


def _valid_peak(v) -> bool:
    return finite_number(v) and v > 0


# An entry's bookkeeping as _merge writes it: each field absent or of this kind (a list's items of the second)
_ENTRY_FIELDS = {"readings": (list, dict), "measured_by": (list, str), "quiet_readings": (int, None),
                 "busy_readings": (int, None), "by": (str, None), "measured_at": (str, None), "how": (str, None)}


def _kept(entry) -> bool:
    """Whether an entry's bookkeeping is as vitbench writes it: an edited field of another kind (readings 5,
    quiet_readings "abc", measured_by 7, by null) makes the entry as if unmeasured (was a traceback in `vitbench
    env`, a calibration or a quiet bench row, or a peak "from None")."""
    def fits(v, kind, item) -> bool:
        if isinstance(v, bool) or not isinstance(v, kind):
            return False
        return v >= 0 if kind is int else item is None or all(isinstance(x, item) for x in v)

    return isinstance(entry, dict) and all(k not in entry or fits(entry[k], *kinds)
                                           for k, kinds in _ENTRY_FIELDS.items())


def read_entry(key: str) -> dict | None:
    """The device's entry where its peak is a finite number > 0 and its bookkeeping is vitbench's (_kept): an
    edited -1, NaN or text is as if unmeasured: measured again, never an MFU divided by it."""
    entry = (_load(cache_path()) or {}).get(key)
    return entry if _kept(entry) and _valid_peak(entry.get("peak_tflops")) else None


def offer(key: str, reading: Reading, policy: PeakPolicy | None = None, base: dict | None = None) -> dict:
    """Add a reading to the device's entry; the peak rises if the reading beats it. Returns the entry (when the
    cache cannot be written, the entry in memory: the cache's, else `base`, plus this reading)."""
    policy = policy or current_policy()
    path = cache_path()
    try:
        with locked(path):
            cache = _load(path)
            if cache is None:
                warnings.warn(f"{path} is not vitbench's peak cache (not a JSON object of its entries): left as "
                              "it is; this reading counts for this run only", VitbenchWarning, stacklevel=2)
                raise OSError("not vitbench's peak cache")
            entry = _merge(cache.get(key), reading, policy)
            cache[key] = entry
            write_atomic(path, json.dumps(cache, indent=1))  # a reader never sees a half-written cache
    except OSError:  # a read-only home is no reason to fail a measurement: the reading still counts here
        entry = _merge(read_entry(key) or base, reading, policy)
    return entry


def _merge(entry: dict | None, reading: Reading, policy: PeakPolicy) -> dict:
    e = dict(entry) if _kept(entry) else {}  # an edited entry's bookkeeping starts again from this reading
    e["readings"] = [*(e.get("readings") or []), asdict(reading)][-policy.keep:]
    if reading.backend is not None:  # a full measurement (observations raise the peak, never settle it)
        e["quiet_readings"] = int(e.get("quiet_readings", 0)) + (not reading.busy)
        e["busy_readings"] = int(e.get("busy_readings", 0)) + bool(reading.busy)
        e["measured_by"] = sorted({*(e.get("measured_by") or []), reading.backend})
    if reading.tflops > (e["peak_tflops"] if _valid_peak(e.get("peak_tflops")) else 0.0):
        e.update(peak_tflops=reading.tflops, by=reading.by, measured_at=reading.at, how=reading.how)
    return e


def _provisional(entry: dict) -> bool:
    return int(entry.get("quiet_readings", 0)) == 0


def _peak(entry: dict) -> Peak:
    return Peak(float(entry["peak_tflops"]), PeakSource.MEASURED, str(entry.get("by")),
                at=entry.get("measured_at"), provisional=_provisional(entry))


# -----------------------------------------------------------------------------------------------------------------
# Measuring
# -----------------------------------------------------------------------------------------------------------------
def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def measure_reading(be: Backend, precision: str, policy: PeakPolicy | None = None) -> Reading:
    """The best matmul rate `be` (already set up) shows over the policy's sizes."""
    policy = policy or current_policy()
    device = be.device_info()
    sizes = policy.sizes(device.kind)
    best, best_n = 0.0, sizes[0]
    with LoadMeter() as load:
        for n in sizes:
            flops = be.matmul_flops_per_s(precision, n=n, seconds=policy.seconds)
            if flops > best:
                best, best_n = flops, n
    busy = load.busy and device.kind is DeviceKind.CPU  # other CPU load slows a CPU, not an accelerator
    return Reading(best / 1e12, be.name, now_iso(),
                   f"{precision} matmul, best of n={'/'.join(map(str, sizes))} (n={best_n}), median of queued "
                   f"windows over {policy.seconds:g} s each", load.other_cores, busy, backend=be.name)


def measure_elsewhere(backend: str, device: Device, precision: str, threads: int | None,
                      policy: PeakPolicy | None = None) -> Reading | None:
    """`backend` measures the same device in a fresh process (its framework never shares ours); None when it
    cannot (not installed, another device under that index, a failure)."""
    policy = policy or current_policy()
    dev = backend_spec(backend).device_string(device.kind, device.index)
    payload = json.dumps({"backend": backend, "device": dev, "threads": threads, "precision": precision,
                          "device_name": device.name, "policy": asdict(policy)})
    try:
        proc = subprocess.run([sys.executable, "-m", "vitbench.measure.peak_probe", payload], capture_output=True,
                              text=True, timeout=policy.timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    data = last_marked(proc.stdout, PEAK_MARK)
    return Reading(**data) if data else None


def _can_measure(spec, device: Device, precision: str) -> bool:
    """Whether a backend of this spec can run a `precision` matmul on a device of this kind."""
    dev = spec.device_string(device.kind, device.index)
    return (Capability.MATMUL_PEAK in spec.capabilities and dev is not None
            and not spec.problems({"precision": precision, "device": dev}))


def _measurers(device: Device, precision: str) -> list[str]:
    """The registered, installed backends that can run a `precision` matmul on a device of this kind."""
    from vitbench.registry import Kind, entry

    return [name for name in backend_names()
            if _can_measure(backend_spec(name), device, precision) and not entry(Kind.BACKEND, name).missing()]


def _datasheet_peak(device: Device, precision: str) -> Peak | None:
    sheet = datasheet_tflops(device.name, precision)
    if sheet is None:
        return None
    tflops, row = sheet
    return Peak(tflops, PeakSource.DATASHEET, f"{row.device}: {row.source}")


def establish(be: Backend, precision: str, threads: int | None, only: set[str] | None = None,
              policy: PeakPolicy | None = None, entry: dict | None = None) -> dict | None:
    """Every backend that can (or those in `only`) shows its matmul rate on `be`'s device: `be` here, the others
    in their own processes; each reading is offered to the cache. Returns the device's entry after them (`entry`
    is the one known before, kept in memory should the cache not be writable)."""
    policy = policy or current_policy()
    device = be.device_info()
    key = peak_key(device, precision, threads)
    names = [n for n in {*_measurers(device, precision), be.name} if only is None or n in only]
    for name in sorted(names):
        if name == be.name:
            r = measure_reading(be, precision, policy) if _can_measure(be.spec, device, precision) else None
        else:
            r = measure_elsewhere(name, device, precision, threads, policy)
        if r is not None:
            entry = offer(key, r, policy, base=entry)
    return entry


def device_peak(be: Backend, precision: str, threads: int | None, refresh: bool = False,
                remeasure_provisional: bool = False, quiet_now: bool | None = None,
                policy: PeakPolicy | None = None) -> Peak | None:
    """The peak of `be`'s device (set up) in `precision`: datasheet, else the measured one (measured now by every
    backend here that has not measured it yet; by every backend when `refresh`). A provisional one (every full
    measurement busy, whoever took it) is measured again by `be` when the host is quiet now (`quiet_now`: the
    caller saw it so, e.g. over a row's timed steps; None with `remeasure_provisional`: a QUIET_SAMPLE_S sample
    says), and, with `remeasure_provisional`, while busy too until `busy_retries` busy readings. None when no
    backend here can measure it."""
    policy = policy or current_policy()
    device = be.device_info()
    sheet = _datasheet_peak(device, precision)
    if sheet is not None:
        return sheet
    key = peak_key(device, precision, threads)
    entry = read_entry(key)
    missing = {*_measurers(device, precision), be.name} - set((entry or {}).get("measured_by") or [])
    if refresh or entry is None or missing:
        entry = establish(be, precision, threads, None if (refresh or entry is None) else missing, policy, entry)
    elif _provisional(entry) and _can_measure(be.spec, device, precision):
        if quiet_now is None and remeasure_provisional:
            quiet_now = others_now(QUIET_SAMPLE_S) < BUSY_CORES
        if quiet_now or (remeasure_provisional and int(entry.get("busy_readings", 0)) <= policy.busy_retries):
            entry = offer(key, measure_reading(be, precision, policy), policy, base=entry)
    return _peak(entry) if entry and entry.get("peak_tflops") else None


def offer_observation(be: Backend, precision: str, threads: int | None, tflops: float, by: str, how: str,
                      other_cores: float | None = None, busy: bool = False,
                      policy: PeakPolicy | None = None) -> Peak | None:
    """A rate the device was seen to reach (a calibration's matmul, a model step's model FLOP/s): the measured
    peak rises to it if it is higher. Devices with a datasheet peak keep it (returned unchanged)."""
    device = be.device_info()
    sheet = _datasheet_peak(device, precision)
    if sheet is not None:
        return sheet
    key = peak_key(device, precision, threads)
    entry = offer(key, Reading(tflops, by, now_iso(), how, other_cores, busy), policy)
    return _peak(entry)
