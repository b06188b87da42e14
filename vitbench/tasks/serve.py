"""Task `serve`: MLPerf Inference's scenarios through LoadGen (records of kind 'serve'; docs/serving.md).

A model served on any backend that can infer, through the backend interface only (`Workload.infer_host`): a
SUT that batches waiting queries (`batch_size` is its max batch, `max_wait_ms` how long it waits to fill one),
a QSL of real images (`dataset`: any of vitbench's data sources, their test split preprocessed at the model's
resolution) or synthetic ones (`dataset: synthetic`), and LoadGen's settings as the fields below, each with
MLPerf's default where MLPerf has one (vitbench.measure.loadgen cites them). The measurement itself:
vitbench.measure.serve.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from vitbench.backends.base import Capability, Step
from vitbench.measure.loadgen import (
    LOGGED_PERCENTILES,
    MLPERF_MIN_DURATION_S,
    MLPERF_SAMPLES_PER_QUERY,
    MLPERF_SEEDS,
    MLPERF_VISION_BOUND_MS,
    SCENARIOS,
)
from vitbench.record import Record
from vitbench.tasks import (
    FLAG,
    NOISE_REASONS,
    OTHER_LOAD_CORES,
    TEXT,
    TIMER,
    UNSTABLE_ROW,
    Metric,
    Task,
    register_task,
)
from vitbench.tasks.bench import Timing
from vitbench.tasks.fields import MAX_COUNT, PathField, applies_when, literal_of, named, params_model
from vitbench.transfer.config import MAX_SECONDS, DataConfig, DatasetName, Seed, default_of, validated

KIND = "serve"
_SHARED = ("model", "backend", "task", "device", "resolution", "batch_size", "precision", "compile",
           "compile_mode", "seed", "threads", "num_classes", "channels_last")
MAX_QPS = 1e7  # a target rate above ten million queries/s is a typo (LoadGen schedules every query up front)
# the fields that apply to some scenarios only (LoadGen's TestSettings reads them there: measure.loadgen.Settings)
_SERVER = applies_when(scenario=("Server",))
# the shared batch_size is the SUT's max batch: SingleStream has one sample outstanding at a time, so its SUT runs
# batch 1 whatever it says (measure.serve.batch_sizes); a MultiStream query's samples arrive together and are
# batched up to it, as Server's and Offline's waiting samples are
_BATCHED = applies_when(scenario=("Server", "MultiStream", "Offline"))


class LoadGenFields(BaseModel):
    """The SUT's batching policy, the QSL and LoadGen's settings (vitbench.measure.loadgen)."""

    scenario: literal_of(tuple(SCENARIOS)) = Field(
        "Server", description="MLPerf scenario: SingleStream (one query at a time: latency percentile), "
        "MultiStream (queries of samples_per_query samples), Server (Poisson arrivals: the highest target QPS "
        "judged VALID at the bound), Offline (every sample in one query: samples/s)")
    max_wait_ms: float = Field(0.0, ge=0, le=60_000, description="the SUT waits at most this long after a batch's "
                               "first query for more, up to batch_size (0: batches what is already waiting, "
                               "Triton's dynamic-batching default max_queue_delay_microseconds: 0)")
    target_qps: float | None = Field(None, gt=0, le=MAX_QPS, json_schema_extra=applies_when(
        scenario=("Server", "Offline")), description="Server: one run at this mean arrival rate (null: search for "
        "the highest VALID one); Offline: the expected rate that sizes LoadGen's query (null: the max batch's "
        "throughput at warm-up)")
    latency_bound_ms: float = Field(MLPERF_VISION_BOUND_MS, gt=0, le=MAX_SECONDS * 1000, json_schema_extra=_SERVER,
                                    description="Server: the latency bound the percentile is judged at (MLPerf's "
                                    "ResNet-50 image classification bound, mlperf.conf: 15 ms)")
    latency_percentile: float | None = Field(None, gt=0, lt=100, description="the latency percentile judged "
                                             "(Server) or reported (null: the scenario's MLPerf default, "
                                             "mlperf.conf: Server 99, MultiStream 99, SingleStream 90, Offline "
                                             "90); one LoadGen's log gives the latency at: 50, 90, 95, 97, 99, "
                                             "99.9")
    min_duration_s: float = Field(MLPERF_MIN_DURATION_S, gt=0, le=MAX_SECONDS, description="LoadGen's minimum "
                                  "run duration (mlperf.conf: 600 s; a CPU study sets a few seconds and says so)")
    min_query_count: int | None = Field(None, gt=0, le=MAX_COUNT, description="LoadGen's minimum query count "
                                        "(null: mlperf.conf's MultiStream 662, else LoadGen's default 100)")
    samples_per_query: int = Field(MLPERF_SAMPLES_PER_QUERY, gt=0, le=MAX_COUNT, json_schema_extra=applies_when(
        scenario=("MultiStream",)), description="MultiStream: samples per query (mlperf.conf: 8)")
    loadgen_seed: Seed | None = Field(None, description="LoadGen's sample and schedule seeds, all three made from "
                                      "this one (null: mlperf.conf's qsl, sample_index and schedule seeds)")
    qps_tolerance: float = Field(0.05, gt=0, lt=1, json_schema_extra=_SERVER, description="Server search: stop "
                                 "when the lowest INVALID target QPS is within this fraction of the highest VALID "
                                 "one")
    max_probes: int = Field(12, gt=0, le=100, json_schema_extra=_SERVER,
                            description="Server search: LoadGen runs at most")
    warmup_steps: int = Field(default_of(Timing, "warmup_steps"), ge=0, le=MAX_COUNT, description="steps per "
                              "prepared batch size after the first, before any LoadGen run")
    dataset: DatasetName = Field(default_of(DataConfig, "name"), description="the QSL's images: a data source's "
                                 "test split at the model's resolution (synthetic: vitbench's synthetic patterns)")
    data_path: PathField | None = Field(None, description="the data source's local path (folder, npz, ...)")
    qsl_images: int = Field(1024, gt=0, le=MAX_COUNT, description="the QSL's size at most (mlperf.conf's "
                            "ResNet-50 performance_sample_count: 1024)")

    @field_validator("data_path")
    @classmethod
    def _path_fits_dataset(cls, v, info):
        """A path only for a data source read from one (as vitbench.transfer.config.DataConfig checks it), an
        error on this field so that a message names it as the user did."""
        from pydantic import ValidationError

        dataset = info.data.get("dataset")
        if dataset is None or v is None:
            return v
        try:
            DataConfig(name=dataset, path=v)
        except ValidationError as e:
            raise ValueError(e.errors()[0]["msg"].removeprefix("Value error, ")) from None
        return v

    @field_validator("latency_percentile")
    @classmethod
    def _logged(cls, v):
        """LoadGen judges any percentile but logs the latency at a few only (LOGGED_PERCENTILES): at another, a
        row would give its verdict without the number it judged."""
        if v is not None and v not in LOGGED_PERCENTILES:
            raise ValueError(f"LoadGen's log gives the latency at the percentiles "
                             f"{', '.join(f'{q:g}' for q in LOGGED_PERCENTILES)} only, not {v:g}: a verdict at "
                             "another would come without its number")
        return v

    @model_validator(mode="after")
    def _schedule_ends(self, info: ValidationInfo):
        """A Server run at a given rate lasts until its minimum query count has arrived too: refused when that is
        beyond any duration a field may ask for (MAX_SECONDS: 0.0001 QPS, a typo, would schedule for months)."""
        if self.scenario == "Server" and self.target_qps is not None and self.scheduled_s() > MAX_SECONDS:
            raise ValueError(f"{named(info, 'target_qps')} {self.target_qps:g} schedules "
                             f"{self.query_count()} queries over {self.scheduled_s():.3g} s, more than "
                             f"{MAX_SECONDS:g} s: raise it or lower {named(info, 'min_query_count')}")
        if self.max_wait_ms and self.scenario not in _BATCHED["applies_when"]["scenario"]:
            # refused as batch_size is there, by a check of its own: an applies_when would drop the field from
            # SingleStream's trial configs at 0 and change their keys
            raise ValueError(f"{named(info, 'max_wait_ms')} applies only with {named(info, 'scenario')} "
                             f"{' or '.join(_BATCHED['applies_when']['scenario'])} (here {self.scenario}: one "
                             "sample at a time, never batched, so there is nothing to wait for): leave it unset")
        return self

    def query_count(self) -> int:
        return self.min_query_count or SCENARIOS[self.scenario].min_query_count

    def scheduled_s(self) -> float:
        """Server at a given target_qps: how long LoadGen's schedule lasts (both minimums met)."""
        return max(self.min_duration_s, self.query_count() / self.target_qps)

    def percentile(self) -> float:
        return self.latency_percentile or SCENARIOS[self.scenario].percentile

    def loadgen_settings(self):
        from vitbench.measure.loadgen import Settings

        seeds = dict(MLPERF_SEEDS) if self.loadgen_seed is None else {
            k: self.loadgen_seed + i for i, k in enumerate(MLPERF_SEEDS)}
        # target_qps None: none given (the Server search's probes and Offline set their own; SingleStream and
        # MultiStream read none); expected_latency_ms: set by the measurement from the warm-up (measure.serve)
        return Settings(scenario=self.scenario, target_qps=self.target_qps,
                        latency_bound_ms=self.latency_bound_ms, percentile=self.percentile(),
                        min_duration_s=self.min_duration_s,
                        min_query_count=self.query_count(),
                        samples_per_query=self.samples_per_query, expected_latency_ms=None, seeds=seeds)


