"""Console construction: rich on a terminal, plain text with no escape sequences otherwise."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console


def make_console(stream: TextIO | None = None, *, width: int | None = None) -> Console:
    """A console that emits colour only on a terminal and never when ``NO_COLOR`` is set, and that sanitizes
    every text segment it prints (``piw.safe_console.SafeConsole``). Off a terminal a printed line is never
    wrapped (a message, a command, a run id stay on one line for grep and copy); views still fit their own lines
    to the width. rich is imported here, on first use, so
    that a module can import this one without making ``piw --help`` import rich."""
    from piw.safe_console import SafeConsole

    stream = stream or sys.stdout
    is_tty = stream.isatty()
    plain = not is_tty or bool(os.environ.get("NO_COLOR"))
    return SafeConsole(
        file=stream,
        width=width or (None if is_tty else int(os.environ.get("COLUMNS", "100"))),
        color_system=None if plain else "auto",
        force_terminal=False if plain else None,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=not is_tty,
    )
