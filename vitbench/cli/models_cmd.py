"""`vitbench models`: the variant table."""

from __future__ import annotations

import typer
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, print_json
from vitbench.errors import ConfigError, PluginError, VitbenchError
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import all_specs


def model_rows(family: str | None = None, include_tiny: bool = True) -> list[dict]:
    rows = []
    for s in all_specs(family, include_tiny):
        c = analytic_counts(s)
        rows.append({
            "name": s.name, "family": s.family, "timm_id": s.timm_id, "aliases": list(s.aliases),
            "architecture": s.describe(), "resolution": s.resolution, "stride": s.stride,
            "num_classes": s.num_classes, "params_m": round(c.params / 1e6, 3), "gmacs": round(c.gmacs, 3),
            "gflops": round(c.gflops, 3), "tiny": s.tiny,
        })
    return rows


@app.command("models")
def models_cmd(
    family: str = typer.Option(None, "--family", "-f", help="vit | bit | hybrid | a plug-in family (axial_vit, axial_resnet, ...)"),
    tiny: bool = typer.Option(True, "--tiny/--no-tiny", help="Include the tiny test/CPU variants."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List every variant: paper name, family, depth/width, params (M) and GMACs at its native resolution.

    GMACs are analytic (1 MAC = 2 FLOPs), counted at the variant's native resolution with its default classes
    (1000 for the paper's variants, 10 for the tiny ones). Names are looked up forgivingly elsewhere:
    'vit-b/16', 'ViT-B_16' and 'vit_base_patch16_224' all mean ViT-B/16.
    """
    try:
        rows = model_rows(family, tiny)
    except PluginError:  # a broken plug-in (families can be plug-ins): its own message, not --family's
        raise
    except VitbenchError as e:  # named as typed
        raise ConfigError(f"--family: {e}") from None
    if as_json:
        print_json(rows)
        return
    t = Table(title="vitbench models", show_lines=False)
    for col, just in [("name", "left"), ("family", "left"), ("architecture", "left"), ("res", "right"),
                      ("params (M)", "right"), ("GMACs", "right"), ("timm id", "left")]:
        t.add_column(col, justify=just, no_wrap=col in ("name", "params (M)", "GMACs"),
                     overflow="fold", ratio=None)
    for r in rows:
        t.add_row(r["name"], r["family"] + (" (tiny)" if r["tiny"] else ""), r["architecture"],
                  str(r["resolution"]), f"{r['params_m']:.2f}", f"{r['gmacs']:.3f}", r["timm_id"] or "")
    console.print(t)
