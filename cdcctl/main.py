"""The cdcctl command line: a thin Typer layer over the ``engine`` package's public API.

stdout carries data (tables, JSON); diagnostics and errors go to stderr. Every engine
error is rendered in one place (:func:`main`) without a traceback and mapped to a named
exit code (:func:`cdcctl.exit_codes.code_for`); the exit code a command returns ends the
process at once (:func:`cdcctl.exit_codes.exit_now`). Each command lives in its own module
under ``cdcctl/commands/``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperCommand

import engine
from cdcctl import exit_codes
from cdcctl.commands.control import pause, resume, resync, stop
from cdcctl.commands.dashboard import dashboard
from cdcctl.commands.deadletters import deadletters
from cdcctl.commands.delete import delete
from cdcctl.commands.demo import demo
from cdcctl.commands.explain import explain
from cdcctl.commands.init import init
from cdcctl.commands.query import query
from cdcctl.commands.repair import repair
from cdcctl.commands.start import start
from cdcctl.commands.status import status
from cdcctl.commands.test_connection import test_connection
from cdcctl.commands.validate import validate
from cdcctl.console import configure_logging, err

app = typer.Typer(
    name="cdcctl",
    help="Replicate Debezium change topics from Kafka into Apache Hudi tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: no <bool>/<str> type labels on every flag
    context_settings={"help_option_names": ["-h", "--help"]},
)


class _PlainArgument(TyperArgument):
    """A positional argument shown as its metavar alone: no ``<list[str]>`` type label
    in the help, ``TABLE`` (not ``{TABLE}``) when required in the usage line, and a
    metavar that is already a usage phrase (``[TABLE | replay TABLE]``) as it is."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        if name.startswith("["):
            return name
        shown = name if self.required else f"[{name}]"
        return shown + ("..." if self.nargs != 1 else "")


class _PlainCommand(TyperCommand):
    """A command whose positional arguments are :class:`_PlainArgument`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument):
                param.__class__ = _PlainArgument


def _exits(command: Callable[..., int | None]) -> Callable[..., None]:
    """``command``, ending the process with the exit code it returns (None: as usual)."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        code = command(*args, **kwargs)
        if code is not None:
            exit_codes.exit_now(code)

    return run


for command in (
    init,
    start,
    status,
    dashboard,
    pause,
    resume,
    stop,
    deadletters,
    resync,
    delete,
    query,
    demo,
    test_connection,
    validate,
    repair,
    explain,
):
    app.command(cls=_PlainCommand)(_exits(command))


def _version() -> str:
    try:
        return version("cdcctl")
    except PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        print(f"cdcctl {_version()}")
        raise typer.Exit()


@app.callback()
def root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="more log lines (librdkafka's included)")
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Replicate Debezium change topics from Kafka into Apache Hudi tables."""
    configure_logging(verbose)


def main() -> None:
    """Entry point: run the app, rendering engine errors without tracebacks."""
    try:
        app()
    except engine.CdcError as exc:  # every line redacted: no secret reaches the terminal
        say = engine.redact
        err.print(say(f"error: {exc.message}"), markup=False)
        if isinstance(exc, engine.ConfigError):
            for key, msg, fix in exc.problems:
                line = f"  - {key}: {msg}" + (f" (fix: {fix})" if fix else "")
                err.print(say(line), markup=False)
        if exc.hint:
            err.print(say(f"  hint: {exc.hint}"), markup=False)
        # Not sys.exit: a teardown of the interpreter could meet a thread still starting
        # Spark's JVM (an error found while it boots) and print an "Exception ignored"
        # traceback after the one-line error.
        exit_codes.exit_now(exit_codes.code_for(exc))
    except Exception as exc:  # a bug: say so in one line unless asked for the traceback
        if os.environ.get("CDCCTL_DEBUG"):
            raise
        err.print(engine.redact(f"internal error: {type(exc).__name__}: {exc}"), markup=False)
        err.print("  hint: rerun with CDCCTL_DEBUG=1 for the traceback and report it", markup=False)
        exit_codes.exit_now(exit_codes.RUNTIME)


if __name__ == "__main__":
    main()
