"""`vitbench pretrain | fewshot | finetune`: transfer accuracy. Each command parses its options into its task's
Params (vitbench.tasks.pretrain, fewshot, finetune: what a study's trial with those fields is) and runs the task,
then prints its record; errors name the options (the Params' FIELD_NAMES)."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import (SET_FIELDS_HELP, checkpoint_model, console, model_asked, path_sets, print_json,
                                 refuse_set_clash, task_params, with_sets)
from vitbench.cli.options import OptionGroup, cli_option, from_field
from vitbench.cli.path_options import PathOption, data_options, path_group, path_options
from vitbench.numfmt import fmt
from vitbench.tasks import run_checked
from vitbench.tasks.fewshot import Fewshot
from vitbench.tasks.finetune import Finetune
from vitbench.tasks.pretrain import Pretrain
from vitbench.transfer.config import ints_text

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
SET_PATH_HELP = SET_FIELDS_HELP + (" A dotted KEY sets that config path, as a study may: --set upstream.lr=3e-3 "
                            "--set data.workers=4 (`vitbench sweep --set` takes the same paths).")

# The run's settings every transfer command takes, after its own options
RUN = OptionGroup("run", {
    **path_options(Pretrain.Params, (PathOption("device"), PathOption("threads"))),  # the shared trial fields
    "as_json": (bool, cli_option("json", "--json", help="Print the whole record as JSON.")),
})


# pretrain's options of its task's fields, by config path (vitbench.cli.path_options): each one's type, default
# and help are the field's; the spellings users have first, the path's own (`--upstream.lr`) beside them
UPSTREAM = path_group(
    "upstream", Pretrain.Params, *data_options("upstream.data."),
    PathOption("upstream.resolution", ("--resolution", "-r")),
    PathOption("upstream.steps", ("--steps",)),
    PathOption("upstream.batch_size", ("--batch-size", "-b")),
    PathOption("upstream.lr", ("--lr",)), PathOption("upstream.weight_decay", ("--weight-decay",)),
    PathOption("upstream.warmup_steps", ("--warmup-steps",)),
    PathOption("upstream.decay", ("--decay",)), PathOption("upstream.label_smoothing", ("--label-smoothing",)),
    PathOption("upstream.teacher.upstream.model", ("--teacher",)),
    PathOption("upstream.teacher.checkpoint", ("--teacher-checkpoint",)),
    PathOption("upstream.teacher.upstream.resolution", ("--teacher-resolution",)),
    PathOption("upstream.teacher.upstream.steps", ("--teacher-steps",)),
    PathOption("upstream.teacher.upstream.seed", ("--teacher-seed",)),
    PathOption("upstream.teacher.distillation", ("--distillation",)),
    PathOption("upstream.teacher.lam", ("--distill-lambda",)),
    PathOption("upstream.teacher.tau", ("--distill-tau",)),
    PathOption("objective"),  # no path of its own: the PretrainConfig field is made from it and the mask_* fields
    PathOption("upstream.objective.masked_patch.mask_rate", ("--mask-rate",)),
    PathOption("upstream.objective.masked_patch.target", ("--mask-target",)),
)


@app.command("pretrain")
@RUN
@UPSTREAM
def pretrain_cmd(
    model: str = typer.Argument(..., help="Variant name, e.g. ViT-Nano/4, R-Nano, R-Nano+ViT-Micro/8."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_PATH_HELP),
    backend: str = typer.Option(None, help="A registered backend "
                                           "(`vitbench plugins` lists them; default: the first registered)."),
    upstream=None,
    # --seed is the trial's `seed`, the upstream's, in every transfer command (issue 52 item 5): here the model
    # pre-trained is the upstream; finetune's own first seed is --finetune-seed
    seed: int = from_field(Pretrain.Params, "seed", help="Model init / batch order seed."),
    out: str = typer.Option(None, "--out", "-o",
                            help="Also copy the checkpoint here (.safetensors; it is kept in the cache, "
                                 "results/checkpoints, either way)."),
    run=None,
) -> None:
    """Pre-train upstream (Adam, warm-up + decay) and save a safetensors checkpoint with its config.

    Reports upstream test accuracy, images seen and pre-training compute in exaFLOPs (3 x forward FLOPs per
    image x images seen, plus the teacher's forward per image when distilling). Runs the `pretrain` task a
    study's trial with these fields runs: the checkpoint goes to the cache that fewshot/finetune and studies
    reuse (an identical config is not trained twice); --out writes a copy of it there as well.
    """
    from vitbench.protocols.pretrain import cache_path
    from vitbench.transfer.checkpoint import check_replaceable, checkpoint_path

    sets, set_fields, set_names = path_sets(Pretrain.name, sets)  # `--set upstream.lr=...`: a field by its path
    flags = {**vars(upstream), "backend": backend, "seed": seed, "device": run.device, "threads": run.threads}
    refuse_set_clash(pretrain_cmd, flags, set_fields, set_names)  # a path set wins over its flag left unset
    values = {**flags, "model": with_sets(model, sets), **set_fields}
    task, params = task_params(Pretrain.name, set_names, command=pretrain_cmd, **values)
    if out is not None:  # named as typed, before any training
        out = checkpoint_path(out, cache_path(params.upstream_config(task.name)).name, "--out")
        check_replaceable(out, "--out")  # a file of the user's there (or its .json) is never overwritten
    rec = run_checked(task, params)  # the study's path: cached, else pre-trained into the cache
    if rec.metrics.get("cached") and not run.as_json:  # (the JSON says `cached`; its stdout holds JSON only)
        console.print(f"cached upstream: {escape(str(rec.config['checkpoint']))}")
    if out is not None:  # the cache's file copied where asked, its metadata written from the file's own header
        from pathlib import Path

        from vitbench.transfer.checkpoint import read_meta, write_pair

        cached = Path(rec.config["checkpoint"])
        write_pair(out, cached.read_bytes(), read_meta(cached))
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
    (with --pretrain-steps, --pretrain-warmup-steps, --pretrain-resolution). Options that only shape a pre-training
    are refused beside a checkpoint (they would be ignored); a vitbench checkpoint of another architecture than
    --model / --set is refused naming them (cli.common.checkpoint_model)."""
    from vitbench.errors import ConfigError

    if not o.checkpoint:
        if not o.model:
            raise ConfigError("give --checkpoint PATH (from `vitbench pretrain`) or --model NAME (pre-trained on "
                              "digits 0-4 with the default recipe, cached)")
        return {"model": with_sets(o.model, o.sets), "pretrain_steps": o.pretrain_steps,
                "pretrain_warmup_steps": o.pretrain_warmup_steps, "pretrain_resolution": o.pretrain_resolution}
    ignored = [opt for opt, v in (("--pretrain-steps", o.pretrain_steps),
                                  ("--pretrain-warmup-steps", o.pretrain_warmup_steps),
                                  ("--pretrain-resolution", o.pretrain_resolution)) if v is not None]
    if ignored:
        raise ConfigError(f"--checkpoint gives the upstream; {', '.join(ignored)} would be ignored: give "
                          "either --checkpoint PATH (--model NAME: its architecture), or --model NAME with "
                          "its pre-training options")
    # its resolution and backend, not given, are the task's defaults as in a study (FromCheckpoint: trained one)
    return {"checkpoint": o.checkpoint, "model": checkpoint_model(o.checkpoint, o.model, o.sets)}


# The options fewshot and finetune share, declared once (their configs share DownstreamConfig's fields).
DOWNSTREAM = OptionGroup("downstream", {
    "checkpoint": (str, typer.Option(None, "--checkpoint", "-c", help="Upstream checkpoint: a .safetensors file "
                                     "(vitbench's or timm's) or a vit_jax / big_vision .npz.")),
    "objective": (str, from_field(Fewshot.Params, "objective", help="The upstream's pre-training objective: "
                                  "supervised | masked_patch (a --checkpoint made by another is refused).")),
    "model": (str, typer.Option(None, "--model", "-m", help="Or: a variant, pre-trained here (default recipe); "
                                "with --checkpoint: its model (a timm state dict's timm:NAME).")),
    "sets": (list[str], typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_PATH_HELP)),
    "pretrain_steps": (int, typer.Option(None, help="With --model: upstream steps "
                                         "(default: as `vitbench pretrain`).")),
    "pretrain_warmup_steps": (int, typer.Option(None, help="With --model: upstream warm-up steps "
                                                "(default: as `vitbench pretrain`).")),
    "pretrain_resolution": (int, typer.Option(None, help="With --model: upstream resolution (default: as "
                                              "`vitbench pretrain`, the model's native one; -r is the "
                                              "downstream's).")),
    "backend": (str, typer.Option(None, help="A registered backend "
                                             "(`vitbench plugins` lists them; default: the first registered).")),
    "resolution": (int, typer.Option(None, "--resolution", "-r",
                                     help="Default: the one --checkpoint was trained at, else the model's native "
                                          "one; higher => position embeddings interpolated.")),
})


