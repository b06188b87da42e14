"""The parameters the transfer tasks share: the upstream (pre-training) and the downstream data.

Every transfer trial carries the same flat `pretrain_*` / `upstream_*` parameters; they define a
`PretrainConfig` whose hash keys a checkpoint cache (vitbench.protocols.pretrain: $VITBENCH_CHECKPOINT_DIR, else
./results/checkpoints, shared by all studies since the key is the content). The first trial that needs an
upstream pre-trains it (inside that trial, under a file lock) and later trials reuse it, so a study can list
[pretrain, fewshot, finetune] as a task axis, or only the downstream tasks. Downstream rows carry the upstream's
compute (`pretrain_exaflops`, also as `exaflops`) and images seen, so `vitbench report` plots accuracy against
pre-training compute (paper Figure 5) and tabulates them (Table 6).

Distillation (DeiT; docs/distillation.md): `teacher` names a teacher model; it is pre-trained first with this
same upstream recipe (its own resolution, steps and seed), or read from `teacher_checkpoint`, and supervises the
student through its distillation token (else its class token); a `teacher_checkpoint` alone names its teacher
(a vitbench checkpoint's model, read from the file; any other file is refused). Without a teacher the
teacher_* / distill_* fields mean nothing and are left out of the trial's config, so trials without a teacher
keep their keys; given another value than their default there, they are refused (TeacherFields.moot).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import (BaseModel, Field, ValidationInfo, create_model, field_validator, model_serializer,
                      model_validator)

from vitbench.backends.base import BackendName
from vitbench.record import Record
from vitbench.tasks import FRACTION, Metric
from vitbench.tasks.fields import MAX_COUNT, CheckpointField, PathField, applies_when, data_twins, named
from vitbench.transfer.limits import MAX_DATASET_IMAGES, ROW_CLASS_NAMES
from vitbench.transfer.config import (DataConfig, DatasetName, Seed, default_of, description_of, field_like,
                                      ints_text, key_neutral, validated)
from vitbench.transfer.schedules import LearningRate
from vitbench.protocols.downstream import DOWNSTREAM_DATA
from vitbench.transfer.formats import format_options
from vitbench.transfer.distill import DEFAULT_LAMBDA, DEFAULT_TAU, Distillation, Lambda, Tau
from vitbench.transfer.masked_patch import MaskedPatch, Objective, Scratch, Target
from vitbench.protocols.pretrain import SPEC_CONTEXT, UPSTREAM_DATA, PretrainConfig
from vitbench.protocols.teacher import teacher_model

SHARED = ("model", "backend", "task", "device", "seed", "threads")

# A study field -> the config path it sets, declared once: the study's names (those trial keys are made of, so
# kept) are aliases of the nested configs' paths. The configs are built from these tables (`nest`), and a bad
# value is reported under the field the study wrote (`study_names`). Paths of PretrainConfig (the upstream):
UPSTREAM_PATHS = {
    "upstream_dataset": "data.name", "upstream_path": "data.path", "upstream_classes": "data.classes",
    "data_seed": "data.seed", "upstream_train_per_class": "data.train_per_class",
    "pretrain_batch_size": "batch_size", "pretrain_lr": "lr",
    "pretrain_weight_decay": "weight_decay", "pretrain_warmup_steps": "warmup_steps", "pretrain_decay": "decay",
    "label_smoothing": "label_smoothing", "pretrain_resolution": "resolution", "pretrain_steps": "steps",
}
# the upstream data's other settings, each `upstream_<DataConfig field>` (a format's own options among them, from
# the formats table: a format added there needs no line here); generated as study fields (Upstream)
UPSTREAM_TWINS = {f"upstream_{f}": f for f in ("test_path", "skip_corrupt", "check_data", "workers",
                                                *format_options())}
UPSTREAM_PATHS.update({field: f"data.{path}" for field, path in UPSTREAM_TWINS.items()})
# set through protocols.teacher.teacher_fields and Upstream.masked_patch (named here for errors only)
_UPSTREAM_NAMED = {
    "pretrain_backend": "backend", "model": "model", "seed": "seed", "teacher": "teacher.upstream.model",
    "teacher_checkpoint": "teacher.checkpoint", "teacher_resolution": "teacher.upstream.resolution",
    "teacher_steps": "teacher.upstream.steps", "teacher_seed": "teacher.upstream.seed",
    "distillation": "teacher.distillation", "distill_lambda": "teacher.lam", "distill_tau": "teacher.tau",
    "mask_rate": "objective.masked_patch.mask_rate", "mask_target": "objective.masked_patch.target",
}
# Paths of the downstream's DataConfig:
DOWNSTREAM_PATHS = {
    "dataset": "name", "data_path": "path", "classes": "classes", "data_seed": "seed",
    "train_per_class": "train_per_class", "val_fraction": "val_fraction", "data_test_path": "test_path",
    "skip_corrupt": "skip_corrupt", "check_data": "check_data", "data_workers": "workers",
    **{f: f for f in format_options()},  # each format's own options, under their own names (Downstream)
}


def nest(params: BaseModel, paths: dict[str, str]) -> dict:
    """The nested config fields `paths` (study field -> dotted path) set from the study fields of `params`."""
    out: dict = {}
    for field, path in paths.items():
        *parents, last = path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = getattr(params, field)
    return out


def study_names(prefix: str, *tables: dict[str, str]) -> dict[str, str]:
    """Config path (under `prefix`) -> the study field that sets it: `validated`'s error names."""
    return {prefix + path: field for table in tables for field, path in table.items()}


