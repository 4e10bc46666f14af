"""Standard output whose reader went away: ``piw run … | head -1``, ``| less`` quit early (issue 26.3).

Python ignores ``SIGPIPE``, so a write to a pipe nobody reads raises ``BrokenPipeError``. Raised inside a run's
trace listener (the step log), it used to end the process with exit 1 and no word, and leave the run
``running (interrupted)``. :class:`StdoutGuard` wraps ``sys.stdout`` for the whole command (``piw.cli.main``): the
first write that meets a closed pipe points the file descriptor at ``/dev/null`` (so what is still buffered, and
the flush at exit, go nowhere instead of failing again) and every later write is dropped. A run goes on and ends
as it would have; the final status line and the outcome then go to stderr (``piw.cli.live``, ``piw.cli.outcome``),
and ``piw watch`` stops watching, exit 0 (docs/cli.md, "Output").

Kept free of rich and of the rest of piw: ``main`` imports it for every command, ``piw --help`` included.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO, cast


class StdoutGuard:
    """A text stream that forwards to ``stream`` until its reader closes the pipe, then drops what it is given."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if self.reader_gone:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._drop()
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.reader_gone:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._drop()

    def _drop(self) -> None:
        self.reader_gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):  # a stream with no descriptor (a test's StringIO)
            pass

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer, …: the stream's own
        return getattr(self._stream, name)


def guard_stdout() -> StdoutGuard:
    """Wrap ``sys.stdout`` (once per command; the caller puts the old stream back when it is done)."""
    guard = StdoutGuard(sys.stdout)
    sys.stdout = cast(TextIO, guard)
    return guard


def reader_gone() -> bool:
    """True once a write to standard output met a closed pipe (the output since then was dropped)."""
    return isinstance(sys.stdout, StdoutGuard) and sys.stdout.reader_gone
