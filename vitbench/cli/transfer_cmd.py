"""`vitbench pretrain | fewshot | finetune`: transfer accuracy, thin over vitbench.transfer."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import (SET_HELP, console, parse_sets, print_json, refuse_unsupported, shared_option,
                                 with_sets)
from vitbench.cli.data_options import (
    DATA,
    DATA_PATH,
    DATA_TEST_PATH,
    DATA_WORKERS,
    FORMAT_OPTIONS,
    SKIP_CORRUPT,
    CHECK_DATA,
)
from vitbench.cli.data_options import source as _source
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


def _check_where(backend: str | None, device: str, threads: int | None) -> int | None:
    """--device and --threads checked before any training, named as typed (as `bench` checks them); `backend`
    None (the upstream's, known once it is loaded): a device that no registered backend runs on. Returns the
    threads."""
    from vitbench.backends.base import backend_names, backend_spec
    from vitbench.errors import ConfigError, clip

    threads = shared_option("threads", threads)
    if backend is not None:
        refuse_unsupported(backend, {"device": device})
    elif all(backend_spec(b).problems({"device": device}) for b in backend_names()):
        runs = "; ".join(f"{b}: {backend_spec(b).devices}" for b in backend_names())
        raise ConfigError(f"--device {clip(device, 40)!r}: no backend runs on it ({runs})")
    return threads


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
_DOWNSTREAM_NAMED = {**_RUN_NAMED, "checkpoint": "--checkpoint", "upstream.model": "--model",
                     "upstream.steps": "--pretrain-steps",
                     "upstream.warmup_steps": "--pretrain-warmup-steps", "upstream.seed": "--seed",
                     "upstream.backend": "--backend", "upstream": "--model"}


def _data(source: dict, classes: str | None, seed: int, val_fraction: float | None = None) -> dict:
    """DataConfig's fields from the options ('' classes: all of them; no val_fraction: DataConfig's)."""
    return {**source, "classes": classes or None, "seed": seed,
            **({} if val_fraction is None else {"val_fraction": val_fraction})}


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


# The run's settings every transfer command takes, after its own options
RUN = OptionGroup("run", {
    "device": (str, from_field(Pretrain.Params, "device")),
    "threads": (int, typer.Option(None)),
    "as_json": (bool, cli_option("json", "--json", help="Print the whole record as JSON.")),
})


# each dataset format's own options (cli/data_options.py: FORMAT_OPTIONS, from vitbench.transfer.formats)
FORMATS = OptionGroup("formats", FORMAT_OPTIONS)


@app.command("pretrain")
@RUN
@FORMATS
def pretrain_cmd(
    model: str = typer.Argument(..., help="Variant name, e.g. ViT-Nano/4, R-Nano, R-Nano+ViT-Micro/8."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
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
                            help="Checkpoint path (.safetensors; default: the cache, results/checkpoints)."),
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
    image x images seen, plus the teacher's forward per image when distilling). Without --out the checkpoint
    goes to the cache that fewshot/finetune and studies reuse (an identical config is not trained twice).
    """
    from vitbench.transfer.checkpoint import checkpoint_path
    from vitbench.transfer.config import validated
    from vitbench.protocols.pretrain import cache_path, ensure_upstream, pretrain
    from vitbench.protocols.teacher import teacher_fields, teacher_model

    # without --teacher, the file's model: a vitbench checkpoint says it, no other does (exit 2)
    teacher = teacher_model(teacher, teacher_checkpoint, ("--teacher", "--teacher-checkpoint"))
    if teacher is not None:  # an unknown teacher is named by its option (the student's by its own message)
        from vitbench.errors import ConfigError, VitbenchError
        from vitbench.models.specs import get_spec

        try:
            get_spec(teacher)
        except VitbenchError as e:
            raise ConfigError(f"--teacher: {e}") from None
    source = _source(data, data_path, data_test_path, skip_corrupt, data_workers, check_data=check_data,
                     **vars(formats))
    opts = {"model": with_sets(model, sets), **({"backend": backend} if backend else {}),
            "data": _data(source, classes, data_seed), "resolution": resolution, "steps": steps,
            "batch_size": batch_size, "lr": lr, "weight_decay": weight_decay, "warmup_steps": warmup_steps,
            "decay": decay, "label_smoothing": label_smoothing, "seed": seed}
    recipe = {k: v for k, v in opts.items() if k not in ("model", "resolution", "steps", "seed")}
    opts["teacher"] = teacher_fields(recipe, teacher, checkpoint=teacher_checkpoint, resolution=teacher_resolution,
                                     steps=teacher_steps or steps, seed=teacher_seed, distillation=distillation,
                                     lam=distill_lambda, tau=distill_tau)
    opts["objective"] = _objective_opts(objective, mask_rate, mask_target)
    cfg = validated(PretrainConfig, opts, "pretrain", _pretrain_names())
    device, threads = run.device, _check_where(cfg.backend, run.device, run.threads)
    if out is not None:
        out = checkpoint_path(out, cache_path(cfg).name, "--out")  # named as typed, before any training
        rec, _ = pretrain(cfg, device=device, threads=threads, out=out, batch_option="--batch-size")
    else:
        ckpt, rec = ensure_upstream(cfg, device=device, threads=threads, batch_option="--batch-size")
        if rec is None:
            console.print(f"cached upstream: {escape(str(ckpt.path))}")
            from vitbench.record import Record

            rec = Record.measured("pretrain", {**ckpt.meta["config"], "checkpoint": str(ckpt.path)},
                                  metrics=ckpt.meta["metrics"])
    c = rec.config
    _show(rec, f"pretrain {c['model']} on {_on(c['data'])} | {c.get('checkpoint', '')}",
          ["accuracy", "val_accuracy", "images_seen", "epochs", "exaflops", "train_gflops_per_image", "params_m",
           "train_s", "train_img_per_s", "final_loss", "teacher_accuracy", "teacher_agreement",
           "teacher_exaflops", "skipped_files"], run.as_json)