def upstream_names(prefix: str = "") -> dict[str, str]:
    """study_names of the upstream (`prefix`: where PretrainConfig sits, 'upstream.' in a downstream config);
    the teacher's pre-training recipe is the student's, so its paths are named by the student's fields."""
    return {**study_names(prefix, UPSTREAM_PATHS, _UPSTREAM_NAMED), f"{prefix}teacher.upstream.": prefix,
            f"{prefix}teacher": "teacher", f"{prefix}objective": "objective"}


class TeacherFields(BaseModel):
    """Distillation (DeiT): a teacher supervises the student's pre-training. Without a `teacher` these fields
    mean nothing and are left out of the trial config (so trials without a teacher keep their keys)."""

    # a field's description is the help of the command-line option that sets it (vitbench.cli.path_options)
    # None: no teacher
    teacher: str | None = Field(None, description="Distil from this teacher model (DeiT), e.g. R-Nano; with a "
                                "teacher checkpoint: its model (a timm state dict's timm:NAME).")
    teacher_checkpoint: CheckpointField | None = Field(None, description="The teacher's weights (default: "
                                                 "pre-trained, cached); a vitbench checkpoint names its model, "
                                                 "other files need the teacher's model.")
    teacher_resolution: int | None = Field(None, ge=1, le=MAX_COUNT,
                                           description="Pre-trained teacher's resolution (default native).")
    teacher_steps: int | None = Field(None, ge=1, le=MAX_COUNT, description="Pre-trained teacher's steps "
                                      "(default: the student's).")
    # one teacher for every student seed
    teacher_seed: Seed = Field(0, description="Pre-trained teacher's seed.")
    # hard: teacher's argmax (DeiT eq. 3); soft: KL (eq. 2)
    distillation: Distillation = Field(Distillation.HARD, description="hard (teacher's argmax) | soft (KL at the "
                                       "distillation temperature).")
    distill_lambda: Lambda = Field(DEFAULT_LAMBDA, description="Weight of the teacher's term.")
    distill_tau: Tau = Field(DEFAULT_TAU, description="Soft distillation temperature.")

    @model_validator(mode="after")
    def _known_teacher(self, info: ValidationInfo):
        """A teacher that is not in the model table, or a resolution it cannot take, fails when the study is
        parsed (close names listed), not when its trial runs. A `teacher_checkpoint` without a `teacher` takes
        its model from the file (a vitbench checkpoint's header; protocols.teacher.teacher_model), so the
        trial's config names it; any other file is refused naming the file and both fields."""
        from vitbench.errors import VitbenchError

        try:
            teacher = teacher_model(self.teacher, self.teacher_checkpoint,
                                    (named(info, "teacher"), named(info, "teacher_checkpoint")))
        except VitbenchError as e:
            raise ValueError(str(e)) from None
        object.__setattr__(self, "teacher", teacher)  # frozen params: the model read from the file, once
        if self.teacher is not None:
            from vitbench.models.specs import get_spec

            try:
                spec = get_spec(self.teacher)
            except VitbenchError as e:
                raise ValueError(f"{named(info, 'teacher')}: {e}") from None
            try:  # named by the option that set it (`--teacher: resolution 30 ...` sent the user to --teacher)
                if self.teacher_resolution is not None:
                    spec.check_resolution(self.teacher_resolution)
            except VitbenchError as e:
                raise ValueError(f"{named(info, 'teacher_resolution')}: {e}") from None
        return self

    def unused_teacher_fields(self) -> set[str]:
        """Teacher fields that do not apply here (`moot_teacher_fields`)."""
        return set(moot_teacher_fields(self.__dict__))

    @classmethod
    def moot(cls, values):
        """TaskParams.moot, and the teacher fields that do not apply given `values` (`moot_teacher_fields`): left
        out of the trial config, and refused where given another value than their default (TaskParams._applies;
        `pretrain --distill-tau 3` without a teacher ran and dropped it: session 30's Left list); a study's
        `defaults` that set them for every trial are dropped where they do not apply (vitbench.study.expand)."""
        return {**super().moot(values), **moot_teacher_fields(values)}  # type: ignore[misc]


