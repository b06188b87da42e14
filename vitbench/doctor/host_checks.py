"""The host's checks for `vitbench doctor` (threads against usable cores, other load, CPU clocks and governor, SMT,
temperatures, memory and swap), and the `Check` every doctor check returns: a status, what was found, and why it
matters, so the output explains itself. The per-backend checks are in vitbench.doctor.checks."""

from __future__ import annotations

import enum
import glob
import os
import sys
import time
from dataclasses import asdict, dataclass, field

import psutil

from vitbench.cpus import cpu_limit, cpu_quota_cores, free_cores, usable_cpus
from vitbench.measure.load import BUSY_CORES, LoadMeter


class Status(str, enum.Enum):
    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    def __str__(self) -> str:
        return self.value


@dataclass
class Check:
    name: str
    status: Status
    found: str
    why: str
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d



def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def usable_cores() -> tuple[int, float | None]:
    """(CPUs this process may run on, the cgroup CPU quota in cores or None)."""
    return usable_cpus(), cpu_quota_cores()


def check_threads(threads: dict[str, int | None], other_cores: float | None = None,
                  chosen: dict[str, str | None] | None = None) -> Check:
    """Each backend's thread count against the cores: above the usable CPUs (affinity, quota), or above the cores
    other processes leave free (`other_cores`, as the load check saw them: vitbench.cpus.free_cores) where more
    than one thread would have to meet at barriers."""
    cpus, quota = usable_cores()
    limit = cpu_limit()
    free = free_cores(other_cores or 0.0, limit)
    over = {b: t for b, t in threads.items() if t and t > limit}
    crowded = {b: t for b, t in threads.items() if t and t > free and b not in over}
    env = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS") if k in os.environ}
    how = chosen or {}
    found = (
        f"{cpus} usable CPU(s)"
        + (f", cgroup quota {quota:g} cores" if quota else "")
        + (f"; others used {other_cores:.2f} cores, leaving {free} free" if other_cores is not None else "")
        + "; threads: "
        + ", ".join(f"{b} {t}" + (f" ({how[b]})" if how.get(b) else "") for b, t in threads.items())
        + (f"; {env}" if env else "")
    )
    why = (
        "More compute threads than free cores time-slice with each other or with other work: a pool whose "
        "workers meet after every operation (OpenMP's) waits for its descheduled worker each time, and on a "
        "2-core machine with others using 1.5 cores a tiny model trained 20-40x slower on 2 threads than on 1 "
        "(docs/measurement.md). Use --threads 1 (a study's `threads: 1`), or leave threads unset: then a backend "
        "whose pool stalls this way takes only the cores others leave free, per trial (the row's env says "
        "`threads_chosen`); or measure on a quiet machine."
    )
    return Check(
        "threads",
        Status.WARN if over or crowded else Status.OK,
        found,
        why,
        {"usable_cpus": cpus, "cgroup_quota_cores": quota, "cpu_limit": limit, "other_cores": other_cores,
         "free_cores": free, "threads": threads, "threads_chosen": how, "over_cpus": sorted(over),
         "over_free_cores": sorted(crowded), "env": env},
    )


def check_load(seconds: float = 1.0) -> Check:
    with LoadMeter() as m:
        time.sleep(seconds)
    cores = m.other_cores or 0.0
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    top = sorted(
        ((p.info["cpu_percent"] or 0.0, p.info["name"]) for p in psutil.process_iter(["cpu_percent", "name"])),
        reverse=True,
    )[:3]
    found = f"other processes used {cores:.2f} cores over {seconds:g} s" + (
        f"; 1-min load average {load1:.2f}" if load1 is not None else ""
    )
    why = (
        f"Other work on the same cores slows steps at random: speeds drift and spread (a row is flagged when "
        f"others use >= {BUSY_CORES} cores during its timed steps). Measure on a quiet machine, or compare "
        "with `vitbench compare --normalize`."
    )
    return Check(
        "other load",
        Status.WARN if cores >= BUSY_CORES else Status.OK,
        found,
        why,
        {"other_cores": cores, "loadavg_1min": load1, "top_now": [n for _, n in top]},
    )


