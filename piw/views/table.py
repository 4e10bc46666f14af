"""Fixed-width text tables whose column widths depend only on the console width, never on the rows.

Because widths are known before the first row, a table can stream rows from a trace of any length and its
pages still line up; at narrow widths the lowest-priority columns are dropped rather than squeezing
everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from piw.views.base import fit

GAP = 2


@dataclass(frozen=True)
class Column:
    """One column: its header, minimum and preferred widths, and how readily it is dropped (lower goes
    first)."""

    name: str
    min: int
    max: int
    priority: int = 0
    flex: bool = False
    right: bool = False


Cell = Text | str


def layout(columns: Sequence[Column], width: int) -> list[tuple[int, int]]:
    """``(column index, width)`` pairs of the columns that fit in ``width``.

    Columns start at their minimum; spare cells are then handed out a round at a time — one to each column
    below its maximum, four to a flexible one — so the free-text column grows with the terminal most.
    """
    kept = list(range(len(columns)))
    while len(kept) > 1 and sum(columns[i].min for i in kept) + GAP * (len(kept) - 1) > width:
        kept.remove(min(kept, key=lambda i: (columns[i].priority, -i)))
    if len(kept) == 1:
        return [(kept[0], max(1, min(width, columns[kept[0]].max)))]
    widths = {i: columns[i].min for i in kept}
    spare = width - sum(widths.values()) - GAP * (len(kept) - 1)
    while spare > 0:
        growing = [i for i in kept if widths[i] < columns[i].max]
        if not growing:
            break
        for i in growing:
            step = min(spare, 4 if columns[i].flex else 1, columns[i].max - widths[i])
            widths[i] += step
            spare -= step
    return [(i, widths[i]) for i in kept]


def _cell(value: Cell, size: int, right: bool) -> Text:
    text = value if isinstance(value, Text) else Text(value)
    text = fit(text, size)
    pad = size - text.cell_len
    if pad > 0:
        text = Text(" " * pad) + text if right else text + Text(" " * pad)
    return text


def table_lines(
    columns: Sequence[Column], rows: Iterable[Sequence[Cell] | Text], width: int
) -> Iterator[Text]:
    """A header line, then one line per row; cells are clipped to their column and never wrap.

    A row given as one ``Text`` is a detail line under the row before it (e.g. a traceback), printed as is.
    """
    plan = layout(columns, width)
    header = Text(" " * GAP).join(
        _cell(Text(columns[i].name, style="bold"), size, columns[i].right) for i, size in plan
    )
    yield _strip(header)
    for row in rows:
        if isinstance(row, Text):
            yield row
            continue
        yield _strip(Text(" " * GAP).join(_cell(row[i], size, columns[i].right) for i, size in plan))


def _strip(line: Text) -> Text:
    line.rstrip()
    return line


_CELLS: dict[str, int] = {}


def _cells(value: str) -> int:
    """``cell_len``, remembered for the short cells that repeat on every row (``✓ ok``, ``—``)."""
    if len(value) > 24:
        return cell_len(value)
    width = _CELLS.get(value)
    if width is None:
        width = _CELLS[value] = cell_len(value)
    return width


_SHORT_CELLS: dict[tuple[str, int, bool], str] = {}


def _plain_cell(value: str, size: int, right: bool) -> str:
    """:func:`_cell` for plain text: the same clipping (``…``) and padding, no ``Text`` built.

    A short cell is laid out once per (text, width, side): ``✓ ok`` is on every row of a long run.
    """
    if len(value) <= 24:
        key = (value, size, right)
        laid = _SHORT_CELLS.get(key)
        if laid is None:
            if len(_SHORT_CELLS) > 4096:
                _SHORT_CELLS.clear()
            laid = _SHORT_CELLS[key] = _lay_out(value, size, right)
        return laid
    return _lay_out(value, size, right)


def _one_cell_each(value: str) -> bool:
    """Whether every character of ``value`` is printable Latin-1 (ASCII included), which rich measures as one cell
    each (``tests/views/test_render.py`` checks every one), so its width is ``len``.

    Encoding is the quick test: a copy for a one-byte string, an early refusal for a wider one.
    """
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return value.isprintable()


def _lay_out(value: str, size: int, right: bool) -> str:
    if "\n" in value:
        value = value.replace("\n", " ")
    if _one_cell_each(value):  # (a trace summary's `` · `` is on most rows): cut by slicing
        width = len(value)
        if width > size:
            value, width = (value[: size - 1] + "…", size) if size > 0 else ("", 0)
    else:
        width = len(value) if value.isascii() else _cells(value)
        if width > size:
            # set_cell_size gives exactly size - 1 cells and the ellipsis is one: no need to measure the result
            value, width = (set_cell_size(value, size - 1) + "…", size) if size > 0 else ("", 0)
    pad = " " * (size - width)
    return pad + value if right else value + pad


def table_plain(columns: Sequence[Column], rows: Iterable[Sequence[str]], width: int) -> Iterator[str]:
    """:func:`table_lines` as plain strings, for output that is not a terminal: the same text, a fraction of
    the cost (``inspect --view steps`` of a long run prints hundreds of thousands of rows).

    Each column remembers how it laid out its short cells, keyed by the text alone: a node, an outcome and a
    duration repeat on almost every row of a long run, so most cells are one dictionary read.
    """
    plan: list[tuple[int, int, bool, dict[str, str]]] = [
        (i, size, columns[i].right, {}) for i, size in layout(columns, width)
    ]
    gap = " " * GAP
    yield gap.join(_plain_cell(columns[i].name, size, right) for i, size, right, _ in plan).rstrip()
    for row in rows:
        cells = []
        for i, size, right, laid_out in plan:
            value = row[i]
            laid = laid_out.get(value)
            if laid is None:
                # an ASCII cell (one cell per character) is padded or cut with "…" right here; others take
                # _lay_out, which measures them
                if value.isascii() and size > 0 and "\n" not in value:
                    laid = (
                        (value.rjust(size) if right else value.ljust(size))
                        if len(value) <= size
                        else (value[: size - 1] + "…")
                    )
                else:
                    laid = _lay_out(value, size, right)
                if len(value) <= 24 and len(laid_out) < 4096:
                    laid_out[value] = laid
            cells.append(laid)
        yield gap.join(cells).rstrip()
