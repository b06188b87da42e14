"""`vitbench pretrain | fewshot | finetune`: transfer accuracy. Each command parses its options into its task's
Params (vitbench.tasks.pretrain, fewshot, finetune: what a study's trial with those fields is) and runs the task,
then prints its record; errors name the options (the Params' FIELD_NAMES)."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import (SET_HELP, checkpoint_fields, console, model_asked, path_sets, print_json,
                                 task_params, with_sets)
from vitbench.cli.data_options import (
    DATA,
    DATA_PATH,
    DATA_TEST_PATH,
    DATA_WORKERS,
    FORMAT_OPTIONS,
    FORMATS,
    SKIP_CORRUPT,
    CHECK_DATA,
)
from vitbench.cli.options import OptionGroup, cli_option, from_field
from vitbench.numfmt import fmt
from vitbench.tasks.pretrain import Pretrain
from vitbench.tasks.upstream import Upstream
from vitbench.transfer.config import ints_text, joined
from vitbench.protocols.downstream import DownstreamConfig
from vitbench.protocols.fewshot import FewshotConfig
from vitbench.protocols.finetune import FinetuneConfig
from vitbench.transfer.masked_patch import MaskedPatch
from vitbench.protocols.pretrain import PretrainConfig, TeacherConfig


def _option_names(command, prefixes: dict[type, str], more: dict[str, str]) -> dict[str, str]:
    """Config path -> the option that sets it, for `validated`'s errors (a bad value is reported under the name
    the user typed): read from `command`'s options declared with `from_field` (their config class and path;
    `prefixes`: where each class sits in the command's config), then `more` for the options that set a config
    field without declaring it (their default is not the field's) and the prefix rules of `option_name`."""
    import inspect

    from vitbench.cli.options import FieldDefault, source_of

    out = {}
    for p in inspect.signature(command).parameters.values():
        src = source_of(p.default)
        if isinstance(src, FieldDefault) and src.model_class() in prefixes:
            flag = (p.default.param_decls or (f"--{p.name.replace('_', '-')}",))[0].split("/")[0]
            out[prefixes[src.model_class()] + src.path] = flag
    return {**out, **more}


# the options that set a config field without declaring it, per command
_RUN_NAMED = {"resolution": "--resolution", "backend": "--backend"}
_PRETRAIN_NAMED = {**_RUN_NAMED, "model": "MODEL", "warmup_steps": "--warmup-steps",
                   "teacher.checkpoint": "--teacher-checkpoint", "teacher.model": "--teacher",
                   "teacher.upstream.model": "--teacher", "teacher.upstream.resolution": "--teacher-resolution",
                   "teacher.upstream.steps": "--teacher-steps", "teacher": "--teacher",
                   "teacher.upstream.": ""}  # the teacher's recipe: the student's


def _on(data: dict) -> str:
    """The dataset a record measured, as its table's title says it: 'digits classes 5-9', 'folder:/data (all
    classes)'."""
    where = data["name"] + (f":{data['path']}" if data.get("path") else "")
    return f"{where} classes {ints_text(data['classes'])}" if data.get("classes") else f"{where} (all classes)"


def _show(rec, title: str, keys: list[str], as_json: bool) -> None:
    if as_json:
        print_json(rec.to_dict())
        return
    t = Table(title=escape(title), show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value", justify="right")
    for k in keys:
        v = rec.metrics.get(k)
        if v is not None:
            t.add_row(k, fmt(v))
    console.print(t)


# --set of the transfer commands: an architecture override, or a config path of the task's fields
SET_PATH_HELP = SET_HELP + (" A dotted KEY sets that config path, as a study may: --set upstream.lr=3e-3 "
                            "--set data.workers=4 (`vitbench sweep --set` takes the same paths).")

# The run's settings every transfer command takes, after its own options
RUN = OptionGroup("run", {
    "device": (str, from_field(Pretrain.Params, "device")),
    "threads": (int, typer.Option(None)),
    "as_json": (bool, cli_option("json", "--json", help="Print the whole record as JSON.")),
})




@app.command("pretrain")
@RUN
@FORMATS
def pretrain_cmd(
    model: str = typer.Argument(..., help="Variant name, e.g. ViT-Nano/4, R-Nano, R-Nano+ViT-Micro/8."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_PATH_HELP),
    backend: str = typer.Option(None, help="A registered backend "
                                           "(`vitbench plugins` lists them; default: the first registered)."),
    data: str = DATA, data_path: str = DATA_PATH, data_test_path: str = DATA_TEST_PATH,
    skip_corrupt: bool = SKIP_CORRUPT, data_workers: int = DATA_WORKERS, formats=None,
    check_data: bool = CHECK_DATA,
    classes: str = from_field(PretrainConfig, "data.classes", shown=ints_text,
                              help="Upstream classes: 'a-b' or 'a,b,c'; '' for all."),
    data_seed: int = from_field(PretrainConfig, "data.seed", help="Split seed."),
    resolution: int = typer.Option(None, "--resolution", "-r", help="Pre-training resolution (default native)."),
    steps: int = from_field(PretrainConfig, "steps", min=1),
    batch_size: int = from_field(PretrainConfig, "batch_size", "--batch-size", "-b", min=1),
    lr: float = from_field(PretrainConfig, "lr", help="Peak Adam learning rate."),
    weight_decay: float = from_field(PretrainConfig, "weight_decay",
                                     help="Decoupled weight decay on kernels (paper: 0.1 JFT)."),
    warmup_steps: int = typer.Option(None, min=0, help="Default: 10 % of --steps, at most 30."),
    decay: str = from_field(PretrainConfig, "decay", help="linear | cosine"),
    label_smoothing: float = from_field(PretrainConfig, "label_smoothing"),
    seed: int = from_field(PretrainConfig, "seed", help="Model init / batch order seed."),
    out: str = typer.Option(None, "--out", "-o",
                            help="Also copy the checkpoint here (.safetensors; it is kept in the cache, "
                                 "results/checkpoints, either way)."),
    teacher: str = typer.Option(None, help="Distil from this teacher model (DeiT), e.g. R-Nano; with "
                                "--teacher-checkpoint: its model (a timm state dict's timm:NAME)."),
    teacher_checkpoint: str = typer.Option(None, help="The teacher's weights (default: pre-trained, cached); "
                                           "a vitbench checkpoint names its model, other files need --teacher."),
    teacher_resolution: int = typer.Option(None, help="Pre-trained teacher's resolution (default native)."),
    teacher_steps: int = typer.Option(None, help="Pre-trained teacher's steps (default: --steps)."),
    teacher_seed: int = from_field(TeacherConfig, "upstream.seed", help="Pre-trained teacher's seed."),
    distillation: str = from_field(TeacherConfig, "distillation",
                                   help="hard (teacher's argmax) | soft (KL at --distill-tau)."),
    distill_lambda: float = from_field(TeacherConfig, "lam", help="Weight of the teacher's term."),
    distill_tau: float = from_field(TeacherConfig, "tau", help="Soft distillation temperature."),
    objective: str = from_field(Upstream, "objective", help="supervised (the labels) | masked_patch (no labels: "
                                "masked patch prediction, ViT paper Sec. 4.6) | none (the random init)."),
    mask_rate: float = from_field(MaskedPatch, "mask_rate", help="masked_patch: share of patches corrupted."),
    mask_target: str = from_field(MaskedPatch, "target", help="masked_patch: mean_color (3-bit mean colour, "
                                  "512 classes) | color_grid (4x4 of them) | pixels_l2 (regress the patch)."),
    run=None,
) -> None:
    """Pre-train upstream (Adam, warm-up + decay) and save a safetensors checkpoint with its config.

    Reports upstream test accuracy, images seen and pre-training compute in exaFLOPs (3 x forward FLOPs per
    image x images seen, plus the teacher's forward per image when distilling). Runs the `pretrain` task a
    study's trial with these fields runs: the checkpoint goes to the cache that fewshot/finetune and studies
    reuse (an identical config is not trained twice); --out writes a copy of it there as well.
    """
    from vitbench.protocols.pretrain import cache_path
    from vitbench.tasks.upstream import UPSTREAM_PATHS, _UPSTREAM_NAMED
    from vitbench.transfer.checkpoint import checkpoint_path

    sets, set_fields, set_names = path_sets(Pretrain.name, sets)  # `--set upstream.lr=...`: a field by its path
    values = dict(
        model=with_sets(model, sets), backend=backend, upstream_dataset=data, upstream_path=data_path,
        upstream_test_path=data_test_path, upstream_skip_corrupt=skip_corrupt, upstream_workers=data_workers,
        upstream_check_data=check_data, **{f"upstream_{f}": v for f, v in vars(formats).items()},
        upstream_classes=classes, data_seed=data_seed, pretrain_resolution=resolution, pretrain_steps=steps,
        pretrain_batch_size=batch_size, pretrain_lr=lr, pretrain_weight_decay=weight_decay,
        pretrain_warmup_steps=warmup_steps, pretrain_decay=decay, label_smoothing=label_smoothing, seed=seed,
        teacher=teacher, teacher_checkpoint=teacher_checkpoint, teacher_resolution=teacher_resolution,
        teacher_steps=teacher_steps, teacher_seed=teacher_seed, distillation=distillation,
        distill_lambda=distill_lambda, distill_tau=distill_tau, objective=objective, mask_rate=mask_rate,
        mask_target=mask_target, device=run.device, threads=run.threads)
    values.update(set_fields)  # a path set wins over its flag
    flags = _pretrain_names()  # config path -> option; the task's fields -> config paths: field -> option
    names = {**{field: flags[path] for field, path in {**UPSTREAM_PATHS, **_UPSTREAM_NAMED}.items()
                if path in flags}, **set_names}
    task, params = task_params(Pretrain.name, names, **values)
    if out is not None:  # named as typed, before any training
        out = checkpoint_path(out, cache_path(params.upstream_config(task.name)).name, "--out")
    rec = task().run(params)  # the study's path: cached, else pre-trained into the cache
    if rec.metrics.get("cached"):
        console.print(f"cached upstream: {escape(str(rec.config['checkpoint']))}")
    if out is not None:  # the cache's file (and its metadata) copied where asked
        from pathlib import Path

        from vitbench.paths import write_atomic

        cached = Path(rec.config["checkpoint"])
        write_atomic(out, cached.read_bytes())
        write_atomic(out.with_suffix(".json"), cached.with_suffix(".json").read_bytes())
        rec.config["checkpoint"] = str(out)
    c = rec.config
    _show(rec, f"pretrain {c['model']} on {_on(c['data'])} | {c.get('checkpoint', '')}",
          ["accuracy", "val_accuracy", "images_seen", "epochs", "exaflops", "train_gflops_per_image", "params_m",
           "train_s", "train_img_per_s", "final_loss", "teacher_accuracy", "teacher_agreement",
           "teacher_exaflops", "skipped_files"], run.as_json)


def _upstream_values(o) -> dict:
    """The downstream task's fields for its start from the DOWNSTREAM options `o`: a checkpoint file (its model:
    --model, else the file's; its resolution and backend the defaults of --resolution and --backend: a vitbench
    checkpoint's header says them, weights of another origin are read for theirs), or --model, pre-trained here
    (with --pretrain-steps, --pretrain-warmup-steps). Options that only shape a pre-training are refused beside a
    checkpoint (they would be ignored); a vitbench checkpoint of another architecture than --model / --set is
    refused naming them (cli.common.checkpoint_fields)."""
    from vitbench.errors import ConfigError

    if not o.checkpoint:
        if not o.model:
            raise ConfigError("give --checkpoint PATH (from `vitbench pretrain`) or --model NAME (pre-trained on "
                              "digits 0-4 with the default recipe, cached)")
        return {"model": with_sets(o.model, o.sets), "pretrain_steps": o.pretrain_steps,
                "pretrain_warmup_steps": o.pretrain_warmup_steps}
    ignored = [opt for opt, v in (("--pretrain-steps", o.pretrain_steps),
                                  ("--pretrain-warmup-steps", o.pretrain_warmup_steps)) if v is not None]
    if ignored:
        raise ConfigError(f"--checkpoint gives the upstream; {', '.join(ignored)} would be ignored: give "
                          "either --checkpoint PATH (--model NAME: its architecture), or --model NAME with "
                          "its pre-training options")
    found = checkpoint_fields(o.checkpoint, o.model, o.sets)
    return {"checkpoint": o.checkpoint, "model": found["model"],
            "resolution": found["resolution"] if o.resolution is None else o.resolution,
            "backend": o.backend or found["backend"]}


# The options fewshot and finetune share, declared once (their configs share DownstreamConfig's fields).
DOWNSTREAM = OptionGroup("downstream", {
    "checkpoint": (str, typer.Option(None, "--checkpoint", "-c", help="Upstream .safetensors file.")),
    "objective": (str, from_field(DownstreamConfig, "objective", help="The upstream's pre-training objective: "
                                  "supervised | masked_patch (a --checkpoint made by another is refused).")),
    "model": (str, typer.Option(None, "--model", "-m", help="Or: a variant, pre-trained here (default recipe); "
                                "with --checkpoint: its model (a timm state dict's timm:NAME).")),
    "sets": (list[str], typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_PATH_HELP)),
    "pretrain_steps": (int, typer.Option(None, min=1, help="With --model: upstream steps "
                                         "(default: as `vitbench pretrain`).")),
    "pretrain_warmup_steps": (int, typer.Option(None, min=0, help="With --model: upstream warm-up steps "
                                                "(default: as `vitbench pretrain`).")),
    "backend": (str, typer.Option(None, help="A registered backend "
                                             "(`vitbench plugins` lists them; default: the upstream's).")),
    "data": (str, DATA), "data_path": (str, DATA_PATH), "data_test_path": (str, DATA_TEST_PATH),
    "skip_corrupt": (bool, SKIP_CORRUPT), "data_workers": (int, DATA_WORKERS),
    **FORMAT_OPTIONS, "check_data": (bool, CHECK_DATA),
    "classes": (str, from_field(DownstreamConfig, "data.classes", shown=ints_text,
                                help="Downstream classes ('' for all).")),
    "data_seed": (int, from_field(DownstreamConfig, "data.seed")),
    "resolution": (int, typer.Option(None, "--resolution", "-r",
                                     help="Default: the upstream's; higher => position embeddings interpolated.")),
})


def _downstream(o, task: str, seed: int, **own) -> dict:
    """The downstream task's fields from the DOWNSTREAM options `o` (`seed`: the upstream's with --model), the
    command's `own` fields and the fields `--set PATH=VALUE` sets (`o.sets` keeps the architecture overrides,
    `o.set_names` how an error names a field set by its path)."""
    o.sets, set_fields, o.set_names = path_sets(task, o.sets)
    return {"backend": o.backend, "resolution": o.resolution, "objective": o.objective, "dataset": o.data,
            "data_path": o.data_path, "data_test_path": o.data_test_path, "skip_corrupt": o.skip_corrupt,
            "data_workers": o.data_workers, "check_data": o.check_data,
            **{f: getattr(o, f) for f in FORMAT_OPTIONS}, "classes": o.classes, "data_seed": o.data_seed,
            "seed": seed, **_upstream_values(o), **own, **set_fields}


# the downstream tasks' fields whose option is named otherwise than --field-name
_DOWNSTREAM_FLAGS = {"model": "--model", "dataset": "--data", "fewshot_seeds": "--seeds",
                     "finetune_seeds": "--seeds", "finetune_steps": "--steps",
                     "finetune_warmup_steps": "--warmup-steps"}


def _flags(o) -> dict[str, str]:
    """_DOWNSTREAM_FLAGS, the model named as asked for beside a checkpoint (--model X, --set K=V)."""
    return {**_DOWNSTREAM_FLAGS, "model": model_asked(o.model, o.sets, "--model") if o.checkpoint else "--model",
            **o.set_names}


@app.command("fewshot")
@DOWNSTREAM
@RUN
def fewshot_cmd(
    downstream=None,
    shots: str = from_field(FewshotConfig, "shots", shown=joined, help="Shots per class, comma-separated."),
    seeds: int = from_field(FewshotConfig, "seeds", min=1, help="k-shot draws per k."),
    l2_reg: float = typer.Option(None, help="Fixed ridge regulariser (default: chosen on the val split)."),
    seed: int = from_field(PretrainConfig, "seed", help="With --model: upstream seed."),
    run=None,
) -> None:
    """Linear few-shot accuracy of a frozen upstream: closed-form ridge regression to {-1,1}^K targets.

    Mean and standard deviation over --seeds draws of k images per class, for every k in --shots.
    """
    values = _downstream(downstream, "fewshot", seed, shots=shots, fewshot_seeds=seeds, l2_reg=l2_reg,
                         device=run.device, threads=run.threads)
    task, params = task_params("fewshot", _flags(downstream), **values)
    rec = task().run(params)  # the study's path: a trial of these fields
    keys = [k for s in params.shot_list() for k in (f"accuracy_{s}shot", f"accuracy_{s}shot_std")]
    c = rec.config
    _show(rec, f"fewshot {c['model']} ({c['backend']}) on {_on(c['data'])} @ "
               f"{c['resolution']}px", [*keys, "chance_accuracy", "exaflops", "upstream_accuracy",
                                       "skipped_files", "input_img_per_s", "input_bound_fraction"], run.as_json)


@app.command("finetune")
@DOWNSTREAM
@RUN
def finetune_cmd(
    downstream=None,
    val_fraction: float = from_field(DownstreamConfig, "data.val_fraction",
                                     help="Held out of train to choose the LR."),
    steps: int = from_field(FinetuneConfig, "steps", min=1),
    batch_size: int = from_field(FinetuneConfig, "batch_size", "--batch-size", "-b", min=1),
    lr_grid: str = from_field(FinetuneConfig, "lr_grid", shown=joined,
                              help="Comma-separated SGD learning rates (paper grid)."),
    warmup_steps: int = from_field(FinetuneConfig, "warmup_steps", min=0),
    refit: bool = from_field(FinetuneConfig, "refit", "--refit/--no-refit",
                             help="Final run on train+val with the chosen LR (paper), or reuse the LR run."),
    seed: int = from_field(FinetuneConfig, "seed", help="First fine-tuning seed (runs use seed, seed+1, ...)."),
    seeds: int = from_field(FinetuneConfig, "seeds", min=1, help="Runs per learning rate and final runs: accuracy "
                                                                 "is their mean, with the standard deviation."),
    run=None,
) -> None:
    """Fine-tune with the paper's recipe: zero-init head, SGD momentum 0.9, cosine, warm-up, clip 1, no wd.

    The LR is chosen by the mean accuracy over --seeds runs on a held-out split of train; the reported accuracy
    is the mean (and standard deviation) over the final runs' accuracies on the test split.
    """
    values = _downstream(downstream, "finetune", seed, val_fraction=val_fraction, finetune_steps=steps,
                         batch_size=batch_size, lr_grid=lr_grid, finetune_warmup_steps=warmup_steps, refit=refit,
                         finetune_seeds=seeds, device=run.device, threads=run.threads)
    task, params = task_params("finetune", _flags(downstream), **values)
    rec = task().run(params)  # the study's path: a trial of these fields
    c = rec.config
    _show(rec, f"finetune {c['model']} ({c['backend']}) on {_on(c['data'])} @ "
               f"{c['resolution']}px",
          ["accuracy", "accuracy_std", "selection_accuracy", "initial_accuracy", "val_accuracy", "best_lr",
           "chance_accuracy", "finetune_images_seen",
           "finetune_exaflops", "finetune_s", "exaflops", "upstream_accuracy", "skipped_files"], run.as_json)


def _pretrain_names() -> dict[str, str]:
    from vitbench.protocols.pretrain import TeacherConfig
    from vitbench.transfer.config import DataConfig

    return _option_names(pretrain_cmd, {DataConfig: "data.", PretrainConfig: "", TeacherConfig: "teacher.",
                                        MaskedPatch: "objective.masked_patch.", Upstream: ""}, _PRETRAIN_NAMED)
