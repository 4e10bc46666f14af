"""Terminal safety: workflow and model text is shown as text, never as control sequences.

Every view renders workflow data through :func:`safe_text`, so an ESC, CSI, OSC, CR or bidi override in a title,
output, prompt or model reply reaches the terminal as a visible escape (``\\x1b``) and rich markup stays literal.
This module does not import rich (``piw --help`` does not need it); :class:`piw.safe_console.SafeConsole` is
the console half.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

_BIDI_CONTROLS = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def sanitize_terminal_text(text: str) -> str:
    """Replace control characters (except newline; tabs become spaces) and bidi controls with visible escapes."""
    if text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if char == "\n":
            out.append(char)
        elif char == "\t":
            out.append(" ")
        elif char in _BIDI_CONTROLS or unicodedata.category(char) == "Cc":
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)


def single_line(text: str) -> str:
    """Sanitize and fold newlines into spaces, for table cells and card lines."""
    return sanitize_terminal_text(text).replace("\n", " ")


def visible_title(value: object) -> str | None:
    """``value`` when it is a string with something to see, else ``None``: empty, whitespace-only and invisible
    (format or control characters only, such as a zero-width space) titles, and non-strings, are no title.

    A run title that shows nothing would leave a card reading ``▶  › step``; callers fall back to the workflow
    name instead (``docs/agent-steps.md``, step cards).
    """
    if not isinstance(value, str):
        return None
    if any(not char.isspace() and unicodedata.category(char) not in ("Cf", "Cc") for char in value):
        return value
    return None


def safe_text(text: str, style: str = "") -> Text:
    """A rich ``Text`` of sanitized workflow data: never markup, never ANSI, no highlighting."""
    from rich.text import Text  # rich is imported by what renders, not by piw --help

    return Text(sanitize_terminal_text(text), style=style)


_UNSAFE_IN_JSON = re.compile("[\u007f-\u009f\u202a-\u202e\u2066-\u2069]")


def json_text(value: Any) -> str:
    """JSON for stdout that is still terminal-safe.

    ``json.dumps`` escapes C0 controls but, with ``ensure_ascii=False``, passes DEL, C1 controls and bidi
    overrides through; those are escaped too (``\\u202e``), which is the same JSON value and harmless on a
    terminal.
    """
    text = json.dumps(value, ensure_ascii=False)
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group(0)):04x}", text)


_UNSAFE_IN_JSON_BYTES = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def safe_json_bytes(chunk: bytes) -> bytes:
    """:func:`json_text`'s escaping for a piece of UTF-8 JSON: DEL, C1 and bidi controls become ``\\uXXXX``.

    Pieces must hold whole characters (an encoder's output for whole values does); most hold none of the three
    bytes every match starts with (DEL, and the lead bytes of C1 and of the bidi controls) and pass through
    without a regex scan.
    """
    if b"\x7f" not in chunk and b"\xc2" not in chunk and b"\xe2" not in chunk:  # (each match starts so)
        return chunk
    return _UNSAFE_IN_JSON_BYTES.sub(lambda m: f"\\u{ord(m.group(0).decode('utf-8')):04x}".encode(), chunk)