TEACHER_FIELDS: tuple[str, ...] = tuple(TeacherFields.model_fields)


def moot_teacher_fields(values) -> dict[str, dict[str, tuple]]:
    """The teacher fields that do not apply given the fields' `values` -> the condition they need (as
    `applies_when` says it): all without a teacher (neither a model nor a checkpoint); the pre-training ones with
    a checkpoint; the temperature with hard distillation."""
    if values.get("teacher") is None and values.get("teacher_checkpoint") is None:
        return {f: {"teacher": ("set (a model, or a teacher checkpoint)",)} for f in TEACHER_FIELDS}
    out = ({f: {"teacher_checkpoint": (None,)} for f in ("teacher_resolution", "teacher_steps", "teacher_seed")}
           if values.get("teacher_checkpoint") is not None else {})
    if values.get("distillation", Distillation.HARD) == Distillation.HARD:
        out["distill_tau"] = {"distillation": (Distillation.SOFT.value,)}
    return out




# the mask_* fields apply to masked-patch pre-training only (`pretrain --mask-rate 0.3` of a supervised upstream
# ran and dropped it: session 30's Left list)
_MASKED = applies_when(objective=(Objective.MASKED_PATCH.value,))


class _Upstream(TeacherFields):
    """The upstream: identical names and defaults in all three tasks, so their caches line up. The defaults are
    PretrainConfig's (and its UPSTREAM_DATA's), read from there: the default trial pre-trains what `vitbench
    pretrain MODEL` does."""

    # the paths a study or --set may write for these fields: PretrainConfig's, under `upstream.` in every task
    # (`upstream.lr` -> pretrain_lr, `upstream.teacher.lam` -> distill_lambda); the trial's own model and seed
    # are set by their own names
    PATHS: ClassVar[dict[str, str]] = study_names("upstream.", UPSTREAM_PATHS, {
        f: p for f, p in _UPSTREAM_NAMED.items() if f not in SHARED})

    # the data fields are described as DataConfig describes them (the help of their options)
    upstream_dataset: DatasetName = Field(UPSTREAM_DATA.name, description=description_of(DataConfig, "name"))
    upstream_path: PathField | None = Field(None, description=description_of(DataConfig, "path"))
    # 'a-b' or 'a,b,c'; None or '': all classes
    upstream_classes: str | None = Field(ints_text(UPSTREAM_DATA.classes), description="Upstream classes: 'a-b' "
                                         "or 'a,b,c'; '' for all.")
    upstream_train_per_class: int | None = None  # cap on upstream images per class (data-size axis)
    # split seed (up- and downstream), separate from the model's
    data_seed: Seed = Field(default_of(DataConfig, "seed"), description=description_of(DataConfig, "seed"))
    pretrain_backend: BackendName | None = None  # None: the trial's backend
    # each the PretrainConfig field it sets (UPSTREAM_PATHS), its default and bounds read from there (field_like)
    pretrain_resolution: int | None = field_like(PretrainConfig, "resolution",
                                                 description="Pre-training resolution (default native).")
    pretrain_steps: int = field_like(PretrainConfig, "steps", description="Pre-training steps.")
    pretrain_batch_size: int = field_like(PretrainConfig, "batch_size",
                                          description="Pre-training batch (images per step).")
    pretrain_lr: LearningRate = field_like(PretrainConfig, "lr", description="Peak Adam learning rate.")
    pretrain_weight_decay: float = field_like(PretrainConfig, "weight_decay",
                                              description="Decoupled weight decay on kernels (paper: 0.1 JFT).")
    # None: the pre-training default (protocols.pretrain.default_warmup)
    pretrain_warmup_steps: int | None = field_like(PretrainConfig, "warmup_steps",
                                                   description="Default: 10 % of the steps, at most 30.")
    pretrain_decay: Literal["linear", "cosine"] = Field(default_of(PretrainConfig, "decay"),
                                                        description="linear | cosine")
    label_smoothing: float = field_like(PretrainConfig, "label_smoothing",
                                        description="Label smoothing of the pre-training loss.")
    # pre-training objective (vitbench.transfer.masked_patch): the mask_* fields apply to masked_patch only and,
    # like `objective` itself when supervised, are left out of the trial config (existing keys unchanged)
    objective: Objective = Field(Objective.SUPERVISED, description="supervised (the labels) | masked_patch (no "
                                 "labels: masked patch prediction, ViT paper Sec. 4.6) | none (the random init).")
    mask_rate: float = Field(default_of(MaskedPatch, "mask_rate"), description="masked_patch: share of patches "
                             "corrupted.", json_schema_extra=_MASKED)
    mask_target: Target = Field(default_of(MaskedPatch, "target"), description="masked_patch: mean_color (3-bit "
                                "mean colour, 512 classes) | color_grid (4x4 of them) | pixels_l2 (regress the "
                                "patch).", json_schema_extra=_MASKED)

    @field_validator("upstream_classes", mode="before")
    @classmethod
    def _all_upstream_classes(cls, v):
        return None if v == "" else v  # '' (a command's way to say it): all classes

    @model_validator(mode="after")
    def _pretrain_resolution_fits(self):
        """The pre-training resolution must suit the model, named by the option that set it (the pre-training's own
        config refused it when the trial ran, naming no option: `resolution 15 for ViT-Nano/4 must be ...`)."""
        from vitbench.errors import VitbenchError
        from vitbench.models.specs import ModelSpec, get_spec

        if self.pretrain_resolution is None or getattr(self, "model", None) is None:
            return self
        try:
            spec = self.model if isinstance(self.model, ModelSpec) else get_spec(self.model)
        except VitbenchError:  # the model's own problem: said on `model`
            return self
        try:
            spec.check_resolution(self.pretrain_resolution)
        except VitbenchError as e:
            raise ValueError(f"{self.name_of('pretrain_resolution')}: {e}") from None
        return self

    @model_validator(mode="after")
    def _objective(self):
        if self.objective is Objective.MASKED_PATCH:
            self.masked_patch()  # mask_rate's bounds: MaskedPatch's (one declaration)
            if self.teacher is not None:
                raise ValueError("objective masked_patch takes no teacher (a teacher supervises a classifier)")
        return self

    def masked_patch(self) -> MaskedPatch | Scratch | None:
        """PretrainConfig's objective: the masked-patch settings, Scratch (none), or None (supervised)."""
        if self.objective is Objective.NONE:
            return Scratch()
        if self.objective is not Objective.MASKED_PATCH:
            return None
        from pydantic import ValidationError

        try:
            return MaskedPatch(mask_rate=self.mask_rate, target=self.mask_target)
        except ValidationError as e:
            raise ValueError(f"{self.name_of('mask_rate')}: {e.errors()[0]['msg']}") from None

    @model_serializer(mode="wrap")
    def _without_unused(self, handler):
        d = handler(self)
        for k in self.unused_teacher_fields():
            d.pop(k, None)
        for k in (("objective", "mask_rate", "mask_target") if self.objective is Objective.SUPERVISED else
                  ("mask_rate", "mask_target") if self.objective is Objective.NONE else ()):
            d.pop(k, None)
        return d

    def upstream_config(self, task: str):
        """The PretrainConfig these parameters describe (a ConfigError names the bad field)."""
        from vitbench.protocols.pretrain import PretrainConfig
        from vitbench.protocols.teacher import teacher_fields

        nested = nest(self, UPSTREAM_PATHS)
        recipe = {"backend": self.pretrain_backend or self.backend,
                  **{k: v for k, v in nested.items() if k not in ("resolution", "steps")}}
        teacher = teacher_fields(recipe, self.teacher, checkpoint=self.teacher_checkpoint,
                                 resolution=self.teacher_resolution,
                                 steps=self.teacher_steps or self.pretrain_steps, seed=self.teacher_seed,
                                 distillation=self.distillation, lam=self.distill_lambda, tau=self.distill_tau)
        return validated(PretrainConfig, {
            **recipe, "model": self.model, "resolution": nested["resolution"], "steps": nested["steps"],
            "seed": self.seed, "teacher": teacher, "objective": self.masked_patch()}, f"task {task!r}",
            self.named_paths(upstream_names()),
            context={SPEC_CONTEXT: self.spec})  # the model resolved once, by the Params

    def named_paths(self, names: dict[str, str]) -> dict[str, str]:
        """`names` (config path -> study field, and prefix rules) with each field as these params' user names it
        (TaskParams.name_of: a command's option), for `validated`'s errors."""
        return {path: field if path.endswith(".") else self.name_of(field) for path, field in names.items()}


