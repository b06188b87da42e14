"""`vitbench inspect`: what a ViT learned (attention distance, position embeddings, filters, rollout), thin over
vitbench.insight."""

from __future__ import annotations

import json

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import (SET_FIELDS_HELP, checkpoint_model, console, err_console, model_asked, path_sets,
                                 print_json, refuse_set_clash, task_params, with_sets)
from vitbench.cli.options import cli_option, from_field
from vitbench.errors import ConfigError, shorten
from vitbench.outdir import OutputFolder, Writer, write_files
from vitbench.tasks import run_checked
from vitbench.tasks.inspection import Inspect

JSON_NAME = "inspect.json"
# what --out holds (vitbench.outdir: its manifest, the suffixes of its files)
INSPECT_FILES = Writer("inspect", ".vitbench-inspect.json", (".json", ".png"))
# Inspect's fields that SOURCE sets (the other options' spellings: their declarations, task_params(command=...))
_FROM_SOURCE = {"model": "SOURCE", "checkpoint": "SOURCE", "inspect_weights": "SOURCE"}


def _fields(source: str, sets: list[str] | None, model: str | None) -> dict:
    """The Params fields SOURCE (a checkpoint file or a variant name), --set and --model give: a variant's random
    initialisation; or the checkpoint, its model (--model, else the file's: a vitbench checkpoint's header, or
    inferred from weights of another origin) and its trained resolution as the default one."""
    from vitbench.insight.subject import checkpoint_file

    path = checkpoint_file(source)
    if path is None:
        if model:
            raise ConfigError(f"--model {shorten(model)} names a checkpoint's model; SOURCE {shorten(source)} is "
                              "no checkpoint file (a model name goes in SOURCE alone)")
        return {"model": with_sets(source, sets), "inspect_weights": "random"}
    return {"model": checkpoint_model(path, model, sets), "checkpoint": source}  # its resolution: the task's


@app.command("inspect")
def inspect_cmd(
    source: str = typer.Argument(..., help="A checkpoint (.safetensors from `vitbench pretrain`) or a variant "
                                           "name (random weights), e.g. ViT-Micro/4, R-Nano+ViT-Micro/8."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_FIELDS_HELP + " E.g. --set "
                                   "device=cuda; --set inspect_weights=upstream --set upstream.steps=300 inspects "
                                   "the upstream a transfer trial pre-trains."),
    model: str = typer.Option(None, "--model", "-m", help="With a checkpoint SOURCE: its model (a timm state "
                                                           "dict's timm:NAME; checked against the weights)."),
    backend: str = typer.Option(None, help="A registered backend "
                                           "(`vitbench plugins` lists them; default: the first registered)."),
    resolution: int = typer.Option(None, "--resolution", "-r",
                                   help="Input size (default: the one the checkpoint was trained at, else the "
                                        "model's native one; position embeddings are resampled as for "
                                        "fine-tuning)."),
    images: int = from_field(Inspect.Params, "inspect_images", "--images", "-n", min=1,
                             help="Digits test images to average over."),
    rollout: int = from_field(Inspect.Params, "inspect_rollout", "--rollout", min=0,
                              help="Images with attention-rollout maps."),
    seed: int = from_field(Inspect.Params, "seed", help="Init seed for a variant name."),
    threads: int = typer.Option(None, help="Intra-op threads."),
    as_json: bool = cli_option("json", "--json", help="One JSON document on stdout (nothing else)."),
    out: str = typer.Option(None, "--out", "-o", help=f"Directory for {JSON_NAME} and the PNG pictures."),
    allow_other_files: bool = cli_option("allow_other_files", "--allow-other-files",
                                         help="Write into an --out holding files inspect did not write: its files "
                                              "go beside them and never touch them."),
) -> None:
    """Mean attention distance per layer and head (px; per axis for axial models), position-embedding
    similarity, embedding-filter principal components and attention rollout (paper Sec. 4.5, Fig. 6, 7, 11)."""
    from vitbench.insight.result import InspectResult
    from vitbench.insight.subject import RANDOM_INIT
    from vitbench.paths import check_dir

    out_dir = check_dir(out, "--out") if out else None  # before the model runs
    if out_dir is not None and out_dir.is_dir():  # files of another's there: refused now, not after the model ran
        OutputFolder(out_dir, INSPECT_FILES, allow_other=allow_other_files).check()
    # the task's Params (what a study's inspect trial with these fields is), then the task: one path
    arch, set_fields, set_names = path_sets("inspect", sets)  # a field of the task (device, upstream.steps, ...)
    fields = {**_fields(source, arch, model), **({} if resolution is None else {"resolution": resolution})}
    names = {**_FROM_SOURCE, "model": model_asked(model, arch, "SOURCE"), **set_names}
    flags = {**fields, "backend": backend, "inspect_images": images, "inspect_rollout": rollout, "seed": seed,
             "threads": threads}
    refuse_set_clash(inspect_cmd, flags, set_fields, set_names)  # a path set wins over its flag left unset
    task, params = task_params("inspect", names, command=inspect_cmd, **{**flags, **set_fields})
    rec = run_checked(task, params)  # what a study's trial never writes as an ok row is refused here too
    result = InspectResult.from_json(rec.raw)
    origin = rec.config.get("upstream_checkpoint") or RANDOM_INIT
    doc = {"source": origin, "backend": rec.config["backend"],
           "trained_resolution_px": rec.config.get("upstream_resolution", result.resolution_px), **rec.raw}
    if out_dir is not None:
        from vitbench.insight.pictures import render_pictures

        pics = render_pictures(result)
        doc["pictures"] = {k.value: name for k, (name, _) in pics.items()}
        write_files(out_dir, {JSON_NAME: json.dumps(doc, indent=1).encode(), **dict(pics.values())},
                    INSPECT_FILES, allow_other_files)
        err_console.print(f"wrote {escape(str(out_dir / JSON_NAME))} and {len(pics)} pictures")
    if as_json:
        print_json(doc)
        return
    t = Table(title=escape(f"{result.model} @ {result.resolution_px}px ({origin}, {doc['backend']}, "
                           f"{result.num_images} images): mean attention distance (px)"))
    axes = result.axis_layers  # per-axis layers (axial families): the axis, where it sits, its pixel step
    for name, justify in (("layer", "right"), *((("axis", "left"), ("where", "left"), ("step px", "right"))
                                                 if axes else ()), ("per head", "left"), ("mean", "right"),
                          ("uniform" if axes else "on class token", "right")):
        t.add_column(name, justify=justify)
    last = result.uniform_distance_px if axes else result.prefix_attention_share.mean(1)
    for i, (d, s) in enumerate(zip(result.attention_distance_px, last), start=1):
        where = (axes[i - 1].axis.value, axes[i - 1].where, str(axes[i - 1].step_px)) if axes else ()
        t.add_row(str(i), *where, " ".join(f"{v:5.2f}" for v in d), f"{d.mean():.2f}", f"{s:.2f}")
    console.print(t)
    for k, v in result.headline().items():
        console.print(f"{k}: {v:.2f}")
    for what, why in result.not_applicable.items():
        console.print(f"not applicable, {what}: {escape(why)}", highlight=False)