# whose latency the latency metrics are (the row's `latency_per`, vitbench.measure.loadgen.PER_QUERY_SCENARIOS)
_PER = ("per sample; MultiStream: per query, issue to the query's last sample's completion, MLPerf's metric "
        "(latency_per)")
# what a run's completed samples per second are (vitbench.measure.loadgen.completed_rate), in every scenario
_COMPLETED = ("samples completed per second of the run, as LoadGen's log gives it (Offline "
              "result_samples_per_second; Server result_completed_samples_per_sec; SingleStream "
              "result_qps_with_loadgen_overhead, LoadGen's time between queries included; MultiStream, which logs "
              "no rate, the same made from its log: result_query_count x samples_per_query over power_begin to "
              "power_end, the first issue to the last completion)")
# everything a serve row holds (vitbench.measure.serve writes it): its verdict, then its numbers and words in the
# order `vitbench serve` shows them, then its noise flag and reasons
METRICS = (
    Metric("loadgen_valid", FLAG, True, "LoadGen judged a run VALID (Server's search: a probe; else the run); "
           "false: the row is an error, LoadGenInvalid"),
    Metric("loadgen_invalid_reason", TEXT, False, "why LoadGen judged the run shown INVALID (null: VALID)"),
    Metric("samples_per_s", "samples/s", True, "Server: the highest target QPS LoadGen judged VALID at the "
           f"bound; Offline, SingleStream, MultiStream: {_COMPLETED}", comparable=True, default_compare=True,
           speed=True),
    Metric("completed_samples_per_s", "samples/s", True, f"{_COMPLETED}, in the run shown (the best VALID one, "
           "else the last)"),
    Metric("latency_ms_p50", "ms", False, f"median latency, issue to completion, {_PER} (LoadGen)"),
    Metric("latency_ms_p90", "ms", False, f"90th percentile latency, {_PER} (LoadGen)"),
    Metric("latency_ms_p99", "ms", False, f"99th percentile latency, {_PER} (LoadGen)", comparable=True),
    Metric("latency_ms_judged", "ms", False, f"latency at the percentile judged, {_PER} "
           "(latency_percentile_judged: latency_ms_p99 at Server's and MultiStream's default; LoadGen)"),
    Metric("latency_ms_mean", "ms", False, f"mean latency, {_PER} (LoadGen)"),
    Metric("latency_ms_max", "ms", False, f"largest latency, {_PER} (LoadGen)"),
    Metric("latency_percentile_judged", "percentile", False, "the latency percentile LoadGen judged against the "
           "bound (the config's, or the scenario's MLPerf default)"),
    Metric("latency_per", TEXT, False, "what the latency metrics time: 'sample', or 'query' (MultiStream: issue "
           "to the query's last sample's completion; vitbench.measure.loadgen.latency_per)"),
    Metric("probes", "runs", False, "LoadGen runs made (the Server search's probes; 1 otherwise)"),
    Metric("mean_batch", "samples", True, "mean batch the dynamic batcher ran"),
    Metric("padded_samples", "samples", False, "samples padded to reach a compiled batch size"),
    Metric("capacity_samples_per_s", "samples/s", True, "samples/s of back-to-back batches of the largest "
           "prepared size (batch_size; SingleStream: 1), measured before LoadGen ran: in a Server search, "
           "vitbench's throughput mode (up to 2 s; the search's first probe is half of it); in every other run, "
           "the batch over its median warm-up step (its first step where warmup_steps is 0); raw.capacity_from "
           "says which"),
    Metric("throughput_img_per_s", "img/s", True, "Offline: vitbench's throughput mode on the max-batch workload "
           "(median window, bracketing the LoadGen run)"),
    Metric("throughput_img_per_s_min", "img/s", True, "Offline: the slowest of those windows"),
    Metric("throughput_img_per_s_max", "img/s", True, "Offline: the fastest of those windows"),
    Metric("offline_over_throughput", "x", True, "Offline: LoadGen's samples/s over the throughput mode's median"),
    Metric("qsl_images_loaded", "images", False, "images LoadGen's sample library held"),
    Metric("compile_s", "s", False, "compile time of the batch sizes served (null: nothing compiled)"),
    Metric("first_step_s", "s", False, "first step of each batch size served, summed"),
    Metric("qps_search_bracket", TEXT, False, "Server's search (no target_qps given): the highest VALID and the "
           "lowest INVALID target QPS probed, in words, and why it stopped where a probe would have lasted too long"),
    Metric("offline_within_throughput_spread", FLAG, False, "Offline: LoadGen's samples/s lies within the "
           "throughput mode's slowest to fastest window"),
    Metric("host_input", FLAG, False, "the SUT fed LoadGen's samples from the host (the backend's infer_host); "
           "false: the backend's own input, already on its device (dataset: synthetic only)"),
    TIMER,
    OTHER_LOAD_CORES,
    UNSTABLE_ROW,
    NOISE_REASONS,
)


