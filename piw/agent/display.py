"""What the origin session shows while agent steps run: step cards, streamed assistant text, tool summaries.

On a terminal the assistant text streams as it arrives; otherwise each settled reply is printed as plain
lines, so scripts and CI see the answer. Everything from the model goes through terminal sanitising first.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from rich.console import Console
from rich.text import Text

from piw.agent.events import (
    AutoRetryStart,
    MessageEnd,
    MessageUpdate,
    StepDelivered,
    ToolExecutionEnd,
    ToolExecutionStart,
)
from piw.providers.messages import AssistantMessage
from piw.terminal import sanitize_terminal_text
from piw.views.cards import card_text, clip_cells


class StreamSink(Protocol):
    """Where streamed assistant text goes while a live frame owns the terminal (``piw.cli.live.LiveDisplay``)."""

    def stream_text(self, delta: str) -> None: ...

    def end_stream(self) -> None: ...


class AgentDisplay:
    """A loop listener that renders agent activity to the origin session's console.

    With a ``sink`` (a live frame on a terminal) text deltas go to the frame, which writing to the console would
    tear, and each settled reply is printed once above it.
    """

    def __init__(self, console: Console, *, verbose: bool = False, sink: StreamSink | None = None) -> None:
        self.console = console
        self.verbose = verbose
        self.sink = sink
        self.streaming = console.is_terminal and sink is None
        self._open_line = False
        self._open_kind: str | None = None

    def _end_stream(self) -> None:
        if self._open_line:
            self.console.file.write("\n")
            self.console.file.flush()
            self._open_line = False
            self._open_kind = None

    def __call__(self, event: Any) -> None:
        if isinstance(event, StepDelivered):
            self._end_stream()
            self.console.print(
                card_text(event.details, event.content, self.console.width, expanded=self.verbose)
            )
        elif isinstance(event, MessageUpdate) and self.sink is not None:
            if event.delta == "text_delta":
                self.sink.stream_text(sanitize_terminal_text(event.text))
        elif isinstance(event, MessageUpdate) and self.streaming:
            if event.delta == "text_delta" or (event.delta == "thinking_delta" and self.verbose):
                if self._open_kind != event.delta:
                    self._end_stream()  # thinking and the answer never share a line
                piece = sanitize_terminal_text(event.text)
                if event.delta == "thinking_delta":
                    self.console.print(Text(piece, style="dim"), end="", soft_wrap=True)
                else:
                    self.console.file.write(piece)
                    self.console.file.flush()
                self._open_line, self._open_kind = True, event.delta
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            self._end_stream()
            message = event.message
            if self.sink is not None:
                self.sink.end_stream()
            if not self.streaming:
                if self.verbose and message.thinking_text():
                    self.console.print(Text(sanitize_terminal_text(message.thinking_text()), style="dim"))
                text = message.visible_text()
                if text.strip():
                    self.console.print(Text(sanitize_terminal_text(text)))
            if message.stop_reason == "error" and not message.retried:
                error = sanitize_terminal_text(message.error_message or "")
                self.console.print(Text(f"  model error: {error}", style="red"))
        elif isinstance(event, ToolExecutionStart):
            self._end_stream()
            args = json.dumps(event.args, ensure_ascii=False)
            line = sanitize_terminal_text(f"  ⚙ {event.tool_name} {args}").replace("\n", " ")
            self.console.print(Text(clip_cells(line, self.console.width), style="dim"))
        elif isinstance(event, ToolExecutionEnd) and event.result.get("is_error"):
            line = sanitize_terminal_text(f"    ✗ {event.result.get('content', '')}").replace("\n", " ")
            self.console.print(Text(clip_cells(line, self.console.width), style="yellow"))
        elif isinstance(event, AutoRetryStart):
            self._end_stream()
            line = f"  ↻ retry {event.attempt}/{event.max_attempts} in {event.delay_s:g}s: {event.error}"
            self.console.print(
                Text(clip_cells(sanitize_terminal_text(line), self.console.width), style="yellow")
            )