Upstream = create_model("Upstream", __base__=_Upstream, __module__=__name__, **data_twins(UPSTREAM_TWINS))


class FromCheckpoint(BaseModel):
    """Start from a checkpoint on local disk instead of pre-training here: a timm `.safetensors` state dict, an
    original vit_jax / big_vision / big_transfer `.npz`, or one of vitbench's (vitbench.models.checkpoints). Its
    pre-training budget, declared, makes its compute known (paper's exaFLOPs: 3 x forward FLOPs x images x
    epochs). Left out of a trial's key when unset, so studies without it keep their keys."""

    checkpoint: CheckpointField | None = key_neutral()
    checkpoint_images: int | None = key_neutral(gt=0, le=MAX_DATASET_IMAGES)  # images in its pre-training set
    checkpoint_epochs: float | None = key_neutral(gt=0)  # epochs it was pre-trained for

    @model_validator(mode="after")
    def _same_architecture(self, info: ValidationInfo):
        """A vitbench checkpoint whose architecture is not the trial's model is refused (when the study is
        parsed and again in the trial), naming the fields that differ: its rows would carry the wrong model.
        A checkpoint of another origin is checked against its model when it is read. The message starts with
        how the model was asked for (a command's `--model X` or `--set K=V`: FIELD_NAMES), else the checkpoint.
        A resolution not given is the one the checkpoint was trained at (its header, or its weights), not the
        model's native one: a command and a study trial with the same settings measure the same thing."""
        spec = getattr(self, "spec", None)  # the trial's model, resolved by TaskParams before this runs
        budget = [f for f in ("checkpoint_images", "checkpoint_epochs") if getattr(self, f) is not None]
        if self.checkpoint is None and budget:  # it would change the key and be ignored
            raise ValueError(f"{' and '.join(named(info, f) for f in budget)}: the pre-training budget of a "
                             f"{named(info, 'checkpoint')}, and none is given (the trial pre-trains its upstream "
                             "and counts its compute): leave it unset")
        if self.checkpoint is None or spec is None:
            return self
        from vitbench.errors import VitbenchError
        from vitbench.transfer.checkpoint import checkpoint_spec, refuse_other_architecture, trained_resolution

        try:
            have = checkpoint_spec(self.checkpoint)
            if have is not None:
                asked = named(info, "model")
                refuse_other_architecture(have, spec,
                                          f"checkpoint {self.checkpoint}" if asked == "model" else asked)
            if "resolution" in getattr(self, "_filled", ()):  # not given: the one it was trained at, not native
                trained = trained_resolution(self.checkpoint, spec.name)
                if trained is not None:
                    object.__setattr__(self, "resolution", trained)
        except VitbenchError as e:  # a reader's message about the file: on the field that names it
            raise ValueError(on_checkpoint(self.checkpoint, str(e), named(info, "checkpoint"))) from None
        return self

    @classmethod
    def implied(cls, values: dict) -> dict[str, tuple[str, str]]:
        """The fields a study trial's other `values` give when it leaves them unset, each as (value, the field it
        is read from): beside a `checkpoint` and no `model`, a vitbench checkpoint's model, read from its header
        as `fewshot -c` reads it (cli.common.checkpoint_model), so the trial's config and key name it. Weights of
        another origin do not say their model (a timm state dict), nor does a file not here: a ConfigError
        naming the file and the field to add. The study expander (vitbench.study.expand) asks before it
        requires a model."""
        checkpoint = values.get("checkpoint")
        if values.get("model") is not None or not checkpoint:
            return {}
        from pathlib import Path

        from vitbench.errors import ConfigError, clip
        from vitbench.transfer.checkpoint import checkpoint_spec

        path, shown = Path(checkpoint).expanduser(), clip(str(checkpoint), 200)
        if not path.is_file():
            raise ConfigError(f"checkpoint {shown} is not a file here, so no model is read from it: set the "
                              "trial's model beside it (model: NAME)")
        try:
            spec = checkpoint_spec(path)
        except ConfigError as e:  # a header that does not read: on the field
            said = on_checkpoint(checkpoint, str(e), "checkpoint")
            raise ConfigError(said if said != str(e) else f"checkpoint {shown}: {said}") from None
        if spec is None:
            raise ConfigError(f"checkpoint {shown}: its weights do not say their model (not a vitbench "
                              "checkpoint): set the trial's model beside it (model: NAME; a timm state dict: "
                              "model: timm:NAME)")
        return {"model": (spec.name, "checkpoint")}

    def upstream_source(self, task: str) -> dict:
        """The downstream config's start: {"checkpoint": ..., its model (the trial's), budget} when one is given,
        else {"upstream": ...}."""
        if self.checkpoint is None:
            return {"upstream": self.upstream_config(task)}
        return {"checkpoint": self.checkpoint, "checkpoint_model": getattr(self, "model", None),
                "checkpoint_images": self.checkpoint_images,
                "checkpoint_epochs": self.checkpoint_epochs, "objective": self.objective}