@register_task
class Serve(Task):
    name = "serve"
    kind = KIND
    Params = params_model("ServeParams", _SHARED, LoadGenFields, applies={"batch_size": _BATCHED})
    description = "MLPerf scenarios under LoadGen: Server QPS at a latency bound, stream percentiles, Offline"
    needs = frozenset({Capability.INFER})
    metrics = METRICS
    headline = "samples_per_s"

    def run(self, p) -> Record:
        from vitbench.measure.serve import Search, serve
        from vitbench.transfer.data import load_splits
        from vitbench.transfer.formats import FORMATS

        data = {"name": p.dataset, "path": p.data_path, "seed": p.seed}  # DataConfig's fields <- these params'
        test = load_splits(validated(DataConfig, data, f"task {self.name!r}", {
            "name": p.name_of("dataset"), "path": p.name_of("data_path"), "seed": p.name_of("seed")})).test
        images = test.array(p.resolution)[:p.qsl_images] if test.pool.resident else \
            next(test.batches(p.resolution, p.qsl_images))[0]
        step = Step.of({"batch_size": 1, **p.config()}, mode="infer", spec=p.spec)  # SingleStream: none given
        real = not FORMATS[p.dataset].generated
        rec = serve(step, p.backend, p.device, p.threads, images, real, p.loadgen_settings(),
                    p.max_wait_ms, p.warmup_steps, Search(p.qps_tolerance, p.max_probes),
                    given_qps=p.target_qps is not None)
        rec.config = {**rec.config, **{k: v for k, v in p.config().items() if k in LoadGenFields.model_fields}}
        for k in p.moot(rec.config):  # as the trial's config: SingleStream's max batch is no setting of it
            rec.config.pop(k, None)
        return rec
