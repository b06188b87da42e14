"""Task `calibration`: the device's dense-matmul throughput, measured fresh at the start of every sweep run.

`vitbench compare --normalize` divides speeds by it (the calibration of the same run), so a slower or busier
machine is not called a regression. Never cached as such; its best reading is offered to the device's measured
peak (vitbench.measure.peak: a quieter moment raises a peak first measured on a busy machine). Hidden from
studies (the runner schedules it).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from vitbench.backends.base import Capability
from vitbench.record import Record, finite_number
from vitbench.tasks import OTHER_LOAD_CORES, Metric, Role, Task, register_task
from vitbench.tasks.fields import params_model

METRIC = "matmul_tflops_per_s"
# A sweep takes a calibration per backend and device (where) and per precision and thread count (how): a speed is
# divided only by a calibration of the same four (compare --normalize), and the report never pools two of them
WHERE = ("backend", "device")
HOW = ("precision", "threads")
CONDITIONS = (*WHERE, *HOW)
SIZE = "matmul_n"  # and at the size of its matmul (the row's metric; a row before 2026-11-29: its config's, 1024)
LEGACY_N = 1024  # the size every calibration took before it followed the device's kind
# The most TFLOP/s a calibration sample (and its median) can be: a value above it was never measured (an edited
# or another tool's row), refused where rows are read (tasks.row_check), so never divided by in compare
# --normalize, report or history. The fastest single accelerator's peak: NVIDIA H200 datasheet, FP8 Tensor Core
# 3,958 TFLOPS (with sparsity; dense is half); 1e5 is ~25 times that, room for devices to come. 1e308 was read
# as a machine infinitely fast (compare's "machine inf", a regression of ratio 1e-309).
MAX_TFLOPS = 1e5
# The least: 1 MFLOP/s. One core of this project's 2-core CI host (Intel Xeon VM) times a 1024 matmul in fp32 at
# 0.099 TFLOP/s (torch, 1 thread, 2026-12-01), 1e5 times more; a host 100 times busier, or a device 100 times
# slower, stays 10 times above it. 1e-305 made every speed divided by it overflow (compare --normalize's 'machine
# inf'), and 1e-9 a speed 1e8 times the other side's, decided on as if measured.
MIN_TFLOPS = 1e-6


def matmul_size(rec: Record) -> int | None:
    """The matrix size a calibration record measured at: a speed is divided only by a calibration of the same."""
    v = rec.metrics.get(SIZE, rec.measured_config.get(SIZE) or LEGACY_N)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def calibrates(backend: str) -> bool:
    """Whether a sweep can take a calibration on `backend`: it times a matmul of its own (Capability.MATMUL_PEAK;
    a deployment runtime does not); an unknown backend (a plug-in not loaded) is given the benefit of the doubt."""
    from vitbench.backends.spec import backend_spec

    try:
        return Calibration.needs <= backend_spec(backend).capabilities
    except Exception:  # noqa: BLE001 - not registered here
        return True


class Matmul(BaseModel):
    matmul_n: int | None = Field(None, gt=0, description="square matrix size (default: by the device's kind, "
                                 "vitbench.measure.peak.PeakPolicy.calibration_n)")
    seconds: float = Field(0.25, gt=0, description="timed seconds per repetition")
    reps: int = Field(3, gt=0, description="repetitions (median, min and max kept)")


def calibration_samples(rec: Record) -> list[float] | None:
    raw = rec.raw.get(METRIC)
    if isinstance(raw, list):
        xs = [x for x in raw if finite_number(x)]
        if xs:
            return xs
    v = rec.metrics.get(METRIC)
    return [v] if finite_number(v) else None


@register_task
class Calibration(Task):
    name = "calibration"
    kind = "calibration"
    Params = params_model("CalibrationParams", ("task", *WHERE, *HOW), Matmul)
    description = "device matmul throughput, measured at the start of each sweep run"
    needs = frozenset({Capability.MATMUL_PEAK})
    metrics = (Metric(METRIC, "TFLOP/s", True, "dense matmul throughput (2 FLOPs per MAC)",
                      samples=calibration_samples, samples_from=METRIC, minimum=MIN_TFLOPS,
                      maximum=MAX_TFLOPS),
               Metric(SIZE, "elements", True, "the square matrix size used (the field's, or the device kind's)"),
               OTHER_LOAD_CORES)
    headline = METRIC
    hidden = True
    role = Role.CALIBRATION

    def run(self, p) -> Record:
        from vitbench.backends.base import get_backend
        from vitbench.env import environment
        from vitbench.measure.load import OTHER_LOAD, LoadMeter
        from vitbench.measure.peak import current_policy, device_peak, offer_observation
        from vitbench.record import now

        started = now()
        be = get_backend(p.backend)
        info = be.setup(p.device, p.threads)
        n = p.matmul_n or current_policy().calibration_n(be.device_info().kind)
        with LoadMeter() as load:
            vals = [be.matmul_flops_per_s(p.precision, n=n, seconds=p.seconds) / 1e12 for _ in range(p.reps)]
        s = sorted(vals)
        metrics = {METRIC: s[len(s) // 2], f"{METRIC}_max": s[-1], f"{METRIC}_min": s[0], SIZE: n,
                   OTHER_LOAD: load.other_cores}
        offer_observation(be, p.precision, info.get("threads"), s[-1], by=f"calibration ({be.name})",
                          how=f"{p.precision} matmul n={n}, best of {p.reps} x {p.seconds:g} s",
                          other_cores=load.other_cores, busy=load.busy)
        # before the run's trials: a missing peak is measured, a provisional one (measured while busy) again when
        # this calibration saw the host quiet (else within the policy's busy retries)
        device_peak(be, p.precision, info.get("threads"), remeasure_provisional=True, quiet_now=not load.busy)
        return Record.measured(self.kind, p.config(), metrics=metrics, raw={METRIC: vals}, env=environment(info),
                               started_at=started)
