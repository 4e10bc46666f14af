"""The graph view: the workflow as boxed node cards with edges, branch labels, loops, start and end.

:mod:`piw.views.graph_layout` decides where things go; this module paints them — boxes, routed edges, labels.

Each card shows the node id, its type, and — for a run — its status, attempts and elapsed time; the current
node gets a heavy border (visible without colour), and an assistant-completion agent carries a small
``assistant response`` marker. The layered drawing (:mod:`piw.views.graph_layout`) is used when it fits the
width; otherwise the graph degrades to a vertical list of cards, each followed by its outgoing edges, which
fits any width.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.text import Text

from piw.store.fold import RunState
from piw.terminal import single_line
from piw.views.base import (
    View,
    clip,
    fmt_duration,
    marked,
    ms_between,
    node_kind,
    node_label,
    status_style,
)
from piw.views.canvas import Canvas
from piw.views.effects import effect_class_of
from piw.views.graph_layout import (
    END,
    END_LABEL,
    START,
    START_LABEL,
    Layout,
    Segment,
    layout_graph,
    list_order,
)

MIN_CARD, MAX_CARD = 14, 34
ASSISTANT_MARKER = "assistant response"


@dataclass(frozen=True)
class Card:
    """What one node's box shows."""

    id: str
    type: str
    status: str | None = None
    attempts: int = 0
    elapsed_ms: float | None = None
    assistant: bool = False
    current: bool = False
    selected: bool = False
    """Picked by the viewer's cursor: drawn in reverse video (the current node keeps its heavy border)."""

    @property
    def title(self) -> str:
        return node_label(self.id)

    def status_line(self) -> str:
        if self.status is None:
            return ""
        parts = [marked(self.status)]
        if self.attempts:
            parts.append(f"{self.attempts}×")
        if self.elapsed_ms is not None and self.attempts:
            parts.append(fmt_duration(self.elapsed_ms))
        return " ".join(parts)

    @property
    def style(self) -> str:
        style = status_style(self.status)
        style = f"bold {style}".strip() if self.current else style
        return f"reverse {style}".strip() if self.selected else style


def cards(
    snapshot: Mapping[str, Any], state: RunState | None = None, now: datetime | None = None
) -> list[Card]:
    """One card per snapshot node, with run status when a state is given.

    Attempt counts and summed durations come from the fold's ``node_stats``, so a card costs the same on the
    first step of a run and on the millionth (watch redraws every frame from them).
    """
    nodes: Mapping[str, Any] = snapshot.get("nodes") or {}
    stats: Mapping[str, tuple[int, float]] = state.node_stats if state is not None else {}
    out: list[Card] = []
    for node_id, spec in nodes.items():
        spec = spec if isinstance(spec, Mapping) else {}
        expected = spec.get("expectedOutput")
        assistant = isinstance(expected, Mapping) and expected.get("kind") == "assistant-message"
        kind = node_kind(dict(spec))
        effect = effect_class_of(dict(spec))
        if effect in ("once", "reconcile"):  # the effect class a crash respects (docs/effects.md)
            kind = f"{kind}·{effect}"
        card = Card(str(node_id), kind, assistant=assistant)
        if state is not None:
            card = _with_status(card, state, stats.get(card.id), now)
        out.append(card)
    return out


UNREACHED = ("not taken", "not run")
"""Statuses of nodes a finished run never reached: their whole card (box, title, status) is dimmed."""


def _unreached(state: RunState) -> str:
    """A node the run never reached: ``pending`` while it may still come, else not taken (completed) or not run."""
    if state.status == "completed":
        return "not taken"
    if state.status in ("failed", "timed_out", "cancelled"):
        return "not run"
    return "pending"


def _with_status(card: Card, state: RunState, stat: tuple[int, float] | None, now: datetime | None) -> Card:
    attempts, total = stat if stat else (0, 0.0)
    current = state.current is not None and state.current.node_id == card.id
    result = state.results.get(card.id)
    status = result.outcome if result is not None else _unreached(state)
    if current and state.current is not None:
        attempts += 1
        total += ms_between(state.current.started_at, now) or 0
        status = "unknown" if state.status == "unknown" else "running"
    elif state.waiting_on == card.id and state.status == "waiting":
        status = "waiting"
    return Card(card.id, card.type, status, attempts, total, card.assistant, current)


def segments(snapshot: Mapping[str, Any]) -> list[Segment]:
    """Snapshot edges (parallel ones merged, labels joined), plus start → entry and terminal nodes → end."""
    nodes = [str(n) for n in snapshot.get("nodes") or {}]
    merged: dict[tuple[str, str], list[str]] = {}
    for raw in snapshot.get("edges") or []:
        if not isinstance(raw, Mapping) or raw.get("from") not in nodes or raw.get("to") not in nodes:
            continue
        labels = merged.setdefault((str(raw["from"]), str(raw["to"])), [])
        label = raw.get("when", raw.get("exit") if raw.get("exit") not in (None, "done") else None)
        if label is not None and single_line(str(label)) not in labels:
            labels.append(single_line(str(label)))
    out = [Segment(START, str(snapshot.get("startAt")), None)] if snapshot.get("startAt") in nodes else []
    out += [Segment(a, b, "|".join(labels) or None) for (a, b), labels in merged.items()]
    sources = {a for a, _ in merged}
    out += [Segment(n, END, None) for n in nodes if n not in sources]
    return out


