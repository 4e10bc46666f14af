"""A character canvas for the graph drawing: text and styled boxes, plus edge lines that join by direction.

Edges are recorded as direction bits per cell (up, down, left, right) and turned into box-drawing characters
at the end, so a fan-out, a merge and a crossing all come out as the right junction without the router knowing
about each other's lines. Text placed on the canvas is already sanitized and is stored one cell per character;
a wide character takes its cell and blanks the next one, so columns stay aligned.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

UP, DOWN, LEFT, RIGHT = 1, 2, 4, 8
_JOINS = {
    UP: "│", DOWN: "│", UP | DOWN: "│",
    LEFT: "─", RIGHT: "─", LEFT | RIGHT: "─",
    DOWN | RIGHT: "┌", DOWN | LEFT: "┐", UP | RIGHT: "└", UP | LEFT: "┘",
    UP | DOWN | RIGHT: "├", UP | DOWN | LEFT: "┤", DOWN | LEFT | RIGHT: "┬", UP | LEFT | RIGHT: "┴",
    UP | DOWN | LEFT | RIGHT: "┼",
}  # fmt: skip
LIGHT = "┌┐└┘─│┬┴"
HEAVY = "┏┓┗┛━┃┳┻"


class Canvas:
    """A ``width`` × ``height`` grid of cells, each with a character, a style and edge-direction bits."""

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self.chars = [[" "] * width for _ in range(height)]
        self.styles = [[""] * width for _ in range(height)]
        self.masks = [[0] * width for _ in range(height)]

    def inside(self, x: int, y: int) -> bool:
        return 0 <= x < self.width and 0 <= y < self.height

    def put(self, x: int, y: int, char: str, style: str = "") -> None:
        if self.inside(x, y):
            self.chars[y][x] = char
            self.styles[y][x] = style
            self.masks[y][x] = 0

    def text(self, x: int, y: int, value: str, limit: int, style: str = "") -> None:
        """Write ``value`` from ``x``, using at most ``limit`` cells; wide characters that do not fit are
        dropped."""
        used = 0
        for char in value:
            size = cell_len(char)
            if size == 0:
                continue
            if used + size > limit:
                break
            self.put(x + used, y, char, style)
            if size == 2:
                self.put(x + used + 1, y, "", style)
            used += size

    def line(self, x: int, y: int, bits: int, style: str = "dim") -> None:
        """Add edge directions to one cell (ignored where text or a box already sits)."""
        if not self.inside(x, y) or (self.chars[y][x] != " " and self.masks[y][x] == 0):
            return
        self.masks[y][x] |= bits
        self.chars[y][x] = _JOINS[self.masks[y][x]]
        self.styles[y][x] = style

    def vertical(self, x: int, y0: int, y1: int, style: str = "dim") -> None:
        """A vertical edge between rows ``y0`` and ``y1``; a single cell adds nothing (ends are joined
        explicitly)."""
        top, bottom = min(y0, y1), max(y0, y1)
        for y in range(top, bottom + 1) if top < bottom else ():
            self.line(x, y, (UP if y > top else 0) | (DOWN if y < bottom else 0), style)

    def horizontal(self, y: int, x0: int, x1: int, style: str = "dim") -> None:
        left, right = min(x0, x1), max(x0, x1)
        for x in range(left, right + 1) if left < right else ():
            self.line(x, y, (LEFT if x > left else 0) | (RIGHT if x < right else 0), style)

    def join(self, x: int, y: int, bits: int, style: str = "dim") -> None:
        """Add directions to a cell that a segment ends in (a corner or a tee)."""
        self.line(x, y, bits, style)

    def box(self, x: int, y: int, w: int, h: int, style: str = "", heavy: bool = False) -> None:
        tl, tr, bl, br, hz, vt = list(HEAVY if heavy else LIGHT)[:6]
        for i in range(1, w - 1):
            self.put(x + i, y, hz, style)
            self.put(x + i, y + h - 1, hz, style)
        for j in range(1, h - 1):
            self.put(x, y + j, vt, style)
            self.put(x + w - 1, y + j, vt, style)
        self.put(x, y, tl, style)
        self.put(x + w - 1, y, tr, style)
        self.put(x, y + h - 1, bl, style)
        self.put(x + w - 1, y + h - 1, br, style)

    def rows(self) -> list[Text]:
        """The canvas as lines of styled ``Text``, trailing blanks removed."""
        out: list[Text] = []
        for chars, styles in zip(self.chars, self.styles, strict=True):
            line = Text()
            run_style, run = styles[0] if styles else "", ""
            for char, style in zip(chars, styles, strict=True):
                if style != run_style:
                    line.append(run, style=run_style or None)
                    run_style, run = style, ""
                run += char
            line.append(run, style=run_style or None)
            line.rstrip()
            out.append(line)
        return out
