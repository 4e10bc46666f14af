"""The ``piw`` command line: thin commands over library calls; errors become one ``Error: …`` line here only."""

from __future__ import annotations

import signal
import sys
from types import FrameType

import typer

from piw.cli import quick_exit
from piw.cli.args import protect_run_refs
from piw.cli.commands import command_group
from piw.cli.stdout_guard import StdoutGuard, guard_stdout
from piw.errors import PiwError
from piw.stop_signal import clear_stop_request, request_stop, stop_requested
from piw.terminal import sanitize_terminal_text


def _stop_signal(signum: int, frame: FrameType | None) -> None:
    """SIGTERM and Ctrl-C unwind the command as ``KeyboardInterrupt``; the request is also remembered, for the
    time the exception lands where Python swallows it (``piw.stop_signal``)."""
    request_stop()
    raise KeyboardInterrupt


_INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C or SIGTERM (``docs/cli.md``, exit codes)."""


def _one_line(message: str) -> str:
    """Errors are one ``Error: …`` line, whatever the message (e.g. a user exception) holds, and terminal-safe:
    it may quote a workflow name, a run id or an exception message."""
    return " ".join(part.strip() for part in sanitize_terminal_text(message).splitlines() if part.strip())


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``piw`` console script; ``main(argv)`` runs one command in the caller's process.

    Called without ``argv`` it is the process's entry point: a command that built a large state ends the process
    without freeing it (``piw.cli.quick_exit``)."""
    clear_stop_request()
    signal.signal(signal.SIGTERM, _stop_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop_signal)
    args = list(sys.argv[1:] if argv is None else argv)
    unguarded = sys.stdout
    if not isinstance(unguarded, StdoutGuard):
        guard_stdout()  # a reader that closes the pipe early never ends the command (issue 26.3)
    try:
        _command(args, argv is None)
    finally:
        sys.stdout = unguarded


def _command(args: list[str], whole_process: bool) -> None:
    """Run one command line and exit with its code; every error becomes one ``Error: …`` line."""
    if whole_process:
        quick_exit.mark_whole_process()
    try:
        group = command_group(args)
        args = protect_run_refs(group, args)
        result = group(args=args, prog_name="piw", standalone_mode=False)
    except PiwError as exc:
        print(f"Error: {_one_line(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("Error: aborted.", file=sys.stderr)
        sys.exit(_INTERRUPTED)
    except typer.TyperException as exc:
        # typer vendors its own click (typer._click), whose exceptions all derive from TyperException; the click
        # package is not imported at all (30 ms of start-up).
        if type(exc).__name__ == "NoArgsIsHelpError":
            print(sanitize_terminal_text(exc.format_message()))
            sys.exit(2)
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print(f"Error: {_one_line(message)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("Error: interrupted.", file=sys.stderr)
        sys.exit(_INTERRUPTED)
    except Exception as exc:
        # A read-only PIW_HOME or a full disk, met outside a run (creating a bundle, the database): one line.
        from piw.store.bundle import home_path
        from piw.store.storage import storage_error

        storage = storage_error(exc, home_path())
        if storage is None:
            raise
        print(f"Error: {_one_line(str(storage))}", file=sys.stderr)
        sys.exit(storage.exit_code)
    code = result if isinstance(result, int) else 0
    if code == _INTERRUPTED and stop_requested():
        # typer (0.2x) turns a KeyboardInterrupt into a returned 130 before the handler above can see it.
        print("Error: interrupted.", file=sys.stderr)
    if whole_process and quick_exit.requested():
        quick_exit.end_process(code)
    if whole_process:
        _flush_then_leave_caches()
    sys.exit(code)


def _flush_then_leave_caches() -> None:
    """The answer first, then the detached cache writes (``piw.cli.quick_exit.run_pending_writes``)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # (the ordinary exit reports it)
    quick_exit.run_pending_writes()
