"""A layered layout for workflow graphs: ranks, ordering, columns, and the rows of the lanes edges run in.

A small Sugiyama-style pipeline, kept deliberately simple because workflow graphs are small and mostly linear:

1. Loops are found by a depth-first walk from the start; those *back edges* are drawn separately, up a
   column on the right, so the rest is a DAG.
2. Each node's rank is its longest path from the start; edges that skip ranks get one-cell *dummy* items in
   the ranks between, so every forward segment joins adjacent ranks and nothing is drawn across a box.
3. Items in a rank are ordered by the barycentre of their neighbours, then placed under their predecessors
   (a fan-out centred as a block) and their parents over their successors.
4. Between two ranks, each fan-out gets its own *lane* row (lanes whose spans do not touch share a row), then
   one arrow row carries ``▼`` and the branch labels.

:func:`layout_graph` returns ``None`` when the widest rank does not fit the width; the caller then falls back
to a vertical list, which always fits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

START, END = "\x00start", "\x00end"
START_LABEL, END_LABEL = "● start", "◉ end"
GAP = 2
Span = tuple[tuple[str, int], int, int, frozenset[int]]
"""A horizontal leg: route key, left and right columns, and the columns where it drops into a target."""


@dataclass
class Item:
    """A box, a start/end marker, or a dummy (one cell of a long edge) in one rank."""

    id: str
    kind: str
    width: int
    rank: int = 0
    x: int = 0
    order: float = 0.0

    @property
    def anchor(self) -> int:
        """The column edges leave from and arrive at."""
        return self.x + self.width // 2 if self.kind == "node" else self.x


@dataclass(frozen=True)
class Segment:
    source: str
    target: str
    label: str | None


@dataclass
class Layout:
    """Placed items, rows and routes; :meth:`draw` paints it on a canvas."""

    items: dict[str, Item]
    ranks: list[list[Item]]
    segments: list[Segment]
    back: list[Segment]
    node_height: int
    width: int
    rank_y: list[int] = field(default_factory=list)
    rank_h: list[int] = field(default_factory=list)
    channels: dict[int, tuple[int, dict[tuple[str, int], int], int]] = field(default_factory=dict)
    """rank → (first row, lane per route key, arrow row) of the channel above that rank."""
    loop_x: dict[int, int] = field(default_factory=dict)
    height: int = 0

    def node_rows(self, node_id: str) -> tuple[int, int]:
        item = self.items[node_id]
        top = self.rank_y[item.rank]
        return top, top + self.rank_h[item.rank] - 1


def _back_edges(
    order: Sequence[str], succ: dict[str, list[str]]
) -> tuple[set[tuple[str, str]], dict[str, int]]:
    """Edges into a node still on the depth-first stack, and the discovery index of every node."""
    state: dict[str, int] = {}
    found: dict[str, int] = {}
    back: set[tuple[str, str]] = set()
    for root in order:
        if root in state:
            continue
        state[root], found[root] = 1, len(found)
        stack = [(root, iter(succ[root]))]
        while stack:
            node, targets = stack[-1]
            nxt = next(targets, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif nxt not in state:
                state[nxt], found[nxt] = 1, len(found)
                stack.append((nxt, iter(succ[nxt])))
            elif state[nxt] == 1:
                back.add((node, nxt))
    return back, found


def _ranks(nodes: Sequence[str], forward: list[Segment]) -> dict[str, int]:
    """Longest path from the start over forward edges (Kahn's order); ``END`` sits below everything."""
    preds: dict[str, list[str]] = defaultdict(list)
    indegree = dict.fromkeys(nodes, 0)
    for seg in forward:
        preds[seg.target].append(seg.source)
        indegree[seg.target] += 1
    succ: dict[str, list[str]] = defaultdict(list)
    for seg in forward:
        succ[seg.source].append(seg.target)
    rank: dict[str, int] = {}
    ready = [n for n in nodes if indegree[n] == 0]
    while ready:
        node = ready.pop(0)
        rank[node] = max((rank[p] + 1 for p in preds[node]), default=0 if node == START else 1)
        for nxt in succ[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    if END in rank:
        rank[END] = max((r for n, r in rank.items() if n != END), default=0) + 1
    return rank


def list_order(nodes: Sequence[str], edges: Sequence[Segment]) -> tuple[list[str], set[tuple[str, str]]]:
    """Nodes by rank then discovery (the vertical list fallback), and the loop edges."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for seg in edges:
        succ[seg.source].append(seg.target)
    back, found = _back_edges([START, *nodes], succ)
    rank = _ranks(nodes, [seg for seg in edges if (seg.source, seg.target) not in back])
    return sorted(nodes, key=lambda n: (rank[n], found.get(n, 0))), back


def layout_graph(
    nodes: Sequence[str],
    edges: Sequence[Segment],
    node_width: int,
    node_height: int,
    width: int,
) -> Layout | None:
    """Place ``nodes`` (which include ``START`` and maybe ``END``) for a canvas ``width`` wide, or
    ``None``."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for seg in edges:
        succ[seg.source].append(seg.target)
    back_pairs, found = _back_edges([START, *nodes], succ)
    back = [seg for seg in edges if (seg.source, seg.target) in back_pairs]
    forward = [seg for seg in edges if (seg.source, seg.target) not in back_pairs]
    rank = _ranks(nodes, forward)
    items = {n: _item(n, node_width, rank[n], found.get(n, 0)) for n in nodes}
    segments = _split_long(forward, items)
    ranks = _order(items, segments)
    margin = 2 * len(back) + 1 if back else 0
    usable = width - margin
    if max(sum(i.width for i in rank_items) + GAP * (len(rank_items) - 1) for rank_items in ranks) > usable:
        return None
    _place(ranks, segments, items, usable)
    layout = Layout(items, ranks, segments, back, node_height, width)
    right = max(i.x + i.width for i in items.values())
    layout.loop_x = {index: right + 1 + 2 * index for index in range(len(back))}
    _rows(layout)
    return layout


def _item(node: str, node_width: int, rank: int, found: int) -> Item:
    if node == START:
        return Item(node, "start", len(START_LABEL), rank, order=found)
    if node == END:
        return Item(node, "end", len(END_LABEL), rank, order=found)
    return Item(node, "node", node_width, rank, order=found)


def _split_long(forward: list[Segment], items: dict[str, Item]) -> list[Segment]:
    """Forward edges cut into rank-to-rank segments through dummy items; the label stays on the last one."""
    out: list[Segment] = []
    for number, seg in enumerate(forward):
        source = items[seg.source]
        target = items[seg.target]
        previous = seg.source
        for rank in range(source.rank + 1, target.rank):
            dummy = f"\x00d{number}.{rank}"
            items[dummy] = Item(dummy, "dummy", 1, rank, order=source.order + 0.5)
            out.append(Segment(previous, dummy, None))
            previous = dummy
        out.append(Segment(previous, seg.target, seg.label))
    return out


def _order(items: dict[str, Item], segments: list[Segment]) -> list[list[Item]]:
    """Ranks ordered by discovery, then a few barycentre sweeps down and up to reduce crossings."""
    count = max(item.rank for item in items.values()) + 1
    ranks: list[list[Item]] = [[] for _ in range(count)]
    for item in sorted(items.values(), key=lambda i: i.order):
        ranks[item.rank].append(item)
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for seg in segments:
        preds[seg.target].append(seg.source)
        succs[seg.source].append(seg.target)
    for _ in range(3):
        for sweep, neighbours in ((range(1, count), preds), (range(count - 2, -1, -1), succs)):
            for r in sweep:
                position = {
                    item.id: i for i, item in enumerate(ranks[r - 1 if neighbours is preds else r + 1])
                }
                ranks[r].sort(key=_barycentre(neighbours, position))
    return ranks


def _barycentre(neighbours: dict[str, list[str]], position: dict[str, int]) -> Callable[[Item], float]:
    def key(item: Item) -> float:
        found = [position[n] for n in neighbours[item.id] if n in position]
        return sum(found) / len(found) if found else item.order

    return key


def _place(ranks: list[list[Item]], segments: list[Segment], items: dict[str, Item], usable: int) -> None:
    """Centre items under their predecessors, then parents over their successors, then once more downwards.

    Each pass pushes right then left to avoid overlap and stay inside ``usable`` columns; finally the drawing
    is shifted to start at column 0.
    """
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for seg in segments:
        preds[seg.target].append(seg.source)
        succs[seg.source].append(seg.target)
    for rank_items in ranks:
        _pack(rank_items, preds, items, usable)
    for rank_items in reversed(ranks[:-1]):
        _pack(rank_items, succs, items, usable)
    for rank_items in ranks[1:]:
        _pack(rank_items, preds, items, usable)
    for _ in range(2):
        for rank_items in ranks:
            _snap(rank_items, preds, succs, items, usable)
    shift = min(item.x for item in items.values())
    for item in items.values():
        item.x -= shift


def _snap(
    rank_items: list[Item],
    preds: dict[str, list[str]],
    succs: dict[str, list[str]],
    items: dict[str, Item],
    usable: int,
) -> None:
    """Nudge an item a column or two when that lines it up with a neighbour: straight edges read better."""
    for index, item in enumerate(rank_items):
        near = [items[n].anchor for n in (*preds[item.id], *succs[item.id])]
        if not near:
            continue
        delta = min((anchor - item.anchor for anchor in near), key=abs)
        if delta == 0 or abs(delta) > 2:
            continue
        left = rank_items[index - 1].x + rank_items[index - 1].width + GAP if index > 0 else 0
        right = rank_items[index + 1].x - GAP if index + 1 < len(rank_items) else usable
        if left <= item.x + delta and item.x + delta + item.width <= right:
            item.x += delta


def _pack(
    rank_items: list[Item], neighbours: dict[str, list[str]], items: dict[str, Item], usable: int
) -> None:
    """Place one rank: runs of items that want the same centre (a fan-out) are centred there as a block."""
    wanted: list[float] = []
    for item in rank_items:
        anchors = [items[n].anchor for n in neighbours[item.id]]
        wanted.append(
            sum(anchors) / len(anchors) if anchors else item.x + item.width / 2 if item.x else usable / 2
        )
    previous_end = -GAP
    start = 0
    while start < len(rank_items):
        end = start
        while end + 1 < len(rank_items) and wanted[end + 1] == wanted[start]:
            end += 1
        block = rank_items[start : end + 1]
        size = sum(item.width for item in block) + GAP * (len(block) - 1)
        offset = _block_offset(block, size)
        x = max(round(wanted[start] - offset), previous_end + GAP, 0)
        for item in block:
            item.x = x
            x += item.width + GAP
        previous_end = x - GAP
        start = end + 1
    limit = usable
    for item in reversed(rank_items):
        item.x = min(item.x, limit - item.width)
        limit = item.x - GAP


def _block_offset(block: list[Item], size: int) -> float:
    """Where a block's wanted centre falls: on its only box's anchor (dummies beside it), else the middle."""
    boxes = [i for i, item in enumerate(block) if item.kind != "dummy"]
    if len(block) == 1:
        return block[0].anchor - block[0].x
    if len(boxes) != 1:
        return size / 2
    before = block[: boxes[0]]
    return sum(item.width + GAP for item in before) + block[boxes[0]].anchor - block[boxes[0]].x


def _lanes(spans: list[Span]) -> dict[tuple[str, int], int]:
    """Greedy interval colouring: legs that do not touch share a lane row, and so do legs that meet only where
    both drop into the same target (a fan-in then reads as one merge)."""
    rows: list[list[Span]] = []
    lanes: dict[tuple[str, int], int] = {}
    for span in sorted(spans, key=lambda s: (s[1], s[2])):
        for lane, placed in enumerate(rows):
            if all(_apart(span, other) for other in placed):
                placed.append(span)
                lanes[span[0]] = lane
                break
        else:
            lanes[span[0]] = len(rows)
            rows.append([span])
    return lanes


def _apart(a: Span, b: Span) -> bool:
    if a[2] + 1 < b[1] or b[2] + 1 < a[1]:
        return True
    touch = {a[2]} if a[2] == b[1] else {a[1]} if a[1] == b[2] else set()
    return bool(touch) and touch <= a[3] and touch <= b[3]


def _rows(layout: Layout) -> None:
    """Row of every rank and channel; a channel is its lanes plus one arrow row."""
    items = layout.items
    y = 0
    for r, rank_items in enumerate(layout.ranks):
        if r > 0:
            spans = _channel_spans(layout, r)
            lanes = _lanes(spans)
            depth = max(lanes.values(), default=-1) + 1
            layout.channels[r] = (y, lanes, y + depth)
            y += depth + 1
        height = layout.node_height if any(item.kind == "node" for item in rank_items) else 1
        layout.rank_y.append(y)
        layout.rank_h.append(height)
        y += height
    last = len(layout.ranks)
    if any(items[seg.source].rank == last - 1 for seg in layout.back):
        spans = _channel_spans(layout, last)
        lanes = _lanes(spans)
        depth = max(lanes.values(), default=0) + 1
        layout.channels[last] = (y, lanes, y + depth)
        y += depth
    layout.height = y


def _channel_spans(layout: Layout, r: int) -> list[Span]:
    """Legs needing a lane above rank ``r``: fan-outs, and the horizontal legs of loops leaving or
    arriving."""
    items = layout.items
    spans: list[Span] = []
    targets: dict[str, list[int]] = defaultdict(list)
    for seg in layout.segments:
        if items[seg.target].rank == r:
            targets[seg.source].append(items[seg.target].anchor)
    for source, xs in targets.items():
        x = items[source].anchor
        if set(xs) != {x}:
            spans.append(((source, -1), min(x, *xs), max(x, *xs), frozenset(xs)))
    for index, seg in enumerate(layout.back):
        loop = layout.loop_x[index]
        if items[seg.source].rank == r - 1:
            spans.append(((seg.source, 2 * index), items[seg.source].anchor, loop, frozenset()))
        if items[seg.target].rank == r:
            anchor = items[seg.target].anchor
            spans.append(((seg.target, 2 * index + 1), anchor, loop, frozenset({anchor})))
    return spans
