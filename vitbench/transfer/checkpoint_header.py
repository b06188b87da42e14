"""The checks of a vitbench checkpoint's header (vitbench.transfer.checkpoint reads it): its fields as
`vitbench pretrain` writes them, and the header against its own weights (model, classes, resolution), so an edited
or another tool's header is refused naming the file and field, never read as what it says."""

from __future__ import annotations

import json
import math
from pathlib import Path

from vitbench.errors import ConfigError, clip

# the header's metrics a downstream row carries as its pre-training budget (protocols.pretrain.upstream_metrics)
BUDGET_METRICS = ("exaflops", "images_seen", "epochs", "student_exaflops", "teacher_exaflops")
# the header's other numbers a downstream row carries (protocols.pretrain.upstream_metrics), by what they are: the
# accuracies and the teacher's agreement are fractions of test images (0..1), params_m a count (>= 0). An edited
# `accuracy: 5.0` or `params_m: -3` became an ok row's upstream_accuracy and params_m (session 30's Left list).
CARRIED_FRACTIONS = ("accuracy", "teacher_accuracy", "teacher_train_accuracy", "teacher_agreement")
CARRIED_COUNTS = ("params_m",)
# the header's texts a downstream row carries (protocols.pretrain.upstream_config): `key` (16 hex digits,
# PretrainConfig.key) and `backend` (a registry name, a short word) are a few bytes as vitbench writes them; 200
# characters leaves room for any backend name while a 1 MB edited key no longer becomes every downstream row's
TEXT_FIELDS_MAX_CHARS = 200
# `config`, the pre-training config a downstream row carries (protocols.pretrain.upstream_config): a PretrainConfig
# dump, at most a few kB (its longest parts are the data paths, PATH_MAX = 4096 bytes each on Linux, limits.h, and
# a teacher's config of the same shape); 64 KiB is far above any written one, and keeps an edited one of MBs out
# of every downstream row
CONFIG_MAX_BYTES = 64 * 1024


def check_meta(meta: dict, path: Path) -> None:
    """The header's fields that commands read, as `checkpoint.save_checkpoint` writes them; anything else (an
    edited or another tool's header) is a ConfigError naming the file and field, never a KeyError or a negative
    compute in an ok row."""
    from vitbench.transfer.limits import MAX_CLASSES, MAX_COUNT
    from vitbench.transfer.masked_patch import Objective

    def bad(field: str, want: str):
        return ConfigError(f"{path}: its vitbench metadata's {field} is {clip(repr(meta.get(field)), 60)}; "
                           f"expected {want} (the header `vitbench pretrain` writes)")

    def count(v, lo: int, hi: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi

    if not isinstance(meta.get("model"), str):
        raise bad("model", "a model name")
    if not count(meta.get("resolution"), 1, MAX_COUNT):
        raise bad("resolution", f"an integer in 1..{MAX_COUNT}")
    if not count(meta.get("num_classes"), 0, MAX_CLASSES):  # 0: an encoder without a classifier (objective none)
        raise bad("num_classes", f"an integer in 0..{MAX_CLASSES}")
    for field in ("metrics", "objective", "spec"):
        if meta.get(field) is not None and not isinstance(meta[field], dict):
            raise bad(field, "an object")
    for field in ("key", "backend"):
        v = meta.get(field)
        if v is not None and not (isinstance(v, str) and len(v) <= TEXT_FIELDS_MAX_CHARS):
            raise bad(field, f"null or a text of at most {TEXT_FIELDS_MAX_CHARS} characters")
    if meta.get("config") is not None and len(json.dumps(meta["config"])) > CONFIG_MAX_BYTES:
        raise ConfigError(f"{path}: its vitbench metadata's config is {len(json.dumps(meta['config'])):,} bytes "
                          f"of JSON; expected a pre-training config of at most {CONFIG_MAX_BYTES:,} (the header "
                          "`vitbench pretrain` writes)")
    metrics = meta.get("metrics") or {}
    for k, v in metrics.items():  # json reads NaN and Infinity; vitbench writes null for them
        budget = k in BUDGET_METRICS + CARRIED_COUNTS + CARRIED_FRACTIONS and v is not None
        most = 1 if k in CARRIED_FRACTIONS else math.inf
        if (isinstance(v, float) and not math.isfinite(v)) or (
                budget and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= most)):
            want = (" in 0..1 (a fraction of test images)" if k in CARRIED_FRACTIONS else
                    " >= 0 (the pre-training budget)" if k in BUDGET_METRICS else
                    " >= 0 (a count)" if budget else "")
            raise ConfigError(f"{path}: its vitbench metadata's metrics.{clip(str(k), 60)} is {clip(repr(v), 60)};"
                              f" expected a finite number{want}")
    objective = (meta.get("objective") or {}).get("objective", Objective.SUPERVISED.value)
    if objective not in {o.value for o in Objective}:
        raise ConfigError(f"{path}: its vitbench metadata's objective is {clip(repr(objective), 60)}; allowed: "
                          f"{', '.join(o.value for o in Objective)}")
    _check_budget(metrics, meta.get("config") or {}, objective == Objective.NONE.value, path)


