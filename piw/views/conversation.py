"""The conversation view: the run's session — step cards, assistant text, tool calls and results,
notifications.

Step cards come from :mod:`piw.views.cards`, which reads only a step message's ``details`` (compact) and shows the
prompt verbatim only when expanded (``docs/design/agent-steps.md`` §5). Entries are streamed from
``session/entries.ndjson``; model text is sanitized and wrapped, never interpreted as markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from rich.console import Console
from rich.text import Text

from piw.store.session import SessionEntry
from piw.views.base import View, compact, safe, safe_block
from piw.views.cards import card_text

STEP_TYPE = "pi-workflows-agent-step"
NOTIFICATION_TYPE = "pi-workflows-notification"
TOOL_RESULT_LIMIT = 300


def _wrap(console: Console, text: Text, width: int, indent: str = "") -> Iterator[Text]:
    for line in text.wrap(console, max(1, width - len(indent))):
        yield Text(indent) + line


def _text_of(content: Any) -> str:
    """A message's text: a string as is, or the text of its content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def entry_lines(console: Console, entry: SessionEntry, width: int, expanded: bool = False) -> Iterator[Text]:
    """The lines of one session entry."""
    message = entry.message
    role = message.get("role")
    if role == "custom":
        yield from _custom(console, message, width, expanded)
    elif role == "assistant":
        yield from _assistant(console, message, width, expanded)
    elif role == "toolResult":
        style = "red" if message.get("isError") else "dim"
        details = message.get("details") if isinstance(message.get("details"), dict) else {}
        if details and details.get(
            "interrupted"
        ):  # a call a crash interrupted (docs/effects.md, "Tool calls")
            outcome = "outcome unknown" if details.get("outcome") == "unknown" else "not run again"
            yield Text(f"  ⚠ interrupted, {outcome}", style="yellow")
        line = Text("  ↳ ", style=style) + safe(str(message.get("toolName", "tool")), style)
        line.append(": ", style=style)
        line.append_text(safe(compact(_text_of(message.get("content")), TOOL_RESULT_LIMIT), style))
        yield line
    elif role == "user":
        yield from _wrap(
            console, Text("user: ", style="bold") + safe_block(_text_of(message.get("content"))), width
        )
    else:
        yield safe(f"· {role} entry", "dim")


def _custom(console: Console, message: dict[str, Any], width: int, expanded: bool) -> Iterator[Text]:
    custom_type = message.get("customType")
    details = message.get("details") if isinstance(message.get("details"), dict) else {}
    assert isinstance(details, dict)
    if custom_type == STEP_TYPE:
        yield Text("")
        card = card_text(details, str(message.get("content", "")), width, expanded=expanded)
        yield from _wrap(console, card, width)
    elif custom_type == NOTIFICATION_TYPE:
        head = Text("✉ notification", style="magenta")
        if details.get("kind"):
            head.append_text(safe(f" ({details['kind']})", "dim"))
        yield head
        yield from _wrap(console, safe_block(_text_of(message.get("content"))), width, "  ")
    else:
        yield safe(f"· {custom_type}", "dim")


def _assistant(console: Console, message: dict[str, Any], width: int, expanded: bool) -> Iterator[Text]:
    blocks = message.get("content") if isinstance(message.get("content"), list) else []
    assert isinstance(blocks, list)
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and str(block.get("text", "")).strip():
            yield from _wrap(console, safe_block(str(block["text"])), width)
        elif kind == "thinking" and expanded:
            yield from _wrap(console, safe_block(str(block.get("thinking", "")), "dim italic"), width)
        elif kind == "toolCall":
            arguments = block.get("arguments") or block.get("rawArguments") or {}
            line = Text("  ⚙ ", style="cyan") + safe(str(block.get("name", "")), "cyan")
            yield line + Text(" ") + safe(compact(arguments, 400), "dim")
    if message.get("stopReason") in ("error", "aborted"):
        reason = message.get("errorMessage") or message.get("stopReason")
        yield Text("  model error: ", style="red") + safe(str(reason), "red")


class ConversationView(View):
    def __init__(self, entries: Iterable[SessionEntry], expanded: bool = False) -> None:
        self.entries, self.expanded = entries, expanded

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        shown = False
        for entry in self.entries:
            lines = list(entry_lines(console, entry, width, self.expanded))
            if not shown and lines and not lines[0].plain:
                lines = lines[1:]
            shown = shown or bool(lines)
            yield from lines
        if not shown:
            yield Text("No conversation entries.", style="dim")


def conversation_view(entries: Iterable[SessionEntry], expanded: bool = False) -> ConversationView:
    return ConversationView(entries, expanded)
