"""The help overlay (``?``): every key of the screen underneath, of its panes, and of the app."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEY_NAMES = {
    "comma": ",",
    "full_stop": ".",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "slash": "/",
    "colon": ":",
    "question_mark": "?",
    "escape": "Esc",
    "enter": "Enter",
    "pagedown": "PgDn",
    "pageup": "PgUp",
    "space": "Space",
    "down": "↓",
    "up": "↑",
    "home": "Home",
    "end": "End",
    "tab": "Tab",
    "shift+tab": "Shift+Tab",
    "ctrl+c": "Ctrl+C",
}


def key_label(keys: str) -> str:
    return " ".join(KEY_NAMES.get(key, key) for key in keys.split(","))


def key_lines(groups: Iterable[tuple[str, Iterable[BindingType]]]) -> list[Text]:
    """One heading per group, then ``key  what it does`` per binding (duplicates left out)."""
    out: list[Text] = []
    seen: set[str] = set()
    for title, bindings in groups:
        rows = []
        for binding in bindings:
            if not isinstance(binding, Binding) or not binding.description:
                continue
            label = key_label(binding.key)
            if label in seen:
                continue
            seen.add(label)
            rows.append(Text.assemble((f"  {label:<14}", "bold cyan"), binding.description))
        if rows:
            out += [Text(title, style="bold underline"), *rows, Text("")]
    return out


EXTRA = [
    Binding("tab", "", "Next pane (graph, tabs, pane)"),
    Binding("shift+tab", "", "Previous pane"),
]
"""Keys Textual itself provides."""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "app.pop_screen", "Close help")
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 72; max-width: 100%; height: 90%; border: round $accent;
        background: $surface; padding: 0 1; }
    """

    def __init__(self, groups: list[tuple[str, Iterable[BindingType]]]) -> None:
        super().__init__()
        self.groups = groups

    def compose(self) -> ComposeResult:
        lines = [Text("Keys", style="bold"), Text(""), *key_lines([*self.groups, ("Textual", EXTRA)])]
        lines.append(
            Text("Mouse: click a row or a tab; scroll with the wheel. Esc or ? closes this.", style="dim")
        )
        with VerticalScroll():
            yield Static(Text("\n").join(lines), id="keys")