def on_checkpoint(checkpoint: str, message: str, name: str) -> str:
    """A reader's `message` that starts with the checkpoint file's path ('PATH: its vitbench metadata's ...') as
    `name`, the field or option, names it ('checkpoint PATH: ...'): a study reports it on that field, not on
    the first field the message happens to name. Any other message is returned as it is."""
    from pathlib import Path

    path = str(Path(checkpoint).expanduser())
    return f"{name} {message}" if message.startswith(path) else message


class _DownstreamData(BaseModel):
    """The downstream data: DOWNSTREAM_DATA's defaults (vitbench.protocols.downstream), read from there."""

    PATHS: ClassVar[dict[str, str]] = study_names("data.", DOWNSTREAM_PATHS)  # `data.workers` -> data_workers

    # described as DataConfig describes them (the help of their options)
    dataset: DatasetName = Field(DOWNSTREAM_DATA.name, description=description_of(DataConfig, "name"))
    data_path: PathField | None = Field(None, description=description_of(DataConfig, "path"))
    classes: str | None = Field(ints_text(DOWNSTREAM_DATA.classes), description="Downstream classes ('' for all).")
    # bounded as DataConfig bounds them (field_like): `val_fraction: 2` passed a dry run and failed in the trial
    train_per_class: int | None = field_like(DataConfig, "train_per_class", default=None)
    # held out of train: the fine-tuning LR / few-shot L2 choice
    val_fraction: float = field_like(DataConfig, "val_fraction", default=DOWNSTREAM_DATA.val_fraction,
                                     description=description_of(DataConfig, "val_fraction"))
    # the data source's other settings (vitbench.transfer.config.DataConfig), left out of the key when unset
    data_test_path: PathField | None = key_neutral(description=description_of(DataConfig, "test_path"))
    skip_corrupt: bool = key_neutral(False, description=description_of(DataConfig, "skip_corrupt"))
    check_data: bool = key_neutral(False, description=description_of(DataConfig, "check_data"))
    data_workers: int = key_neutral(0, ge=0, le=256, description=description_of(DataConfig, "workers"))

    @field_validator("classes", mode="before")
    @classmethod
    def _all_downstream_classes(cls, v):
        return None if v == "" else v  # '' (a command's way to say it): all classes

    def downstream_data(self) -> dict:
        """The downstream DataConfig's fields (DOWNSTREAM_PATHS)."""
        return nest(self, DOWNSTREAM_PATHS)