# the relative gap allowed between a budget number and the same number made again from the header's other fields:
# the two are the same few float64 products in another order, so they differ by a few ulps (2.2e-16 each); 1e-9
# is far above that and far below any edit that changes what a fit reads (a budget off by 1e-9 moves no point)
BUDGET_RTOL = 1e-9


def _check_budget(metrics: dict, config: dict, scratch: bool, path: Path) -> None:
    """The pre-training budget a downstream row carries (and `vitbench fit` reads as compute) against the header's
    own arithmetic, as protocols.pretrain writes it: images_seen = steps x batch_size (0 from scratch), exaflops =
    train_gflops_per_image x images_seen (+ the teacher's forward, distilling), epochs = images_seen / train
    images. A field absent (an older header) is not checked; one that contradicts the others (an edited header: an
    exaflops of 1e300 became an ok row's pretrain_exaflops) is a ConfigError naming the fields."""
    def num(d: dict, k: str):
        v = d.get(k)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def off(field: str, got: float, want: float, made: str) -> None:
        if abs(got - want) > BUDGET_RTOL * max(abs(got), abs(want)):
            raise ConfigError(f"{path}: its vitbench metadata's metrics.{field} is {got:g}, but {made} make "
                              f"{want:g}: the header contradicts itself (an edited header?); not read")

    seen, steps, batch = num(metrics, "images_seen"), num(config, "steps"), num(config, "batch_size")
    if seen is not None and steps is not None and batch is not None:
        off("images_seen", seen, 0 if scratch else steps * batch,
            "no pre-training (objective none)" if scratch else f"config.steps {steps} x config.batch_size {batch}")
    per_image, exa = num(metrics, "train_gflops_per_image"), num(metrics, "exaflops")
    if seen is not None and per_image is not None and exa is not None:
        teacher = num(metrics, "teacher_exaflops") or 0.0
        made = f"train_gflops_per_image {per_image:g} x images_seen {seen:g}"
        made += " + teacher_exaflops" if teacher else ""
        off("exaflops", exa, per_image * 1e9 * seen / 1e18 + teacher, made)
    images, epochs = num(metrics, "train_images"), num(metrics, "epochs")
    if seen is not None and images and epochs is not None:
        off("epochs", epochs, seen / images, f"images_seen {seen:g} / train_images {images:g}")


