"""The `vitbench` command line: thin Typer commands over the library. Errors become exit code 2."""

from __future__ import annotations

import importlib
import os
import sys
import warnings

import typer

from vitbench.cli.options import cli_option
from vitbench.errors import VitbenchError, VitbenchWarning, clip, clip_words, looks_like_oom, shorten

MAX_ERROR_CHARS = 8000  # an error message is printed whole up to here (a study's problems), cut beyond
EXIT_OOM = 1  # a command that ran out of memory (the measurement's outcome, as `bench` reports an oom row)


class _Group(typer.core.TyperGroup):
    """Turns VitbenchError, and a file a full or read-only disk would not take, into a short message and exit code
    2, and out-of-memory into one line and exit code 1 (also under CliRunner); vitbench's warnings are printed
    once each, as `warning: ...`."""

    def resolve_command(self, ctx, args):
        """An empty value of an option that names a path is refused before anything runs: typically an unset
        shell variable ("$DIR"), and a path of '' is the current directory (`--results ""` wrote a store there).
        (Other options may take '' on purpose: `--classes ''`, every class.)"""
        name, cmd, rest = super().resolve_command(ctx, args)
        sub, its = cmd, rest
        while hasattr(sub, "commands") and its and its[0] in sub.commands:  # a group's command (history append)
            sub, its = sub.commands[its[0]], its[1:]
        annotations = getattr(getattr(sub, "callback", None), "__annotations__", {})
        paths = {o for p in getattr(sub, "params", ()) if "Path" in str(annotations.get(p.name, ""))
                 for o in getattr(p, "opts", ()) if o.startswith("-")}
        for i, a in enumerate(its[:-1]):
            if a in paths and its[i + 1] == "":
                raise typer.BadParameter(f"{a} is empty (an unset shell variable?): a path of '' would be the "
                                         "current directory", ctx)
        return name, cmd, rest

    def invoke(self, ctx):
        from rich.markup import escape

        from vitbench.cli.common import _warned, err_console, print_warning

        _warned.clear()  # once per command
        with warnings.catch_warnings():
            warnings.showwarning = print_warning
            warnings.simplefilter("always", VitbenchWarning)  # print_warning says each message once
            try:
                if _import_error is not None:  # a plug-in broke the making of the commands: any command says so
                    raise _import_error
                return super().invoke(ctx)
            except VitbenchError as e:
                err_console.print(f"[bold red]error:[/] {escape(clip(clip_words(str(e)), MAX_ERROR_CHARS))}",
                                  highlight=False, soft_wrap=True)
                raise typer.Exit(e.exit_code) from None
            except Exception as e:
                from vitbench.paths import DISK_ERRNOS, PATH_ERRNOS, reason

                if isinstance(e, OSError) and e.errno in DISK_ERRNOS:  # a full disk: one line, not a traceback
                    where = f"{e.filename!r} " if e.filename else "a file "  # a write to an open file names none
                    err_console.print(f"[bold red]error:[/] {escape(clip(where, 300))}cannot be written: "
                                      f"{escape(reason(e))}", highlight=False, soft_wrap=True)
                    raise typer.Exit(2) from None
                if isinstance(e, OSError) and e.errno in PATH_ERRNOS:  # a path no call can take: bad input
                    path = escape(shorten(str(e.filename or "")))
                    why = escape(e.strerror or str(e))
                    err_console.print(f"[bold red]error:[/] path {path} cannot be used: {why}", highlight=False,
                                      soft_wrap=True)
                    raise typer.Exit(2) from None
                if not looks_like_oom(e):
                    raise
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                err_console.print(f"[bold red]oom:[/] out of memory ({type(e).__name__}: "
                                  f"{escape(clip(first, 300))})", highlight=False, soft_wrap=True)
                raise typer.Exit(EXIT_OOM) from None


def _version(value: bool) -> None:
    if value:
        from vitbench.env import distribution_version, git_sha

        sha = git_sha()  # a source tree on sys.path without an install has no metadata (the GPU check ran so)
        installed = distribution_version("vitbench") or "not installed"
        typer.echo(f"vitbench {installed}" + (f" (git {sha})" if sha else ""))
        raise typer.Exit(0)


app = typer.Typer(
    cls=_Group,
    name="vitbench",
    help="Benchmark ViT, BiT and hybrid models on PyTorch and JAX: throughput, max batch, FLOPs, accuracy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's help: paragraphs re-flowed, flags without placeholders, names never cut
)

@app.callback()
def _root(version: bool = cli_option("version", "--version", callback=_version, is_eager=True,
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
    "vitbench.cli.serve_cmd",
    "vitbench.cli.doctor_cmd",
    "vitbench.cli.cache_cmd",
    "vitbench.cli.bisect_cmd",
    "vitbench.cli.history_cmd",
]
# A plug-in that fails while the commands are made (a dataset format's entry point that does not import, say:
# vitbench.transfer.formats) is kept here and said by the first command run, one line and its exit code, not a
# traceback from the import of this module.
_import_error: VitbenchError | None = None
for _mod in _COMMAND_MODULES:
    try:
        importlib.import_module(_mod)
    except VitbenchError as _e:
        _import_error = _e
        break


class _ReaderMayLeave:
    """Standard output whose reader may go away (`vitbench compare A B | head -1`): the first write or flush that
    finds the pipe closed points the descriptor at /dev/null, and the command runs on to its own exit code (a
    verdict, a measurement's status), where the BrokenPipeError ended it with 1 and no word."""

    def __init__(self, stream):
        self._stream = stream

    def _gone(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()
            self._stream.flush()  # what was buffered goes to /dev/null now: nothing left to fail at exit

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main() -> None:
    """The command line run in this process: `start`, then `app` (the console script's is vitbench.entry.main,
    which says an interrupt during either start in one line)."""
    start()
    app()


def start() -> None:
    """What a process does before it runs a command (not in `app` itself, which tests invoke in-process): it
    runs under the host-memory budget (vitbench.memory_budget: past it, one line and exit code 1 instead of the
    kernel's OOM killer); SIGINT interrupts it even where it was inherited ignored; a reader of its stdout may
    leave early."""
    import signal

    from vitbench.errors import VitbenchError
    from vitbench.memory_budget import guard_this_process

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background from a script: POSIX shells start such a command with SIGINT ignored, and
        # Python keeps an inherited SIG_IGN; Ctrl-C or `kill -INT` must still stop it cleanly (exit 130)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        guard_this_process()
    except VitbenchError as e:  # a bad $VITBENCH_MEMORY_LIMIT_GIB
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(e.exit_code) from None
    if hasattr(sys.stdout, "fileno"):
        sys.stdout = _ReaderMayLeave(sys.stdout)
