"""What the origin session shows while agent steps run: step cards, streamed assistant text, tool summaries.

On a terminal the assistant text streams as it arrives; otherwise each settled reply is printed as plain
lines, so scripts and CI see the answer. Everything from the model goes through terminal sanitising first.

What is printed is bounded: the display runs on the agent loop's thread, so printing a 10 MB reply (wrapping,
sanitising, a slow terminal) would eat the step's deadline. Each reply shows at most :data:`SHOWN_CHARS`
characters, then one elision marker naming how much was left out and where the full text is (the bundle keeps it
all: the session entry and the step output). Tool-call lines are cut before they are sanitised.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from rich.console import Console
from rich.text import Text

from piw.agent_steps.events import (
    AutoRetryStart,
    MessageEnd,
    MessageUpdate,
    StepDelivered,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolServersNotice,
)
from piw.providers.messages import AssistantReply
from piw.terminal import sanitize_terminal_text
from piw.views.cards import card_text, clip_cells


class StreamSink(Protocol):
    """Where streamed assistant text goes while a live frame owns the terminal (``piw.cli.live.LiveDisplay``)."""

    def stream_text(self, delta: str) -> None: ...

    def end_stream(self) -> None: ...


SHOWN_CHARS = 10_000
"""Characters of one reply (or thinking block, or prompt) printed in the terminal; the rest is elided."""
_LINE_CHARS = 2_000
"""A one-line summary (tool call, tool error) is cut to this many characters before it is sanitised."""


def elision(hidden: int, run_id: str | None) -> str:
    """The marker after a cut reply: how much is left out and the command that shows it whole."""
    where = f"piw inspect {run_id} --view conversation" if run_id else "piw inspect RUN --view conversation"
    return f"… [{hidden:,} more characters not shown; the full text is in the run: {where}]"


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
        self._streamed = 0
        """Characters streamed (or handed to the sink) for the current message; past SHOWN_CHARS, deltas drop."""
        self._run_id: str | None = None

    def _take(self, text: str) -> str:
        """The part of a delta still within the current message's display budget (sanitised)."""
        room = SHOWN_CHARS - self._streamed
        self._streamed += len(text)
        return sanitize_terminal_text(text[: max(room, 0)]) if room > 0 else ""

    def _end_stream(self) -> None:
        if self._open_line:
            self.console.file.write("\n")
            self.console.file.flush()
            self._open_line = False
            self._open_kind = None

    def __call__(self, event: Any) -> None:
        if isinstance(event, StepDelivered):
            self._delivered(event)
        elif isinstance(event, MessageUpdate) and self.sink is not None:
            if event.delta == "text_delta":
                piece = self._take(event.text)
                if piece:
                    self.sink.stream_text(piece)
        elif isinstance(event, MessageUpdate) and self.streaming:
            self._streamed_delta(event)
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantReply):
            self._settled(event.message)
        elif isinstance(event, ToolExecutionStart):
            self._end_stream()
            args = json.dumps(event.args, ensure_ascii=False)[:_LINE_CHARS]
            line = sanitize_terminal_text(f"  ⚙ {event.tool_name} {args}").replace("\n", " ")
            self.console.print(Text(clip_cells(line, self.console.width), style="dim"))
            if self.verbose and event.tool_name == "workflow" and event.args.get("action") == "submit":
                self._submitted(event.args.get("output"))
        elif isinstance(event, ToolExecutionEnd) and event.result.get("is_error"):
            content = str(event.result.get("content", ""))[:_LINE_CHARS]
            line = sanitize_terminal_text(f"    ✗ {content}").replace("\n", " ")
            self.console.print(Text(clip_cells(line, self.console.width), style="yellow"))
        elif isinstance(event, ToolServersNotice):
            self._end_stream()
            line = sanitize_terminal_text(f"  ⚠ {event.text[:_LINE_CHARS]}").replace("\n", " ")
            self.console.print(Text(clip_cells(line, self.console.width), style="yellow"))
        elif isinstance(event, AutoRetryStart):
            self._end_stream()
            error = str(event.error)[:_LINE_CHARS]
            line = f"  ↻ retry {event.attempt}/{event.max_attempts} in {event.delay_s:g}s: {error}"
            self.console.print(
                Text(clip_cells(sanitize_terminal_text(line), self.console.width), style="yellow")
            )

    def _delivered(self, event: StepDelivered) -> None:
        """A delivered prompt: the step card (with the prompt in full, elided past SHOWN_CHARS, when verbose)."""
        self._end_stream()
        contract = event.details.get("contract") if isinstance(event.details, dict) else None
        self._run_id = contract.get("runId") if isinstance(contract, dict) else self._run_id
        content = event.content
        if self.verbose and len(content) > SHOWN_CHARS:
            content = content[:SHOWN_CHARS] + "\n" + elision(len(content) - SHOWN_CHARS, self._run_id)
        self.console.print(card_text(event.details, content, self.console.width, expanded=self.verbose))

    def _streamed_delta(self, event: MessageUpdate) -> None:
        """On a terminal: the answer's text (and, when verbose, its thinking, dimmed) as it arrives."""
        if not (event.delta == "text_delta" or (event.delta == "thinking_delta" and self.verbose)):
            return
        if self._open_kind != event.delta:
            self._end_stream()  # thinking and the answer never share a line
            self._streamed = 0
        piece = self._take(event.text)
        if piece and event.delta == "thinking_delta":
            self.console.print(Text(piece, style="dim"), end="", soft_wrap=True)
        elif piece:
            self.console.file.write(piece)
            self.console.file.flush()
        self._open_line, self._open_kind = True, event.delta

    def _settled(self, message: AssistantReply) -> None:
        """A settled reply: printed whole when nothing streamed it, the elision marker when it was cut, and the
        model's error when the reply failed and is not retried."""
        streamed_kind = self._open_kind
        self._end_stream()
        if self.sink is not None:
            self.sink.end_stream()
        text = message.visible_text()
        if self.streaming:
            if streamed_kind == "text_delta" and len(text) > SHOWN_CHARS:
                self._elided(len(text))
        else:
            thinking = message.thinking_text()
            if self.verbose and thinking:
                self.console.print(Text(sanitize_terminal_text(thinking[:SHOWN_CHARS]), style="dim"))
                self._elided(len(thinking))
            if text.strip():
                self.console.print(Text(sanitize_terminal_text(text[:SHOWN_CHARS])))
                self._elided(len(text))
        self._streamed = 0
        if message.stop_reason == "error" and not message.retried:
            error = sanitize_terminal_text((message.error_message or "")[:_LINE_CHARS])
            self.console.print(Text(f"  model error: {error}", style="red"))

    def _submitted(self, output: object) -> None:
        """``--verbose``: the submitted output in full under its (clipped) call line, as one unclipped JSON line."""
        text = json.dumps(output, ensure_ascii=False, default=str)
        shown = sanitize_terminal_text(text[:SHOWN_CHARS]).replace("\n", " ")
        self.console.print(Text(f"    output: {shown}", style="dim"), soft_wrap=True)
        self._elided(len(text))

    def _elided(self, length: int) -> None:
        """After a cut reply: one unwrapped marker line (its command stays copyable)."""
        if length > SHOWN_CHARS:
            self.console.print(Text(elision(length - SHOWN_CHARS, self._run_id), style="dim"), soft_wrap=True)