def _objective_opts(objective: str, mask_rate: float | None = None, mask_target: str | None = None) -> dict | None:
    """PretrainConfig's `objective` from the options (None: supervised); a bad value exits 2 naming it."""
    from vitbench.transfer.masked_patch import Objective

    obj = Objective.parse(objective, "--objective")
    if obj is Objective.SUPERVISED:
        return None
    if obj is Objective.NONE:
        return {"objective": obj.value}
    return {k: v for k, v in (("mask_rate", mask_rate), ("target", mask_target)) if v is not None}


def _resolve_upstream_arg(checkpoint, model, sets, backend, pretrain_steps, pretrain_warmup_steps, seed,
                          objective: str) -> dict:
    """The downstream command's upstream: a checkpoint file, or a model pre-trained here with the default
    recipe. Options that only shape a pre-training are refused beside a checkpoint (they would be ignored);
    `--model` (and `--set`) beside a checkpoint name its architecture: a timm state dict's (`timm:resnet18`,
    which its weights alone do not say), checked against the weights when they are read; a vitbench
    checkpoint's must be its own."""
    from vitbench.errors import ConfigError

    if checkpoint:
        ignored = [opt for opt, v in (("--pretrain-steps", pretrain_steps),
                                      ("--pretrain-warmup-steps", pretrain_warmup_steps)) if v is not None]
        if ignored:
            raise ConfigError(f"--checkpoint gives the upstream; {', '.join(ignored)} would be ignored: give "
                              "either --checkpoint PATH (--model NAME: its architecture), or --model NAME with "
                              "its pre-training options")
        named = with_sets(model, sets) if model else None  # the checkpoint's architecture, as told
        if named or sets:
            from vitbench.models.specs import get_spec
            from vitbench.transfer.checkpoint import checkpoint_spec, load_checkpoint, refuse_other_architecture

            have = checkpoint_spec(checkpoint)  # a vitbench checkpoint's, from its header
            if have is None and named is None:
                have = load_checkpoint(checkpoint).spec
            wanted = parse_sets(sets)
            if have is not None:  # (a file of another origin with --model: checked as it is read, as that model)
                refuse_other_architecture(have, get_spec(named) if named else have.with_overrides(**wanted),
                                          f"--model {named}" if named else
                                          " ".join(f"--set {k}={v}" for k, v in wanted.items()))
        _objective_opts(objective)
        return {"checkpoint": checkpoint, "objective": objective,
                **({"checkpoint_model": named} if named else {})}
    if not model:
        raise ConfigError("give --checkpoint PATH (from `vitbench pretrain`) or --model NAME (pre-trained on "
                          "digits 0-4 with the default recipe, cached)")
    recipe = {k: v for k, v in (("steps", pretrain_steps), ("warmup_steps", pretrain_warmup_steps))
              if v is not None}
    return {"upstream": {"model": with_sets(model, sets), **recipe, "seed": seed,
                         **({"backend": backend} if backend else {}), "objective": _objective_opts(objective)}}