def check_fits(meta: dict, shapes: dict[str, tuple[int, ...]], path: Path) -> None:
    """A header that contradicts its own weights is refused (ConfigError naming the file, the field and what the
    weights say), as a foreign file's position grid is checked (vitbench.models.checkpoints): a `model` naming
    another architecture than the `spec` beside it (the spec decides what is built), and a `resolution` that is
    not a multiple of the model's stride or not the one its position-embedding grid was made for (before, such a
    header was believed: the table resampled silently and the rows said the header's resolution), and a
    supervised header's `num_classes` other than its classifier's rows (`_classifier`). A spec that
    does not read back, or weights that do not fit it, are left to the readers that build the model
    (`checkpoint.checkpoint_spec`, `checkpoint.load_checkpoint`: check_weights names the keys)."""
    from vitbench.errors import VitbenchError
    from vitbench.models.specs import get_spec, spec_from_dict
    from vitbench.transfer.masked_patch import Objective, objective_of

    try:
        spec = spec_from_dict(meta["spec"], str(path)) if meta.get("spec") else get_spec(meta["model"])
    except VitbenchError:
        return
    if meta.get("spec") and meta["model"] != spec.name:
        try:
            same = get_spec(meta["model"]).name == spec.name  # an alias of it
        except VitbenchError:
            same = False
        if not same:
            raise ConfigError(f"{path}: its vitbench metadata's model is {clip(repr(meta['model']), 60)}, but its "
                              f"spec (the architecture stored beside it, which its weights are checked against) "
                              f"is {spec.name}: the header contradicts itself (an edited header?); not read")
    classifier = _classifier(spec, shapes) if objective_of(meta) is Objective.SUPERVISED else None
    if classifier is not None and shapes[classifier][0] != meta["num_classes"]:
        raise ConfigError(f"{path}: its vitbench metadata's num_classes is {meta['num_classes']}, but its "
                          f"weights' classifier {classifier} {shapes[classifier]} has {shapes[classifier][0]} "
                          "outputs: the header contradicts the weights (an edited header?); not read")
    res, said = meta["resolution"], f"{path}: its vitbench metadata's resolution is {meta['resolution']}"
    try:
        spec.check_resolution(res)
    except ConfigError as e:
        raise ConfigError(f"{said}, which {spec.name}'s weights cannot be made for ({e}); not read") from None
    try:
        found = _weights_resolution(spec, shapes)
    except VitbenchError:  # a grid the family cannot read: check_weights names it when the weights are read
        return
    if found is not None and found[0] != res:
        raise ConfigError(f"{said}, but its weights are of {found[0]} px ({found[1]}): the header contradicts "
                          f"the weights (an edited header?); not read")


def _classifier(spec, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """The key of the classifier's weight in `shapes` (its rows: the classes), as identify reads a foreign file's;
    None without one: an encoder-only checkpoint (objective masked_patch or none: num_classes 0, no classifier
    saved) or a head dropped, which `load_checkpoint`'s check_weights names where a classifier is needed."""
    from vitbench.models.identify import head_prefixes

    keys = (*(p + "weight" for p in head_prefixes(spec)), "head.fc.weight")
    return next((k for k in keys if len(shapes.get(k, ())) > 0), None)


def _weights_resolution(spec, shapes: dict[str, tuple[int, ...]]) -> tuple[int, str] | None:
    """(the resolution the weights' shapes say for `spec`, how they say it) from their position-embedding grid;
    None when they say none: no learned table (BiT, sincos2d: any size fits), or none of the expected shape."""
    from vitbench.models import posemb

    declared = posemb.tables(spec, spec.resolution)
    if not declared:  # a family's own grid-sized tables, if any
        from vitbench.models.families import family_plugin

        found = family_plugin(spec.family).weights.resolution_of(spec, shapes)
        return None if found is None else (found, f"the grid of {spec.name}'s grid-sized tables")
    tables = [t for t in declared if t.torch_key in shapes]
    res = posemb.resolution_of(shapes, spec) if tables else None
    if res is None:  # missing, or no square grid: check_weights names the table when the weights are read
        return None
    side, t = res // spec.stride, tables[0]
    return res, (f"its position embedding {t.torch_key} {shapes[t.torch_key]}: a grid of {side} x {side} patches "
                 f"at {spec.name}'s stride {spec.stride}")
