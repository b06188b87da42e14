"""Tasks `infer` and `train`: throughput of a timed step (records of kind 'bench'), and their report sections."""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationInfo, model_validator

from vitbench.backends.base import Capability, Step, StopRule
from vitbench.backends.workload import MAX_STEPS
from vitbench.measure.noise import UNSTABLE
from vitbench.measure.timing import DEFAULT_TIMING, MIN_WINDOWS, TARGET_WINDOWS, TimingMode
from vitbench.record import Record
from vitbench.tasks import Task, register_task
from vitbench.tasks.bench_metrics import METRICS
from vitbench.tasks.fields import MAX_COUNT, literal_of, named, params_model
from vitbench.tasks.real_input import PREFIX as REAL_INPUT
from vitbench.tasks.real_input import RealInput
from vitbench.transfer.config import MAX_SECONDS

KIND = "bench"
_SHARED = ("model", "backend", "task", "device", "resolution", "batch_size", "precision", "compile",
           "compile_mode", "seed", "threads", "num_classes", "channels_last", "devices", "parallelism")


TimingName = literal_of(TimingMode.values())


class Timing(BaseModel):
    """How steps are timed and for how long (vitbench.measure.throughput, vitbench.measure.timing)."""

    # The default is what the field calls img/s: timm's benchmark.py and TorchBench time many queued steps
    # between two synchronisations (see vitbench.measure.timing.TimingMode).
    timing: TimingName = Field(
        DEFAULT_TIMING.value, description="throughput: windows of steps queued between two device events (img/s); "
                                  "latency: every step synchronised (per-step p50/p90/p99)")
    # window_steps and min_steps at most MAX_STEPS, the most a timer runs (vitbench.backends.workload.StopRule): a
    # min_steps past it stopped there in silence, and a window past it could not stop before its end
    window_steps: int | None = Field(None, gt=0, le=MAX_STEPS, description=f"throughput: steps per window (null: "
                                     f"enough for {TARGET_WINDOWS} windows to cover min_steps and min_seconds, at "
                                     f"least {MIN_WINDOWS} windows; one window must fit in max_seconds)")
    # The stop rule "at least min_steps steps and at least min_seconds" is optimum-benchmark's (InferenceConfig:
    # iterations=10, duration=10 s, warmup_runs=10; optimum_benchmark/scenarios/inference/config.py), and its 10
    # steps are kept. The seconds are 1, not 10: a sweep times hundreds of trials on a CPU, and a study or
    # --min-seconds asks for more (the gate's studies do). The warm-up is 3 steps *after* the first, which is
    # timed apart and absorbs compilation and allocator growth (optimum-benchmark's runs include it); a drift
    # left after them is flagged (`drift`, docs/gpu.md). max_seconds bounds a trial of a model too slow for
    # min_steps: a minute per trial keeps a sweep's length predictable.
    warmup_steps: int = Field(3, ge=0, le=MAX_COUNT, description="steps after the first, run but not counted")
    min_steps: int = Field(10, gt=0, le=MAX_STEPS, description="timed steps at least")
    min_seconds: float = Field(1.0, ge=0, le=MAX_SECONDS,
                               description="wall-clock seconds of timing at least, from the first timed step (gaps "
                               "between steps included: timed_s, the steps' own time, can be less)")
    max_seconds: float = Field(60.0, gt=0, le=MAX_SECONDS, description="stop timing after this long even before min_steps")

    @model_validator(mode="after")
    def _windows_in_throughput(self, info: ValidationInfo):
        """Latency timing synchronises every step: a window size given with it was kept in the row and its key
        and applied nowhere (found by a review). Refused, as a setting that does nothing; the check is here rather
        than `applies_when`, which would leave window_steps out of every latency trial's config and so change
        the keys of the latency rows already stored."""
        if self.timing != TimingMode.THROUGHPUT.value and self.window_steps is not None:
            raise ValueError(f"{named(info, 'window_steps')} applies only with {named(info, 'timing')} "
                             f"{TimingMode.THROUGHPUT.value} (here {self.timing}: every step is timed alone): leave "
                             "it unset")
        return self

    @model_validator(mode="after")
    def _min_within_max(self, info: ValidationInfo):
        if self.min_seconds > self.max_seconds:  # max_seconds would silently win
            raise ValueError(f"{named(info, 'min_seconds')} ({self.min_seconds:g}) is more than "
                             f"{named(info, 'max_seconds')} ({self.max_seconds:g}): timing stops at the latter")
        return self

    def stop_rule(self) -> StopRule:
        """When the timer stops (vitbench.backends.workload.StopRule), from these fields: the one declaration of
        its defaults."""
        return StopRule(min_steps=self.min_steps, min_seconds=self.min_seconds, max_seconds=self.max_seconds)


class _Bench(Task):
    kind = KIND
    metrics = METRICS
    headline = "img_per_s"
    calibrated = True

    def run(self, p) -> Record:
        from vitbench.measure.throughput import bench

        step = Step.of(p.config(), mode=self.name, spec=p.spec)  # the model resolved with the params
        return bench(step, backend=p.backend, device=p.device, threads=p.threads,
                     warmup_steps=p.warmup_steps, stop=p.stop_rule(), timing=p.timing,
                     window_steps=p.window_steps)


@register_task
class Infer(_Bench):
    name = "infer"
    Params = params_model("InferParams", _SHARED, Timing)
    description = "inference throughput (img/s, step-time stats, memory, MFU)"
    needs = frozenset({Capability.INFER, Capability.MEMORY})


@register_task
class Train(_Bench):
    name = "train"
    Params = params_model("TrainParams", (*_SHARED, "optimizer"), Timing, RealInput)
    description = ("training-step throughput (forward + backward + optimizer); with real_input_dataset also "
                   "on real images, timed alike")
    needs = frozenset({Capability.TRAIN, Capability.MEMORY})

    def run(self, p) -> Record:
        """The synthetic run; with `real_input_dataset`, then the transfer training loop on those images, timed
        with the same settings (vitbench.protocols.input_bench), its figures added to the row. The data is
        listed before any timing, so bad data fails first."""
        from vitbench.record import Status
        from vitbench.transfer.data import load_splits

        data = p.real_input_data()
        real = None if data is None else load_splits(data)
        rec = super().run(p)
        if real is not None and rec.status is Status.OK:
            from vitbench.protocols.input_bench import real_input_training

            got, raw = real_input_training(p.model, p.backend, real, p.resolution, p.batch_size,
                                           min_steps=p.real_input_steps, min_seconds=p.min_seconds,
                                           max_seconds=p.max_seconds, warmup_steps=p.warmup_steps,
                                           device=p.device, threads=p.threads, seed=p.seed,
                                           window_steps=p.window_steps)
            rec.metrics.update(got)
            rec.raw.update(raw)
            # the config names the images timed (a command's row matches on its config: vitbench.compare.match;
            # without them a digits row and a cifar row were one trial); set only with real_input_dataset, so
            # every other row's config is as before
            rec.config = {**rec.config, **{k: v for k, v in p.config().items() if k.startswith(REAL_INPUT)}}
            if got["real_input_noise"]:  # the row is as trustworthy as its least trustworthy part
                rec.metrics[UNSTABLE] = True
                rec.metrics["noise"] = "; ".join(filter(None, (rec.metrics.get("noise"),
                                                               f"real images: {got['real_input_noise']}")))
        return rec
