"""`vitbench doctor`: is timing honest here, what precision is in force, which peak, what makes numbers noisy."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from vitbench.cli import app
from vitbench.cli.common import console, print_json, shared_option
from vitbench.cli.options import cli_option, from_field
from vitbench.tasks.bench import Infer

_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red", "skip": "dim"}


@app.command("doctor")
def doctor_cmd(
    device: str = from_field(Infer.Params, "device", help="cpu | gpu[:N] (or cuda[:N]) | tpu[:N]: checked on "
                                                          "every backend that runs there."),
    threads: int = typer.Option(None, help="Intra-op threads to check with (default: chosen as a trial would)."),
    precision: str = from_field(Infer.Params, "precision", help="Precision of the timing check and the peak."),
    backend: list[str] = typer.Option(None, "--backend", help="Only these registered backends "
                                                              "(`vitbench plugins` lists them); repeatable."),
    quick: bool = cli_option("quick", "--quick", help="Smaller matmuls, shorter load sample."),
    as_json: bool = cli_option("json", "--json", help="Every check with its data, as JSON."),
) -> None:
    """Check that this device's numbers can be trusted, and say what would make them noisy.

    Timing: a large matmul timed by the backend's timer (CUDA events on a GPU), by the wall clock around the
    same steps and their sync, and without the sync. Precision: the framework's matmul settings, what vitbench
    sets, and the error of an fp32 matmul against float64. Peak: datasheet vs measured. Machine: threads vs
    cores, other load, CPU governor and clocks, SMT, temperatures, memory; GPU clocks, power, slowdowns (NVML).
    Exit code 1 when a check fails (timing or precision not what it claims); 2 when no backend runs on the
    device, or an option is wrong; else 0.
    """
    from vitbench.doctor import Status, run

    checks = run(device=device, threads=shared_option("threads", threads), precision=precision,
                 backends=backend or None, quick=quick)  # run() refuses a precision no backend there times
    if as_json:
        print_json({"device": device, "checks": [c.to_dict() for c in checks]})
    else:
        t = Table(title=f"vitbench doctor: {device}", show_lines=True)
        t.add_column("check", style="bold", no_wrap=True)
        t.add_column("", no_wrap=True)
        t.add_column("found")
        t.add_column("why it matters", style="dim")
        for c in checks:
            t.add_row(escape(c.name), f"[{_STYLE[c.status.value]}]{c.status.value}[/]", escape(c.found),
                      escape(c.why))
        console.print(t)
    if any(c.status is Status.FAIL for c in checks):
        raise typer.Exit(1)
