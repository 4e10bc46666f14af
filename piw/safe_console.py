"""The console half of terminal safety (:mod:`piw.terminal` is the text half, and imports no rich)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment

from piw.terminal import sanitize_terminal_text


class SafeConsole(Console):
    """A rich console whose every printed text segment passes through :func:`sanitize_terminal_text`.

    Views already render workflow data with :func:`safe_text`; this is the one place that makes it impossible to
    forget: whatever reaches ``print`` (an f-string with a workflow name, an error, a table cell), only rich's own
    styling and cursor control segments may carry escape sequences to the terminal.
    """

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment
            if segment.control or segment.text.isprintable() or segment.text == "\n"
            else Segment(sanitize_terminal_text(segment.text), segment.style, segment.control)
            for segment in buffer
        )
