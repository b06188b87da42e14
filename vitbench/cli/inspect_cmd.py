"""`vitbench inspect`: what a ViT learned (attention distance, position embeddings, filters, rollout), thin over
vitbench.insight."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import SET_HELP, console, err_console, parse_sets, print_json, shared_option, with_sets
from vitbench.cli.options import cli_option, from_field
from vitbench.tasks.inspection import Inspect

JSON_NAME = "inspect.json"


@app.command("inspect")
def inspect_cmd(
    source: str = typer.Argument(..., help="A checkpoint (.safetensors from `vitbench pretrain`) or a variant "
                                           "name (random weights), e.g. ViT-Micro/4, R-Nano+ViT-Micro/8."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
    model: str = typer.Option(None, "--model", "-m", help="With a checkpoint SOURCE: its model (a timm state "
                                                           "dict's timm:NAME; checked against the weights)."),
    backend: str = typer.Option(None, help="A registered backend "
                                           "(`vitbench plugins` lists them; default: the first registered)."),
    resolution: int = typer.Option(None, "--resolution", "-r",
                                   help="Input size (default: the checkpoint's; position embeddings are "
                                        "resampled as for fine-tuning)."),
    images: int = from_field(Inspect.Params, "inspect_images", "--images", "-n", min=1,
                             help="Digits test images to average over."),
    rollout: int = from_field(Inspect.Params, "inspect_rollout", "--rollout", min=0,
                              help="Images with attention-rollout maps."),
    seed: int = from_field(Inspect.Params, "seed", help="Init seed for a variant name."),
    threads: int = typer.Option(None, help="Intra-op threads."),
    as_json: bool = cli_option("json", "--json", help="One JSON document on stdout (nothing else)."),
    out: str = typer.Option(None, "--out", "-o", help=f"Directory for {JSON_NAME} and the PNG pictures."),
) -> None:
    """Mean attention distance per layer and head (px; per axis for axial models), position-embedding
    similarity, embedding-filter principal components and attention rollout (paper Sec. 4.5, Fig. 6, 7, 11)."""
    from vitbench.backends.base import Capability, backend_spec, default_backend, get_backend
    from vitbench.errors import ConfigError
    from vitbench.insight.run import inspect_model
    from vitbench.insight.source import inspection_images, load_source
    from vitbench.paths import check_dir

    out_dir = check_dir(out, "--out") if out else None  # before the model runs
    backend = shared_option("backend", backend) or default_backend()
    threads, seed = shared_option("threads", threads), shared_option("seed", seed)
    needs = {Capability.ATTENTION, Capability.TRANSFER} - backend_spec(backend).capabilities
    if needs:
        raise ConfigError(f"--backend {backend!r} cannot inspect (missing {', '.join(sorted(needs))})")
    is_file = Path(source).expanduser().exists() or source.endswith(".safetensors")  # as load_source decides
    if not is_file:
        source = with_sets(source, sets)
    be = get_backend(backend)
    be.setup("cpu", threads)
    src = load_source(source, lambda spec, r: be.weights(be.init_model(spec, r, spec.num_classes, seed)),
                      resolution, with_sets(model, sets) if model else None)
    if is_file and model:  # a vitbench checkpoint says its model: --model must be it
        from vitbench.models.specs import get_spec
        from vitbench.transfer.checkpoint import refuse_other_architecture

        refuse_other_architecture(src.spec, get_spec(with_sets(model, sets)), f"--model {model}")
    elif is_file and sets:
        from vitbench.transfer.checkpoint import refuse_other_architecture

        wanted = parse_sets(sets)
        refuse_other_architecture(src.spec, src.spec.with_overrides(**wanted),
                                  " ".join(f"--set {k}={v}" for k, v in wanted.items()))
    x = inspection_images(images, src.resolution)
    result = inspect_model(src.weights, src.spec, src.resolution, x, be.attention_maps, num_rollout=rollout)
    doc = {"source": src.origin, "backend": backend, "trained_resolution_px": src.trained_resolution,
           **result.to_json()}
    if out_dir is not None:
        from vitbench.paths import write_atomic

        pics = result.write_pictures(out_dir)
        doc["pictures"] = {k.value: p.name for k, p in pics.items()}
        write_atomic(out_dir / JSON_NAME, json.dumps(doc, indent=1).encode())
        err_console.print(f"wrote {out_dir / JSON_NAME} and {len(pics)} pictures")
    if as_json:
        print_json(doc)
        return
    t = Table(title=escape(f"{result.model} @ {result.resolution_px}px ({src.origin}, {backend}, "
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
