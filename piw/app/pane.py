"""``LinesPane``: a scrolling, focusable list of lines with a cursor, drawn from a :class:`LineSource`.

It uses Textual's line API, so only the rows on screen are asked for (a page at a time, cached until the
source or the width changes). Replacing the source keeps the cursor and the scroll position, which is how a
live run updates without flicker or a jump. Every line is a ``rich.text.Text`` the views built from sanitised
data, rendered as segments: nothing in it is ever parsed as markup.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from piw.app.sources import LineSource, TextSource

PAGE = 128
CURSOR = Style(reverse=True)
PLAIN = Style()


class LinesPane(ScrollView, can_focus=True):
    """A pane of lines; ``cursor`` is a row index below the sticky header."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "cursor(1)", "Down", show=False),
        Binding("k,up", "cursor(-1)", "Up", show=False),
        Binding("pagedown,space", "page(1)", "Page down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("home", "edge(0)", "Top", show=False),
        Binding("end", "edge(1)", "Bottom", show=False),
        Binding("enter", "activate", "Open", show=False),
    ]
    DEFAULT_CSS = """
    LinesPane { height: 1fr; }
    """

    class Moved(Message):
        """The cursor moved to ``row``."""

        def __init__(self, pane: LinesPane, row: int) -> None:
            super().__init__()
            self.pane, self.row = pane, row

    class Activated(Message):
        """Enter (or a double click) on ``row``."""

        def __init__(self, pane: LinesPane, row: int) -> None:
            super().__init__()
            self.pane, self.row = pane, row

    def __init__(
        self, source: LineSource | None = None, *, cursor: bool = True, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.source: LineSource = source or TextSource([""])
        self.show_cursor = cursor
        self.cursor = 0
        self._pages: dict[int, list[Strip]] = {}
        self._header: list[Strip] = []
        self._count = 0
        self._width = -1

    # ---- content -----------------------------------------------------------------------------------------

    def set_source(self, source: LineSource, *, cursor: int | None = None) -> None:
        """Show ``source``; the cursor stays where it was (clamped) unless ``cursor`` is given."""
        self.source = source
        self._width = -1
        self._measure()
        if cursor is not None:
            self.cursor = cursor
        self.cursor = max(0, min(self.cursor, self._count - 1))
        if cursor is not None:
            self.scroll_to_cursor()
        self.refresh()

    def _measure(self) -> None:
        width = max(1, self.scrollable_content_region.width or self.size.width or 80)
        if width == self._width:
            return
        console = self.app.console
        self._width = width
        self._pages.clear()
        self._header = [self._strip(line, width) for line in self.source.header(console, width)]
        self._count = self.source.count(console, width)
        self.virtual_size = Size(width, self._count + len(self._header))

    def _strip(self, line: Text, width: int) -> Strip:
        return styled(Strip(list(line.render(self.app.console))).adjust_cell_length(width, PLAIN))

    @property
    def count(self) -> int:
        self._measure()
        return self._count

    def row_text(self, row: int) -> str:
        """The plain text of one row (tests and search read it)."""
        self._measure()
        lines = self.source.rows(self.app.console, self._width, row, row + 1)
        return lines[0].plain if lines else ""

    def visible_text(self) -> str:
        """What the pane shows now, header included, as plain lines."""
        self._measure()
        top = int(self.scroll_offset.y)
        height = max(1, self.size.height - len(self._header))
        rows = self.source.rows(self.app.console, self._width, top, top + height)
        header = self.source.header(self.app.console, self._width)
        return "\n".join(line.plain.rstrip() for line in [*header, *rows])

    # ---- drawing -----------------------------------------------------------------------------------------

    def on_resize(self, event: events.Resize) -> None:
        self._measure()

    def render_line(self, y: int) -> Strip:
        self._measure()
        if y < len(self._header):
            return self._header[y].crop(
                int(self.scroll_offset.x), int(self.scroll_offset.x) + self.size.width
            )
        row = int(self.scroll_offset.y) + y - len(self._header)
        if row >= self._count:
            return Strip.blank(self.size.width, PLAIN)
        page = self._page(row // PAGE)
        strip = page[row % PAGE] if row % PAGE < len(page) else Strip.blank(self._width, PLAIN)
        if self.show_cursor and row == self.cursor:
            strip = strip.apply_style(CURSOR if self.has_focus else Style(reverse=True, dim=True))
        x = int(self.scroll_offset.x)
        return strip.crop(x, x + self.size.width)

    def _page(self, number: int) -> list[Strip]:
        if number not in self._pages:
            if len(self._pages) > 64:
                self._pages.clear()
            start = number * PAGE
            lines = self.source.rows(self.app.console, self._width, start, min(self._count, start + PAGE))
            self._pages[number] = [self._strip(line, self._width) for line in lines]
        return self._pages[number]

    # ---- moving ------------------------------------------------------------------------------------------

    def move_to(self, row: int) -> None:
        self._measure()
        row = max(0, min(row, self._count - 1))
        if row != self.cursor:
            self.cursor = row
            self.post_message(self.Moved(self, row))
        self.scroll_to_cursor()
        self.refresh()

    def scroll_to_cursor(self) -> None:
        height = max(1, self.scrollable_content_region.height - len(self._header))
        top = int(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False)

    def show_rows(self, first: int, last: int) -> None:
        """Scroll so rows ``first..last`` are visible (the graph keeps the selected card in view)."""
        height = max(1, self.scrollable_content_region.height)
        top = int(self.scroll_offset.y)
        if first < top or last >= top + height:
            self.scroll_to(y=max(0, first - max(0, (height - (last - first + 1)) // 2)), animate=False)

    def action_cursor(self, delta: int) -> None:
        if self.show_cursor:
            self.move_to(self.cursor + delta)
        else:
            self.scroll_to(y=self.scroll_offset.y + delta, animate=False)

    def action_page(self, direction: int) -> None:
        step = max(1, self.scrollable_content_region.height - len(self._header) - 1) * direction
        if self.show_cursor:
            self.move_to(self.cursor + step)
        else:
            self.scroll_to(y=self.scroll_offset.y + step, animate=False)

    def action_edge(self, end: int) -> None:
        if self.show_cursor:
            self.move_to(self._count - 1 if end else 0)
        else:
            self.scroll_to(y=self.max_scroll_y if end else 0, animate=False)

    def action_activate(self) -> None:
        self.post_message(self.Activated(self, self.cursor))

    def on_click(self, event: events.Click) -> None:
        row = int(self.scroll_offset.y) + event.y - len(self._header)
        if 0 <= row < self._count and self.show_cursor:
            self.move_to(row)
            if event.chain >= 2:
                self.post_message(self.Activated(self, row))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def find(self, needle: str, start: int) -> int | None:
        """The first row at or after ``start`` (wrapping) whose text contains ``needle``, ignoring case."""
        self._measure()
        needle = needle.lower()
        if not needle or not self._count:
            return None
        console, width = self.app.console, self._width
        for begin in range(start, start + self._count, PAGE):
            stop = min(begin + PAGE, start + self._count)
            rows = _wrapped(self.source, console, width, begin, stop, self._count)
            for index, text in enumerate(rows):
                if needle in text.lower():
                    return (begin + index) % self._count
        return None


def styled(strip: Strip) -> Strip:
    """``strip`` with a style on every segment. Rich leaves unstyled text without one (``None``), and Textual's
    ``NO_COLOR`` filter for colours it draws itself (``Monochrome``: a served session, whose colours are not
    the terminal's) reads each segment's style: one ``None`` was an ``AttributeError`` in every session."""
    return Strip(
        [Segment(text, PLAIN if style is None else style, control) for text, style, control in strip],
        strip.cell_length,
    )


def _wrapped(
    source: LineSource, console: Console, width: int, begin: int, stop: int, count: int
) -> list[str]:
    """Plain rows ``begin..stop`` of a source, wrapping past its end to its start."""
    out: list[str] = []
    row = begin
    while row < stop:
        first = row % count
        last = min(count, first + (stop - row))
        out += [line.plain for line in source.rows(console, width, first, last)]
        row += last - first
    return out
