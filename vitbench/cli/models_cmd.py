"""`vitbench models`: the variant table."""

from __future__ import annotations

import fnmatch

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, print_json
from vitbench.cli.options import cli_option
from vitbench.errors import ConfigError, PluginError, VitbenchError, shorten
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import all_specs
from vitbench.registry import Kind, entries


def model_rows(family: str | None = None, include_tiny: bool = True, pattern: str = "") -> list[dict]:
    """The table's rows (names matching the glob `pattern`, case-insensitive), then the names an open-ended
    family offers for it (FamilyPlugin.catalogue's names, e.g. timm's list_models): those are listed by name
    only, not counted (building hundreds of models to count them would take minutes; `vitbench flops NAME`
    counts one)."""
    rows = []
    for s in all_specs(family, include_tiny):
        if pattern and not fnmatch.fnmatch(s.name.lower(), pattern.lower()):
            continue
        c = analytic_counts(s)
        rows.append({
            "name": s.name, "family": s.family, "timm_id": s.timm_id, "aliases": list(s.aliases),
            "architecture": s.describe(), "resolution": s.resolution, "stride": s.stride,
            "num_classes": s.num_classes, "params_m": round(c.params / 1e6, 3), "gmacs": round(c.gmacs, 3),
            "gflops": round(c.gflops, 3), "tiny": s.tiny,
        })
    for e in entries(Kind.FAMILY).values():
        plugin = e.obj
        if plugin.catalogue is None or (family is not None and plugin.name != family.strip().lower()):
            continue
        if family is None and not pattern:  # the whole catalogue only when its family is asked for
            continue
        rows += [{"name": n, "family": plugin.name, "timm_id": None, "aliases": [],
                  "architecture": f"{plugin.name} catalogue (not counted here: `vitbench flops {n}`)",
                  "resolution": None, "stride": None, "num_classes": None, "params_m": None, "gmacs": None,
                  "gflops": None, "tiny": False} for n in plugin.catalogue.names(pattern)]
    return rows


@app.command("models")
def models_cmd(
    family: str = typer.Option(None, "--family", "-f", help="vit | bit | hybrid | a plug-in family (axial_vit, axial_resnet, ...)"),
    tiny: bool = cli_option("tiny", "--tiny/--no-tiny", help="Include the tiny test/CPU variants."),
    pattern: str = cli_option("filter", "--filter", help="Glob on the names, e.g. 'ViT-*' or, with --family timm, "
                                                         "'convnext*' (timm's list_models)."),
    as_json: bool = cli_option("json", "--json", help="Machine-readable output."),
) -> None:
    """List every variant: paper name, family, depth/width, params (M) and GMACs at its native resolution.

    GMACs are analytic (1 MAC = 2 FLOPs), counted at the variant's native resolution with its default classes
    (1000 for the paper's variants, 10 for the tiny ones). Names are looked up forgivingly elsewhere:
    'vit-b/16', 'ViT-B_16' and 'vit_base_patch16_224' all mean ViT-B/16.
    """
    try:
        rows = model_rows(family, tiny, pattern)
    except PluginError:  # a broken plug-in (families can be plug-ins): its own message, not --family's
        raise
    except VitbenchError as e:  # named as typed
        raise ConfigError(f"--family: {e}") from None
    if as_json:
        print_json(rows)
        return
    if not rows:  # an empty table says nothing: say what matched nothing
        console.print(f"no model{' of family ' + escape(family) if family else ''} matches --filter "
                      f"{escape(shorten(pattern))}", highlight=False)
        return
    t = Table(title="vitbench models", show_lines=False)
    for col, just in [("name", "left"), ("family", "left"), ("architecture", "left"), ("res", "right"),
                      ("params (M)", "right"), ("GMACs", "right"), ("timm id", "left")]:
        t.add_column(col, justify=just, no_wrap=col in ("name", "params (M)", "GMACs"),
                     overflow="fold", ratio=None)
    for r in rows:
        t.add_row(r["name"], r["family"] + (" (tiny)" if r["tiny"] else ""), r["architecture"],
                  _text(r["resolution"], "{}"), _text(r["params_m"], "{:.2f}"), _text(r["gmacs"], "{:.3f}"),
                  r["timm_id"] or "")
    console.print(t)


def _text(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
