"""What every view shares: a line-based renderable, clipping to the width, and safe formatting of run data.

Views produce lines of plain ``rich.text.Text`` for a given width instead of nested rich widgets. That keeps
three promises cheap to hold: no line is ever wider than the console (down to width 1), a view can stream a
long trace page by page without building one huge renderable, and workflow data is only ever placed into
``Text`` (never parsed as markup or ANSI) after :func:`piw.terminal.sanitize_terminal_text`.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import orjson
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from piw.progress import parse_instant
from piw.terminal import sanitize_terminal_text, single_line
from piw.wire import is_plain

OUTCOME_MARKS = {
    "ok": "✓",
    "completed": "✓",
    "failed": "✗",
    "timed_out": "⏱",
    "cancelled": "■",
    "running": "▶",
    "waiting": "⏸",
    "unknown": "?",
    "not taken": "–",
    "not run": "–",
}
STATUS_STYLES = {
    "ok": "green",
    "completed": "green",
    "failed": "red",
    "timed_out": "red",
    "cancelled": "yellow",
    "running": "cyan",
    "waiting": "magenta",
    "unknown": "yellow",
    "pending": "dim",
    "not taken": "dim",
    "not run": "dim",
}


def marked(status: str) -> str:
    """A status word after its mark: ``✓ ok``, ``⏸ waiting`` (``·`` for a word without one)."""
    return f"{OUTCOME_MARKS.get(status, '·')} {status}"


def status_style(status: str | None) -> str:
    """The colour a status word is shown in (none for a word without one)."""
    return STATUS_STYLES.get(status or "", "")


def node_kind(spec: Any) -> str:
    """What a definition-snapshot node is called on screen: its ``nodeType``, except that a checkpoint with a
    ``humanDecision`` is a ``human_decision`` (the word ``piw show`` and the DSL use; the trace keeps
    ``checkpoint``, which is how the engine runs both)."""
    if not isinstance(spec, dict):
        return "?"
    if spec.get("humanDecision"):
        return "human_decision"
    return single_line(str(spec.get("nodeType", "?")))


def node_kinds(snapshot: Any) -> dict[str, str]:
    """:func:`node_kind` of every node of a definition snapshot, by node id (mount paths for included nodes)."""
    nodes = snapshot.get("nodes") if isinstance(snapshot, dict) else None
    return {str(node_id): node_kind(spec) for node_id, spec in (nodes or {}).items()}


class View:
    """A renderable made of single lines; subclasses implement :meth:`lines` for a width."""

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        raise NotImplementedError

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width)
        for line in self.lines(console, width):
            yield fit(line, width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(1, options.max_width)

    def pages(self, console: Console, width: int, size: int = 500) -> Iterator[Lines]:
        """The view cut into pages, so a caller can print a huge trace without holding all of it."""
        page: list[Text] = []
        for line in self.lines(console, width):
            page.append(line)
            if len(page) >= size:
                yield Lines(page)
                page = []
        if page:
            yield Lines(page)


class Lines(View):
    """A fixed list of lines."""

    def __init__(self, lines: Iterable[Text]) -> None:
        self._lines = list(lines)

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        yield from self._lines


def fit(line: Text, width: int) -> Text:
    """``line`` cut to ``width`` cells, ending in ``…`` when cut; newlines never survive."""
    if "\n" in line.plain:
        line = Text(" ").join(line.split("\n", allow_blank=True))
    if line.cell_len <= width:
        return line
    clipped = line.copy()
    clipped.truncate(width, overflow="ellipsis")
    return clipped


def clip(text: str, width: int) -> str:
    """A plain string cut to ``width`` cells with ``…`` (callers sanitize first)."""
    if width <= 0:
        return ""
    line = Text(text)
    if line.cell_len <= width:
        return text
    line.truncate(width, overflow="ellipsis")
    return line.plain


def safe(value: str, style: str = "") -> Text:
    """One line of workflow data as ``Text``: sanitized, newlines folded, never markup."""
    return Text(single_line(value), style=style)


def safe_block(value: str, style: str = "") -> Text:
    """Multi-line workflow data as ``Text`` (newlines kept), sanitized, never markup."""
    return Text(sanitize_terminal_text(value), style=style)


def is_artifact(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "$artifact" in value


def _artifact_placeholders(value: Any) -> Any:
    if is_artifact(value):
        ref = value["$artifact"]
        size = ref.get("bytes") if isinstance(ref, dict) else None
        return f"‹artifact {size} bytes›" if isinstance(size, int) else "‹artifact›"
    if isinstance(value, dict):
        return {str(key): _artifact_placeholders(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_artifact_placeholders(item) for item in value]
    return value


def _fast_json(value: Any) -> str | None:
    """orjson's compact text of plain JSON data without artifact refs (most outputs); ``None`` for anything else.

    Steps tables print one of these per row of a long run, and ``json.dumps`` after a placeholder walk was most
    of their cost. Only values that :func:`piw.wire.is_plain` accepts take it, so the text is what ``json`` gives.
    """
    if not is_plain(value):
        return None
    text = orjson.dumps(value).decode("utf-8")
    # Searched as str: ``b"$" in data`` takes the buffer protocol's slow path (0.34 µs against 0.03 µs for str);
    # a one-character search first, since the 11-character one is rarely needed.
    if "$" in text and '"$artifact"' in text:
        return None
    return text


def compact(value: Any, limit: int | None = None) -> str:
    """A value as one sanitized line: strings as they are, anything else as compact JSON.

    Large strings were moved to artifacts by the writer; a view shows their size, never loads them (the full
    value is one ``--json`` away), so rendering stays cheap on any run.
    """
    fast = None if isinstance(value, str) else _fast_json(value)
    if fast is not None:
        # printable text is what single_line would return unchanged; orjson escapes every C0 control, so ASCII
        # text without DEL is printable (``isascii`` is a flag, DEL one byte to find: cheaper than ``isprintable``)
        printable = (fast.isascii() and "\x7f" not in fast) or fast.isprintable()
        text = fast if printable else single_line(fast)
    else:
        text = single_line(value if isinstance(value, str) else _json_or_repr(_artifact_placeholders(value)))
    if limit is not None and len(text) > limit:
        return text[: max(0, limit - 1)] + "…"
    return text


def _json_or_repr(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=True)
    except (TypeError, ValueError):
        return repr(value)


def fmt_duration(ms: float | None) -> str:
    """A short elapsed time: ``850ms``, ``12.3s``, ``4m05s``, ``2h03m``."""
    if type(ms) is int and 0 <= ms < 1000:  # most steps of a long run (``max(0.0, 0)`` is 0.0: the same text)
        return f"{ms}ms"
    if ms is None or not math.isfinite(ms):
        return "—"
    ms = max(0.0, ms)
    if ms < 1000:
        return f"{int(ms)}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


_CANONICAL_AT = re.compile(r"\d{4}-\d\d-\d\dT(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{3}[Zz]", re.ASCII)
_MILLIS = frozenset(f"{n:03d}" for n in range(1000))
_VALID_SECONDS: dict[str, bool] = {}


def fmt_clock(at: str | None) -> str:
    """``HH:MM:SS.mmm`` of a trace timestamp (the date is in ``--json``).

    Every line piw writes has the form ``YYYY-MM-DDTHH:MM:SS.mmmZ``: its clock is the text itself once its second
    is known to be canonical and a real date (checked once per second, the milliseconds on every call), which is
    what parsing it would print. The trace view of a long run calls this once per row; parsing and ``strftime``
    were a fifth of its cost.
    """
    if not at:
        return ""
    if len(at) == 24 and at[19] == "." and at[23] in "Zz" and at[20:23] in _MILLIS:
        second = at[:19]
        valid = _VALID_SECONDS.get(second)
        if valid is None:
            if len(_VALID_SECONDS) >= 1 << 16:
                _VALID_SECONDS.clear()
            valid = _VALID_SECONDS[second] = (
                bool(_CANONICAL_AT.fullmatch(at)) and parse_instant(at) is not None
            )
        if valid:
            return at[11:23]
    moment = parse_instant(at)
    if moment is None:
        return single_line(at)[:12]
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def ms_between(start: str | None, end: datetime | None) -> float | None:
    """Milliseconds from a trace timestamp to an instant, or ``None`` when either is unknown."""
    began = parse_instant(start) if start else None
    if began is None or end is None:
        return None
    return (end - began).total_seconds() * 1000


def elapsed(start: str | None, end: datetime | None) -> str:
    """The time from a trace timestamp to an instant, as :func:`fmt_duration` writes it (``—`` when unknown)."""
    return fmt_duration(ms_between(start, end))


@functools.lru_cache(maxsize=4096)
def node_label(node_id: str) -> str:
    """A flat node id as shown to people: mount path joined with `` › ``.

    Remembered: a long run's tables show the same few node ids on every one of their rows.
    """
    return single_line(node_id).replace("/", " › ")


def short_id(identifier: str | None, size: int = 8) -> str:
    if identifier and identifier.isprintable():  # an attempt id as piw writes it: nothing to sanitize
        return identifier[:size]
    return single_line(identifier or "")[:size]


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"