def _content(card: Card, inner: int, run_mode: bool, marker_row: bool) -> list[tuple[str, str]]:
    """The lines inside a box as ``(text, style)``; the type is right-aligned when it fits."""
    title = card.title
    if len(title) + 1 + len(card.type) <= inner:
        first = title + " " * (inner - len(title) - len(card.type)) + card.type
    else:
        first = clip(title, inner)
    lines = [(first, "bold" if card.current else "dim" if card.status in UNREACHED else "")]
    if run_mode:
        lines.append((clip(card.status_line(), inner), card.style))
    if marker_row:
        lines.append((clip(ASSISTANT_MARKER, inner) if card.assistant else "", "dim italic"))
    return lines


STATUS_ROOM = len("▶ running 9× 9m59s")
"""Room kept for a status line in a run, so boxes do not change width from one live frame to the next."""


def natural_width(all_cards: list[Card], run_mode: bool) -> int:
    need = max((max(len(c.title) + 1 + len(c.type), len(c.status_line())) for c in all_cards), default=0)
    if run_mode:
        need = max(need, STATUS_ROOM)
    if any(c.assistant for c in all_cards):
        need = max(need, len(ASSISTANT_MARKER))
    return max(MIN_CARD, min(MAX_CARD, need + 4))


@dataclass
class GraphDrawing:
    """Rendered graph lines and the rows of the current node (so a bounded frame can keep it in view)."""

    lines: list[Text]
    focus: tuple[int, int] | None = None
    selected: tuple[int, int] | None = None
    """The rows of the selected node, when one was asked for (the viewer scrolls to them)."""


def draw_graph(
    snapshot: Mapping[str, Any],
    state: RunState | None,
    now: datetime | None,
    width: int,
    selected: str | None = None,
) -> GraphDrawing:
    """The layered drawing when it fits ``width``, else the vertical list; ``selected`` marks one node."""
    all_cards = [replace(c, selected=True) if c.id == selected else c for c in cards(snapshot, state, now)]
    if not all_cards:
        return GraphDrawing([Text("No nodes in this workflow.", style="dim")])
    run_mode = state is not None
    marker_row = any(c.assistant for c in all_cards)
    height = 3 + run_mode + marker_row
    by_id = {c.id: c for c in all_cards}
    nodes = [START, *by_id, *([END] if any(s.target == END for s in segments(snapshot)) else [])]
    edges = segments(snapshot)
    card_width = natural_width(all_cards, run_mode)
    while card_width >= MIN_CARD:
        layout = layout_graph(nodes, edges, card_width, height, width)
        if layout is not None:
            return _paint(layout, by_id, run_mode, marker_row)
        card_width -= 2
    return _as_list(nodes, edges, by_id, width, run_mode, marker_row)


def _paint(layout: Layout, by_id: dict[str, Card], run_mode: bool, marker_row: bool) -> GraphDrawing:
    canvas = Canvas(layout.width, layout.height)
    labels = route(layout, canvas)
    exits = {seg.source for seg in layout.segments} | {seg.source for seg in layout.back}
    focus = picked = None
    for item in layout.items.values():
        y = layout.rank_y[item.rank]
        if item.kind == "start":
            canvas.text(item.x, y, START_LABEL, item.width, "bold")
        elif item.kind == "end":
            canvas.text(item.x, y, END_LABEL, item.width, "bold")
        elif item.kind == "node":
            card = by_id[item.id]
            h = layout.rank_h[item.rank]
            canvas.box(item.x, y, item.width, h, card.style, heavy=card.current)
            for row, (text, style) in enumerate(_content(card, item.width - 4, run_mode, marker_row)):
                canvas.text(item.x + 2, y + 1 + row, text, item.width - 4, style)
            if item.id in exits:
                canvas.put(item.anchor, y + h - 1, "┳" if card.current else "┬", card.style)
            if card.current:
                focus = layout.node_rows(item.id)
            if card.selected:
                picked = layout.node_rows(item.id)
    for target, names in labels.items():
        _label(canvas, layout, target, ", ".join(dict.fromkeys(names)))
    return GraphDrawing(canvas.rows(), focus, picked)


def _label(canvas: Canvas, layout: Layout, target: str, text: str) -> None:
    """Write a branch label after the target's arrow, in the free cells only."""
    item = layout.items[target]
    arrow_row = layout.channels[item.rank][2]
    x = item.anchor + 2
    room = 0
    while canvas.inside(x + room, arrow_row) and canvas.chars[arrow_row][x + room] == " ":
        room += 1
    if room >= 2:
        canvas.text(x, arrow_row, clip(text, room - 1), room - 1, "italic")