# The options fewshot and finetune share, declared once (their configs share DownstreamConfig's fields).
DOWNSTREAM = OptionGroup("downstream", {
    "checkpoint": (str, typer.Option(None, "--checkpoint", "-c", help="Upstream .safetensors file.")),
    "objective": (str, from_field(DownstreamConfig, "objective", help="The upstream's pre-training objective: "
                                  "supervised | masked_patch (a --checkpoint made by another is refused).")),
    "model": (str, typer.Option(None, "--model", "-m", help="Or: a variant, pre-trained here (default recipe); "
                                "with --checkpoint: its model (a timm state dict's timm:NAME).")),
    "sets": (list[str], typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP)),
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


def _downstream(o, seed: int, val_fraction: float | None = None) -> dict:
    """DownstreamConfig's fields from the DOWNSTREAM options `o` (`seed`: the upstream's, with --model)."""
    return {**_resolve_upstream_arg(o.checkpoint, o.model, o.sets, o.backend, o.pretrain_steps,
                                    o.pretrain_warmup_steps, seed, o.objective),
            "backend": o.backend, "resolution": o.resolution,
            "data": _data(_source(o.data, o.data_path, o.data_test_path, o.skip_corrupt, o.data_workers,
                                  check_data=o.check_data, **{f: getattr(o, f) for f in FORMAT_OPTIONS}),
                          o.classes, o.data_seed, val_fraction)}


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
    from vitbench.transfer.config import parse_ints, validated
    from vitbench.protocols.fewshot import fewshot

    cfg = validated(FewshotConfig, {
        **_downstream(downstream, seed), "shots": parse_ints(shots, "--shots", "1,5,10,25"), "seeds": seeds,
        **({} if l2_reg is None else {"l2_reg": l2_reg})}, "fewshot",
        _downstream_names(fewshot_cmd, FewshotConfig, {"l2_reg": "--l2-reg"}))
    rec = fewshot(cfg, device=run.device, threads=_check_where(cfg.backend, run.device, run.threads))
    keys = [k for s in cfg.shots for k in (f"accuracy_{s}shot", f"accuracy_{s}shot_std")]
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
    from vitbench.transfer.config import parse_floats, validated
    from vitbench.protocols.finetune import finetune

    cfg = validated(FinetuneConfig, {
        **_downstream(downstream, seed, val_fraction), "steps": steps, "batch_size": batch_size,
        "lr_grid": parse_floats(lr_grid, "--lr-grid", "0.01,0.03"), "warmup_steps": warmup_steps, "refit": refit,
        "seed": seed, "seeds": seeds}, "finetune", _downstream_names(finetune_cmd, FinetuneConfig))
    rec = finetune(cfg, device=run.device, threads=_check_where(cfg.backend, run.device, run.threads),
                   batch_option="--batch-size")
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


def _downstream_names(command, config, more: dict[str, str] | None = None) -> dict[str, str]:
    from vitbench.transfer.config import DataConfig

    return _option_names(command, {DataConfig: "data.", DownstreamConfig: "", config: "",
                                   PretrainConfig: "upstream."}, {**_DOWNSTREAM_NAMED, **(more or {})})
