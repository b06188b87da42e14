"""Task `max_batch`: the largest batch that fits (records of kind 'max_batch'), and its report section."""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationInfo, model_validator

from vitbench.backends.base import Capability, Mode, Step
from vitbench.record import Record
from vitbench.tasks import FLAG, Metric, Task, register_task
from vitbench.tasks.fields import MAX_COUNT, applies_when, named, params_model
from vitbench.transfer.config import MAX_SECONDS

KIND = "max_batch"
CAPPED = "capped"  # the flag vitbench.measure.max_batch writes where the search reached its cap


class Search(BaseModel):
    """How the search runs (vitbench.measure.max_batch)."""

    mode: Mode = Field("infer", description="the step probed: forward, or a training update")
    # at most 2**20 GiB (1 PiB): more is a typo, not a budget
    memory_limit_gib: float | None = Field(None, gt=0, le=2**20, description="budget for a probe's peak memory (CPU "
                                           "default: half the memory available; GPU: the real OOM)")
    max_batch_size: int = Field(4096, gt=0, le=MAX_COUNT, description="stop doubling here")
    start: int = Field(1, gt=0, le=MAX_COUNT, description="first batch size probed")
    granularity: int = Field(1, gt=0, le=MAX_COUNT, description="bisect until fitting and failing batches are this close")
    probe_timeout_s: float = Field(600.0, gt=0, le=MAX_SECONDS, description="seconds before a probe is killed (counts as failing)")

    @model_validator(mode="after")
    def _start_within_limit(self, info: ValidationInfo):
        if self.start > self.max_batch_size:  # measure.max_batch.search's rule, named as the user wrote it
            raise ValueError(f"{named(info, 'start')} ({self.start}) is more than {named(info, 'max_batch_size')} "
                             f"({self.max_batch_size}): the search starts at or below its limit")
        return self


@register_task
class MaxBatch(Task):
    name = "max_batch"
    kind = KIND
    Params = params_model("MaxBatchParams", ("model", "backend", "task", "device", "resolution", "precision",
                                             "compile", "threads", "num_classes", "channels_last", "devices",
                                             "parallelism"), Search, neutral=("optimizer",),
                          applies={"optimizer": applies_when(mode=("train",))})  # infer keeps no optimizer state
    description = "largest batch that fits (fresh process per probe)"
    needs = frozenset({Capability.MAX_BATCH})
    metrics = (Metric("max_batch_size", "images", True, "largest batch that fits, per device (devices > 1)",
                      comparable=True, default_compare=True,
                      bounded_by=("memory_limit_mib",),  # a CPU's default: free RAM / 2
                      lower_bound_when=CAPPED),
               Metric("max_batch_size_global", "images", True, "largest batch that fits, over every device",
                      lower_bound_when=CAPPED),
               Metric(CAPPED, FLAG, False, "the search reached its cap (max_batch_size_cap): the batch that does "
                      "not fit is not known, so max_batch_size is a lower bound"),
               Metric("probes", "probes", False, "probes the search ran (each a fresh process)"),
               Metric("peak_mem_mib", "MiB", False, "the largest fitting probe's steps' own peak memory"),
               Metric("process_peak_mib", "MiB", False, "the largest fitting probe's whole-process peak: what the "
                      "memory limit judged (probe_start_method says what the process held beside the steps)"),
               Metric("search_s", "s", False, "seconds of every probe, summed"))
    headline = "max_batch_size"
    repeat = False

    def run(self, p) -> Record:
        from vitbench.measure.max_batch import max_batch

        # the model resolved with the params; the optimizer (its state counts toward memory) in training
        step = Step.of(p.config(), mode=p.mode, batch_size=p.devices, spec=p.spec, optimizer=p.optimizer)
        return max_batch(step, backend=p.backend, device=p.device,
                         threads=p.threads, memory_limit_gib=p.memory_limit_gib, max_batch_size=p.max_batch_size,
                         start=p.start, granularity=p.granularity, probe_timeout_s=p.probe_timeout_s)
