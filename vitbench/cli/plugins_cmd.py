"""`vitbench plugins`: the registered backends, tasks and executors, what each can do and where it comes from."""

from __future__ import annotations

from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, print_json
from vitbench.cli.options import cli_option


def plugin_rows() -> list[dict]:
    """One dict per plug-in: kind, name, module, source, availability, what it provides or needs, and its fields
    (a task's parameters with their defaults, an executor's options)."""
    from vitbench.registry import Kind, all_entries

    rows = []
    for e in all_entries():
        row = {"kind": e.kind.value, "name": e.name, "module": e.module, "source": e.source,
               "available": not e.missing(), "missing": e.missing(), "description": e.description}
        if e.kind is Kind.BACKEND:
            row.update(capabilities=list(e.provides), precisions=list(e.obj.precisions), devices=e.obj.devices,
                       parallelisms=[p.value for p in e.obj.parallelisms], requires=list(e.requires))
        elif e.kind is Kind.TASK:
            t = e.obj
            row.update(record_kind=t.kind, needs=list(e.provides), hidden=t.hidden,
                       metrics={m.name: m.unit for m in t.metrics},
                       fields={n: None if f.is_required() else f.get_default(call_default_factory=True)
                               for n, f in t.Params.model_fields.items()})
        elif e.kind is Kind.FAMILY:
            row.update(override_keys=list(e.provides), models=[r.name for r in e.obj.rows])
        elif e.kind is Kind.PARALLELISM:
            row.update(placements=dict(e.obj.placements))  # none: each backend places it (a built-in mode)
        else:
            row.update(options={n: None if f.is_required() else f.get_default(call_default_factory=True)
                                for n, f in e.obj.Options.model_fields.items()})
        rows.append(row)
    return rows


@app.command("plugins")
def plugins_cmd(
    as_json: bool = cli_option("json", "--json", help="Everything, machine-readable (fields with defaults)."),
) -> None:
    """List the registered backends, tasks, executors, model families and parallelism modes: capabilities, where
    each comes from, availability.

    Plug-ins come from vitbench itself, from installed packages (entry-point group `vitbench.plugins`) and from
    $VITBENCH_PLUGINS (comma-separated modules); see docs/plugins.md.
    """
    rows = plugin_rows()
    if as_json:
        print_json(rows)
        return
    for kind, what in (("backend", "capabilities"), ("task", "needs"), ("executor", "options"),
                       ("family", "override_keys"), ("parallelism", "placements")):
        t = Table(title={"family": "families", "parallelism": "parallelism modes"}.get(kind, f"{kind}s"),
                  title_justify="left")
        for col in ("name", what, "from", "available"):
            t.add_column(col, overflow="fold")
        for r in (r for r in rows if r["kind"] == kind):
            value = r.get(what)
            shown = ", ".join(value) if isinstance(value, (list, dict)) else str(value)
            if kind == "task":
                shown = (shown or "-") + f"  -> {r['record_kind']}" + (" (hidden)" if r["hidden"] else "")
            t.add_row(r["name"], shown, f"{r['module']} ({r['source']})",
                      "yes" if r["available"] else f"no: missing {', '.join(r['missing'])}")
        console.print(t)
