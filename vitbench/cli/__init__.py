"""The `vitbench` command line: thin Typer commands over the library. Errors become exit code 2."""

from __future__ import annotations

import importlib

import typer

from vitbench.errors import VitbenchError


class _Group(typer.core.TyperGroup):
    """Turns VitbenchError into a one-line message and exit code 2 (also under CliRunner)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except VitbenchError as e:
            from vitbench.cli.common import err_console

            err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        from vitbench.env import git_sha

        sha = git_sha()
        typer.echo(f"vitbench {version('vitbench')}" + (f" (git {sha})" if sha else ""))
        raise typer.Exit(0)


app = typer.Typer(
    cls=_Group,
    name="vitbench",
    help="Benchmark ViT, BiT and hybrid models on PyTorch and JAX: throughput, max batch, FLOPs, accuracy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print vitbench's version and exit.")) -> None:
    """Benchmark ViT, BiT and hybrid models on PyTorch and JAX: throughput, max batch, FLOPs, accuracy."""


# Each module registers its commands on `app` when imported.
_COMMAND_MODULES = [
    "vitbench.cli.models_cmd",
    "vitbench.cli.measure_cmd",
    "vitbench.cli.compare_cmd",
    "vitbench.cli.study_cmd",
    "vitbench.cli.transfer_cmd",
    "vitbench.cli.plugins_cmd",
    "vitbench.cli.fit_cmd",
    "vitbench.cli.inspect_cmd",
    "vitbench.cli.doctor_cmd",
]
for _mod in _COMMAND_MODULES:
    importlib.import_module(_mod)


def main() -> None:
    """Console entry point."""
    app()