def _as_list(
    nodes: list[str],
    edges: list[Segment],
    by_id: dict[str, Card],
    width: int,
    run_mode: bool,
    marker_row: bool,
) -> GraphDrawing:
    """Cards stacked in rank order, each followed by its edges (``→`` forward, ``↺`` a loop back)."""
    ordered, back = list_order(nodes, edges)
    lines: list[Text] = [Text(START_LABEL, style="bold")]
    focus = picked = None
    box_width = min(width, max(MIN_CARD, natural_width(list(by_id.values()), run_mode)) + 8)
    for node in ordered:
        if node in (START, END):
            continue
        card = by_id[node]
        if card.current:
            focus = (len(lines), len(lines) + 2 + run_mode + marker_row)
        if card.selected:
            picked = (len(lines), len(lines) + 2 + run_mode + marker_row)
        lines.extend(_list_card(card, box_width, run_mode, marker_row))
        outgoing = [seg for seg in edges if seg.source == node]
        for index, seg in enumerate(outgoing):
            branch = "└" if index == len(outgoing) - 1 else "├"
            arrow = "↺" if (seg.source, seg.target) in back else "→"
            target = END_LABEL if seg.target == END else node_label(seg.target)
            line = Text(f"  {branch}{arrow} ", style="dim") + Text(target)
            if seg.label:
                line.append(f"  [{seg.label}]", style="italic")
            lines.append(line)
    return GraphDrawing(lines, focus, picked)


def _list_card(card: Card, box_width: int, run_mode: bool, marker_row: bool) -> Iterator[Text]:
    inner = box_width - 4
    if inner < 4:
        yield Text(f"{card.title} {card.status_line()}".strip(), style=card.style)
        return
    canvas = Canvas(box_width, 2 + 1 + run_mode + marker_row)
    canvas.box(0, 0, box_width, canvas.height, card.style, heavy=card.current)
    for row, (text, style) in enumerate(_content(card, inner, run_mode, marker_row)):
        canvas.text(2, 1 + row, text, inner, style)
    yield from canvas.rows()


def route(layout: Layout, canvas: Canvas) -> dict[str, list[str]]:
    """Draw every edge; returns the labels arriving at each target, for the arrow rows."""
    items = layout.items
    labels: dict[str, list[str]] = defaultdict(list)
    arriving: set[str] = set()
    by_source: dict[str, list[Segment]] = defaultdict(list)
    for seg in layout.segments:
        by_source[seg.source].append(seg)
    for source, segs in by_source.items():
        r = items[segs[0].target].rank
        top, lanes, arrow = layout.channels[r]
        x = items[source].anchor
        lane_y = top + lanes[(source, -1)] if (source, -1) in lanes else arrow
        canvas.vertical(x, top, lane_y)
        canvas.join(x, top, 1)
        for seg in segs:
            tx = items[seg.target].anchor
            canvas.horizontal(lane_y, x, tx)
            canvas.vertical(tx, lane_y, arrow)
            _arrive(canvas, layout, seg.target, arrow, arriving)
            if seg.label:
                labels[seg.target].append(seg.label)
    for index, seg in enumerate(layout.back):
        loop = layout.loop_x[index]
        leave_top, leave_lanes, _ = layout.channels[items[seg.source].rank + 1]
        leave_y = leave_top + leave_lanes[(seg.source, 2 * index)]
        arrive_top, arrive_lanes, arrow = layout.channels[items[seg.target].rank]
        arrive_y = arrive_top + arrive_lanes[(seg.target, 2 * index + 1)]
        x, tx = items[seg.source].anchor, items[seg.target].anchor
        canvas.vertical(x, leave_top, leave_y)
        canvas.join(x, leave_top, 1)
        canvas.horizontal(leave_y, x, loop)
        canvas.vertical(loop, arrive_y, leave_y)
        canvas.horizontal(arrive_y, tx, loop)
        canvas.vertical(tx, arrive_y, arrow)
        if leave_y - arrive_y >= 3:
            canvas.put(loop, (leave_y + arrive_y) // 2, "▲", "dim")
        _arrive(canvas, layout, seg.target, arrow, arriving)
        labels[seg.target].append(seg.label or "loop")
    for item in items.values():
        if item.kind == "dummy":
            top = layout.rank_y[item.rank]
            canvas.vertical(item.x, top - 1, top + layout.rank_h[item.rank])
    return labels


def _arrive(canvas: Canvas, layout: Layout, target: str, arrow: int, arriving: set[str]) -> None:
    item = layout.items[target]
    if item.kind == "dummy":
        canvas.vertical(item.x, arrow - 1, arrow)
        return
    canvas.put(item.anchor, arrow, "▼", "dim")
    arriving.add(target)


class GraphView(View):
    """The graph of a definition snapshot, with run status when a state is given."""

    def __init__(
        self, snapshot: Mapping[str, Any], state: RunState | None = None, now: datetime | None = None
    ):
        self.snapshot = snapshot
        self.state = state
        self.now = now

    def drawing(self, width: int) -> GraphDrawing:
        return draw_graph(self.snapshot, self.state, self.now, width)

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        yield from self.drawing(width).lines


def graph_view(
    snapshot: Mapping[str, Any], state: RunState | None = None, now: datetime | None = None
) -> GraphView:
    return GraphView(snapshot, state, now)