# the downstream data options fewshot and finetune share, generated from their fields' config paths (`data.*`;
# both tasks' Params take these fields from the same parts, tasks.upstream's Upstream and Downstream)
DATA = path_group("data", Fewshot.Params, *data_options("data."))


def _downstream(command, o, data, task: str, seed: int, **own) -> dict:
    """The downstream task's fields from the DOWNSTREAM options `o`, the DATA options `data` (`seed`: the
    trial's, the upstream's with --model; finetune's own is its --finetune-seed), the command's `own` fields and
    the fields `--set PATH=VALUE` sets (`o.sets` keeps the architecture overrides, `o.set_names` how an error
    names a field set by its path); one beside the flag of `command` (its function) typed for it is refused."""
    o.sets, set_fields, o.set_names = path_sets(task, o.sets)
    flags = {"backend": o.backend, "resolution": o.resolution, "objective": o.objective, **vars(data),
             "seed": seed, **own}
    refuse_set_clash(command, flags, set_fields, o.set_names)  # a path set wins over its flag left unset
    return {**flags, **_upstream_values(o), **set_fields}


def _flags(o) -> dict[str, str]:
    """Task field -> its option, for messages, where the command's declarations do not say it: the model as
    asked for beside a checkpoint (--model X, --set K=V), a field set by its path (--set PATH)."""
    return {"model": model_asked(o.model, o.sets, "--model") if o.checkpoint else "--model", **o.set_names}