# each dataset format's own options (vitbench.transfer.formats: image_column, tfds_name, ...) as downstream study
# fields of the same name: a format added to the table needs no study field written here
Downstream = create_model("Downstream", __base__=_DownstreamData, __module__=__name__,
                          **data_twins({f: f for f in format_options()}))


def downstream_names() -> dict[str, str]:
    """Config path -> study field, for a downstream config's errors (its upstream's, its data's, the start's)."""
    return {**upstream_names("upstream."), **study_names("data.", DOWNSTREAM_PATHS),
            **{f: f for f in ("resolution", "backend", "checkpoint", "objective")}, "upstream": "model"}


ACCURACY = Metric("accuracy", FRACTION, True, "transfer accuracy (0..1) on the test split", comparable=True)

# What a transfer row says of its data (vitbench.transfer.data.Splits.row_fields, the one place that writes them),
# to check the row against the disk. Counts, never decided on; a row from before them lacks them (null), as
# row_check, compare and report take a declared metric a row lacks.
SPLIT_METRICS = (
    Metric("train_images", "images", True, "images the train split lists (less val; corrupt files skipped later: "
           "skipped_files)"),
    Metric("val_images", "images", True, "images the val split lists (held out of train: the LR or l2 choice)"),
    Metric("test_images", "images", True, "images the test split lists (the accuracy's)"),
    Metric("num_classes", "classes", True, "classes of the classifier, every one with training images"),
)
# Keys of Splits.row_fields that are no metric, and why (a declared metric is one value: row_check, tidy's columns)
SPLIT_LISTS = {
    "class_names": f"the classes' names in label order, the first {ROW_CLASS_NAMES} (each cut to about 100 "
                   "characters; num_classes says how many): a list",
}


def with_compute_aliases(rec: Record) -> Record:
    """Downstream rows: the x-axis of Figure 5 under the names the report reads."""
    rec.metrics["pretrain_exaflops"] = rec.metrics.get("exaflops")
    rec.metrics["images_seen"] = rec.metrics.get("pretrain_images_seen")
    return rec