def check_cpu_frequency() -> Check:
    governors = sorted(
        {
            g
            for g in (_read(p) for p in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))
            if g
        }
    )
    cur = [
        int(x) / 1000
        for x in (_read(p) for p in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"))
        if x and x.isdigit()
    ]
    mx = [
        int(x) / 1000
        for x in (_read(p) for p in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"))
        if x and x.isdigit()
    ]
    boost = _read("/sys/devices/system/cpu/cpufreq/boost")
    if not governors and not cur:
        mhz = []
        for line in (_read("/proc/cpuinfo") or "").splitlines():
            if line.startswith("cpu MHz"):
                mhz.append(float(line.split(":")[1]))
        if not sys.platform.startswith("linux"):  # cpufreq and /proc are Linux's
            return Check(
                "cpu clocks",
                Status.INFO,
                f"not readable on this OS ({sys.platform})",
                "The clocks and their governor are read from Linux's cpufreq interface; this OS has none, so "
                "power-saving clocks cannot be ruled out here.",
                {"cpu_mhz": mhz},
            )
        found = "no cpufreq interface (a VM or container: the host sets the clocks)" + (
            f"; /proc/cpuinfo reports {min(mhz):.0f}-{max(mhz):.0f} MHz" if mhz else ""
        )
        return Check(
            "cpu clocks",
            Status.INFO,
            found,
            "The hypervisor or host decides the clocks; other guests on "
            "the host are invisible noise (their 'steal' time shows in the other-load check).",
            {"cpu_mhz": mhz},
        )
    found = (
        f"governor {', '.join(governors) or 'unknown'}"
        + (f"; clocks {min(cur):.0f}-{max(cur):.0f} MHz of max {max(mx):.0f}" if cur and mx else "")
        + (f"; boost {'on' if boost == '1' else 'off'}" if boost is not None else "")
    )
    status = Status.WARN if governors and governors != ["performance"] else Status.OK
    why = (
        "A power-saving governor (powersave, ondemand, schedutil) changes clocks with load: the first steps run "
        "slower than the rest and short runs vary; `performance` holds them (pyperf system tune does the same). "
        "Boost clocks depend on temperature and on how many cores are busy."
    )
    return Check(
        "cpu clocks", status, found, why, {"governors": governors, "cur_mhz": cur, "max_mhz": mx, "boost": boost}
    )


def check_smt() -> Check:
    active = _read("/sys/devices/system/cpu/smt/active")
    physical = psutil.cpu_count(logical=False)
    logical = psutil.cpu_count(logical=True)
    smt = {"1": "on", "0": "off"}.get(active or "", "unknown")
    found = f"{logical} logical CPU(s), {physical} physical core(s); SMT {smt}"
    why = (
        "Two hardware threads of one core share its matmul units: threads beyond the physical cores add little "
        "and make timings depend on what runs on the sibling."
    )
    return Check("smt", Status.INFO, found, why, {"logical": logical, "physical": physical, "smt_active": active})


def check_thermal() -> Check:
    zones = []
    for z in sorted(glob.glob("/sys/class/thermal/thermal_zone*")):
        t = _read(f"{z}/temp")
        if t and t.lstrip("-").isdigit():
            zones.append((_read(f"{z}/type") or os.path.basename(z), int(t) / 1000))
    if not zones:
        return Check(
            "thermal",
            Status.INFO,
            "no readable thermal zones (VM or container)" if sys.platform.startswith("linux")
            else f"not readable on this OS ({sys.platform})",  # thermal zones are Linux's (/sys/class/thermal)
            "A hot CPU or GPU lowers its clocks: long runs slow down; nothing to read here.",
        )
    hottest = max(zones, key=lambda z: z[1])
    status = Status.WARN if hottest[1] >= 90 else Status.OK  # most CPUs throttle in the 90s degrees C
    return Check(
        "thermal",
        status,
        ", ".join(f"{n} {t:.0f} C" for n, t in zones),
        "A hot chip lowers its clocks (thermal throttling): long runs slow down part-way.",
        {"zones": dict(zones)},
    )


def check_memory() -> Check:
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    found = (
        f"{vm.available / 2**30:.1f} GiB available of {vm.total / 2**30:.1f}; swap used {sw.used / 2**30:.2f} GiB"
    )
    status = Status.WARN if sw.used > 2**28 or vm.percent > 90 else Status.OK
    return Check(
        "memory",
        status,
        found,
        "Swapping or a nearly full memory makes steps wait for the disk; peak "
        "memory on a CPU is the process's resident set, which swap hides.",
        {"available_gib": vm.available / 2**30, "swap_used_gib": sw.used / 2**30},
    )