# fewshot's own options, generated from its fields (their defaults the trial's: one k, 10; the paper's four with
# --shots 1,5,10,25)
FEWSHOT = path_group("fewshot", Fewshot.Params, PathOption("shots"),
                     PathOption("fewshot_seeds", ("--seeds",)), PathOption("l2_reg"))


@app.command("fewshot")
@DOWNSTREAM
@DATA
@FEWSHOT
@RUN
def fewshot_cmd(
    downstream=None,
    data=None,
    fewshot=None,
    seed: int = from_field(Fewshot.Params, "seed", help="With --model: upstream seed."),
    run=None,
) -> None:
    """Linear few-shot accuracy of a frozen upstream: closed-form ridge regression to {-1,1}^K targets.

    Mean and standard deviation over --seeds draws of k images per class, for every k in --shots.
    """
    values = _downstream(fewshot_cmd, downstream, data, "fewshot", seed, **vars(fewshot), device=run.device,
                         threads=run.threads)
    task, params = task_params("fewshot", _flags(downstream), command=fewshot_cmd, **values)
    rec = run_checked(task, params)  # the study's path: a trial of these fields
    keys = [k for s in params.shot_list() for k in (f"accuracy_{s}shot", f"accuracy_{s}shot_std")]
    c = rec.config
    _show(rec, f"fewshot {c['model']} ({c['backend']}) on {_on(c['data'])} @ "
               f"{c['resolution']}px", [*keys, "chance_accuracy", "exaflops", "upstream_accuracy",
                                       "skipped_files", "input_img_per_s", "input_bound_fraction"], run.as_json)


# finetune's own options, generated from its fields (their defaults the trial's: the batch is the shared field's)
FINETUNE = path_group(
    "finetune", Finetune.Params, PathOption("data.val_fraction", ("--val-fraction",)),
    PathOption("finetune_steps", ("--steps",)),
    PathOption("batch_size", ("--batch-size", "-b")),
    PathOption("lr_grid"), PathOption("finetune_warmup_steps", ("--warmup-steps",)),
    PathOption("refit", ("--refit/--no-refit",)), PathOption("finetune_seeds", ("--seeds",)),
    PathOption("finetune_seed"))


@app.command("finetune")
@DOWNSTREAM
@DATA
@FINETUNE
@RUN
def finetune_cmd(
    downstream=None,
    data=None,
    finetune=None,
    seed: int = from_field(Finetune.Params, "seed", help="With --model: upstream seed; also the first fine-tuning "
                                                        "seed unless --finetune-seed is given (as before it)."),
    run=None,
) -> None:
    """Fine-tune with the paper's recipe: zero-init head, SGD momentum 0.9, cosine, warm-up, clip 1, no wd.

    The LR is chosen by the mean accuracy over --seeds runs on a held-out split of train; the reported accuracy
    is the mean (and standard deviation) over the final runs' accuracies on the test split.
    """
    values = _downstream(finetune_cmd, downstream, data, "finetune", seed, **vars(finetune), device=run.device,
                         threads=run.threads)
    task, params = task_params("finetune", _flags(downstream), command=finetune_cmd, **values)
    rec = run_checked(task, params)  # the study's path: a trial of these fields
    c = rec.config
    _show(rec, f"finetune {c['model']} ({c['backend']}) on {_on(c['data'])} @ "
               f"{c['resolution']}px",
          ["accuracy", "accuracy_std", "selection_accuracy", "initial_accuracy", "val_accuracy", "best_lr",
           "chance_accuracy", "finetune_images_seen",
           "finetune_exaflops", "finetune_s", "exaflops", "upstream_accuracy", "skipped_files"], run.as_json)

