"""The run screen: the graph beside a pane that switches between steps, conversation, updates, progress, trace
and state, a position bar for time travel, and live following.

Every pane is drawn by a pure view of :mod:`piw.views` from the state at the chosen seq (``None`` means the end,
followed live while the run runs). Picking a node in the graph filters the other panes to that node; the steps
cursor filters them to that node and attempt; Enter on a step opens its card. Following a live run happens on a
worker thread through :mod:`piw.views.follow` (watchfiles, polling fallback); the screen is redrawn from the
main thread only, and panes keep their cursor and scroll position, so nothing jumps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from piw.app.pane import LinesPane
from piw.app.reader import RunReader
from piw.app.run_panes import Position, lineage_budget_line, notification_id, pane_source, position_line
from piw.app.sources import StepsSource, TextSource
from piw.app.step_screen import StepScreen
from piw.store.pg.place import following_mirror
from piw.store.session import SessionEntry
from piw.views.base import safe
from piw.views.follow import file_changes
from piw.views.frame import summary_lines
from piw.views.graph import draw_graph
from piw.views.phases import script_phases

SYNC_REPLAY = 50_000
"""Replays longer than this many events run on a worker thread, so keys keep working."""
TABS = ("steps", "conversation", "updates", "progress", "trace", "state")


class GraphPane(LinesPane):
    """The graph; the cursor keys pick a node (in the definition's order) instead of a line."""

    def __init__(self, nodes: list[str], id: str | None = None) -> None:
        super().__init__(cursor=False, id=id)
        self.nodes = nodes
        self.picked: int | None = None
        self.drawn_width = 0

    def action_cursor(self, delta: int) -> None:
        if not self.nodes:
            return
        self.picked = (
            (0 if delta > 0 else len(self.nodes) - 1)
            if self.picked is None
            else (self.picked + delta) % len(self.nodes)
        )
        self.post_message(self.Moved(self, self.picked))

    def action_activate(self) -> None:
        if self.picked is not None:
            self.post_message(self.Activated(self, self.picked))

    def on_resize(self, event: events.Resize) -> None:
        super().on_resize(event)
        screen = self.screen
        if isinstance(screen, RunScreen) and event.size.width != self.drawn_width:
            screen._draw_graph()


class RunScreen(Screen[None]):
    """One run, navigable (see the module docstring)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "tab('steps')", "Steps", show=False),
        Binding("2", "tab('conversation')", "Conversation", show=False),
        Binding("3", "tab('updates')", "Updates", show=False),
        Binding("4", "tab('progress')", "Progress", show=False),
        Binding("5", "tab('trace')", "Trace", show=False),
        Binding("6", "tab('state')", "State", show=False),
        Binding("comma", "travel(-1)", "Back 1 event"),
        Binding("full_stop", "travel(1)", "Forward 1"),
        Binding("left_square_bracket", "travel_far(-1)", "Back 5%", show=False),
        Binding("right_square_bracket", "travel_far(1)", "Forward 5%", show=False),
        Binding("l", "live", "Live"),
        Binding("colon", "ask('seq')", "Go to seq", show=False),
        Binding("x", "expand", "Expand cards", show=False),
        Binding("slash", "ask('search')", "Search"),
        Binding("n", "next_match", "Next match", show=False),
        Binding("escape", "back", "Back"),
    ]
    DEFAULT_CSS = """
    RunScreen #summary { height: auto; max-height: 4; padding: 0 1; }
    RunScreen #body { height: 1fr; }
    RunScreen #graph { width: 2fr; min-width: 20; border-right: solid $panel; }
    RunScreen #tabs { width: 3fr; }
    RunScreen #position { height: 1; padding: 0 1; }
    RunScreen #ask { dock: bottom; display: none; }
    RunScreen #ask.-shown { display: block; }
    RunScreen TabPane { padding: 0; }
    """

    def __init__(
        self,
        reader: RunReader,
        *,
        clock: Callable[[], datetime] | None = None,
        force_polling: bool = False,
        follow: bool = True,
    ) -> None:
        super().__init__()
        self.reader = reader
        self.clock = clock
        self.force_polling = force_polling
        self.follow = follow
        self.at: int | None = None
        self.node: str | None = None
        """The node picked in the graph (filters every other pane)."""
        self.attempt: tuple[str, str] | None = None
        """``(node, attempt)`` of the steps cursor (filters the panes other than steps)."""
        self.expanded = False
        self.live_writer: bool | None = reader.live()
        self.search = ""
        self.asking = ""
        self._stop = threading.Event()
        self._dirty: set[str] = set(TABS)
        self._state = reader.state
        self._now = reader.now_at(None, clock)
        self._steps: StepsSource | None = None
        self.seen_notifications: set[str] = set()
        self.notified: list[str] = []
        """The notifications shown as toasts, in order (a toast goes away; this does not)."""
        self.indexed_drawn = False
        """Set once the screen has been redrawn with the whole trace read (tests and the bench wait for it)."""
        self.replaying: int | None = None
        """The seq a worker is replaying to, while it does."""

    # ---- layout ------------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="summary")
        with Horizontal(id="body"):
            yield GraphPane(list(self.reader.snapshot.get("nodes") or {}), id="graph")
            with TabbedContent(id="tabs", initial="tab-steps"):
                for name in TABS:
                    with TabPane(name.title(), id=f"tab-{name}"):
                        yield LinesPane(id=f"pane-{name}")
        yield Static(id="position")
        yield Input(id="ask")
        yield Footer()

    def pane(self, name: str) -> LinesPane:
        return self.query_one(f"#pane-{name}", LinesPane)

    @property
    def graph(self) -> GraphPane:
        return self.query_one("#graph", GraphPane)

    @property
    def active(self) -> str:
        tab = self.query_one("#tabs", TabbedContent).active or "tab-steps"
        return tab.removeprefix("tab-")

    def on_mount(self) -> None:
        self.seen_notifications = {ident for e in self._entries_now() if (ident := notification_id(e))}
        self.redraw()
        self.pane("steps").focus()
        if self.reader.indexed.is_set():
            self._indexed()
        else:  # after the first frame is on screen, so reading the trace never delays it
            self.call_after_refresh(
                lambda: self.run_worker(self._index, thread=True, group="index", exit_on_error=False)
            )
        self.set_interval(1.0, self._tick)

    def on_unmount(self) -> None:
        self._stop.set()

    # ---- the index and the live tail (worker threads) --------------------------------------------------

    def _index(self) -> None:
        self.reader.index(self._stop)
        if not self._stop.is_set():
            self.app.call_from_thread(self._indexed)

    def _indexed(self) -> None:
        self.redraw()
        self.indexed_drawn = True
        if self.follow and self.reader.state.status == "running":
            self.run_worker(self._follow, thread=True, group="follow", exit_on_error=False)

    def _follow(self) -> None:
        with following_mirror(self.reader.bundle.path):  # (database mode: the mirror kept current)
            for _changed in file_changes(self.reader.bundle, self._stop, force_polling=self.force_polling):
                if self._stop.is_set():
                    return
                events, entries = self.reader.poll()
                streamed = self.reader.poll_stream()
                live = self.reader.live()
                self.app.call_from_thread(self._on_live, bool(events or entries), entries, live, streamed)
                if self.reader.state.is_terminal:
                    return

    def _on_live(
        self, changed: bool, entries: list[SessionEntry], live: bool | None, streamed: bool = False
    ) -> None:
        for entry in entries:
            ident = notification_id(entry)
            if ident and ident not in self.seen_notifications:
                self.seen_notifications.add(ident)
                text = safe(str(entry.message.get("content", ""))).plain
                self.notified.append(text)
                self.app.notify(text[:300], title="notification", markup=False)
        moved = live != self.live_writer
        self.live_writer = live
        if (changed and self.at is None) or moved:
            self.redraw()
        elif changed:
            self._draw_position()
        elif streamed and self.at is None:
            self._draw_summary()  # only the streaming reply moved

    def _tick(self) -> None:
        """Clocks move once a second (elapsed times, ETAs); nothing is read or written."""
        if self.at is None and not self._state.is_terminal:
            self._now = self.reader.now_at(None, self.clock)
            self._draw_summary()
            if self.active in ("progress", "steps", "state"):
                self._draw_pane(self.active)
        elif not self.reader.indexed.is_set():
            self._draw_position()

    # ---- drawing ------------------------------------------------------------------------------------------

    @property
    def upto(self) -> int:
        return self.reader.last_seq if self.at is None else self.at

    def redraw(self) -> None:
        """Recompute the state at the current position and redraw what is visible."""
        if self.replaying is not None:
            self._draw_position()
            return
        ready = self.reader.indexed.is_set()
        self._state = self.reader.state_at(self.at) if ready else self.reader.state
        self._now = self.reader.now_at(self.at if ready else None, self.clock)
        self._dirty = set(TABS)
        self._draw_summary()
        self._draw_graph()
        self._draw_position()
        self._draw_pane(self.active)

    def _draw_summary(self) -> None:
        state = self._state
        if not state.run_id:
            lines = [Text(f"Reading {self.reader.run_id}…", style="bold")]
        else:
            lines = summary_lines(state, self._now, self.live_writer if self.at is None else None)
        notice = self.reader.notice
        if notice:
            lines.insert(1, safe(f"⚠ {notice}", "yellow"))
        extra = lineage_budget_line(state, self.reader.forks)
        if extra is not None:
            lines.append(extra)
        reply = self.reader.live_reply() if self.at is None else None
        if reply is not None:  # the agent step's reply as it streams (docs/views.md, "Watching live steps")
            tail = " ".join(reply.text.split())[-200:]
            lines.insert(min(2, len(lines)), Text("  ✎ ", style="cyan") + safe(tail + " ▍", "dim"))
        self.query_one("#summary", Static).update(Text("\n").join(lines[:4]))

    def _draw_graph(self) -> None:
        pane = self.graph
        picked = self.node
        width = max(1, pane.scrollable_content_region.width or 40)
        pane.drawn_width = pane.size.width
        drawing = draw_graph(self.reader.snapshot, self._state, self._now, width, selected=picked)
        pane.set_source(TextSource(drawing.lines or [Text("No graph.")]))
        rows = drawing.selected or drawing.focus
        if rows is not None:
            pane.show_rows(*rows)

    def _position(self) -> Position:
        return Position(
            state=self._state,
            now=self._now,
            at=self.at,
            upto=self.upto,
            node=self.node,
            attempt=self.attempt,
            live_writer=self.live_writer,
            expanded=self.expanded,
        )

    def _draw_position(self) -> None:
        line = position_line(self.reader, self._position(), self.replaying, self.active, self.app.console)
        self.query_one("#position", Static).update(line)

    def _draw_pane(self, name: str) -> None:
        self._dirty.discard(name)
        source = pane_source(name, self.reader, self._position())
        if isinstance(source, StepsSource):
            self._steps = source
        self.pane(name).set_source(source)

    def _entries_now(self) -> Iterable[SessionEntry]:
        return self.reader.entries_at(None)

    # ---- events from the panes -------------------------------------------------------------------------

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        name = self.active
        if name in self._dirty:
            self._draw_pane(name)
        self._draw_position()

    def on_lines_pane_moved(self, event: LinesPane.Moved) -> None:
        if isinstance(event.pane, GraphPane):
            self.node = event.pane.nodes[event.row]
            self.attempt = None
            self._redraw_filtered(include_steps=True)
        elif event.pane.id == "pane-steps" and self._steps is not None:
            _, step = self._steps.step(event.row)
            current = self._state.current
            if step is not None:
                self.attempt = (step.node_id, step.attempt_id)
            elif current is not None:
                self.attempt = (current.node_id, current.attempt_id)
            self._redraw_filtered(include_steps=False)

    def _redraw_filtered(self, *, include_steps: bool) -> None:
        self._dirty = set(TABS) if include_steps else self._dirty | (set(TABS) - {"steps"})
        self._draw_graph()
        self._draw_position()
        if self.active in self._dirty:
            self._draw_pane(self.active)

    def on_lines_pane_activated(self, event: LinesPane.Activated) -> None:
        if event.pane.id == "pane-steps" and self._steps is not None:
            number, step = self._steps.step(event.row)
            record: Any = step or self._state.current
            if record is not None:
                entries = self.reader.entries_at(self.at if self.reader.indexed.is_set() else None)
                phases = script_phases(self._state, record.attempt_id)  # a script's leaves per phase
                self.app.push_screen(StepScreen(record, entries, number, phases))
        elif isinstance(event.pane, GraphPane):
            self.action_tab("steps")

    # ---- actions -----------------------------------------------------------------------------------------

    def action_tab(self, name: str) -> None:
        self.query_one("#tabs", TabbedContent).active = f"tab-{name}"
        self.pane(name).focus()

    def travel_to(self, seq: int | None) -> None:
        """Show the run as it was after event ``seq`` (``None``: the end, live)."""
        if not self.reader.indexed.is_set():
            self.app.notify("Still reading the trace; time travel starts when it is read.", markup=False)
            return
        last = self.reader.last_seq
        if seq is not None:
            seq = max(1, min(seq, last))
            if seq >= last:
                seq = None
        self.at = seq
        if self.reader.replay_cost(seq) > SYNC_REPLAY:
            # A first jump far back folds many events: do it on a worker (it leaves checkpoints behind, so
            # the next jumps nearby are quick) and redraw when it is done.
            self.replaying = seq
            self._draw_position()
            self.run_worker(lambda: self._replay(seq), thread=True, group="replay", exclusive=True)
            return
        self.redraw()

    def _replay(self, seq: int | None) -> None:
        self.reader.state_at(seq)
        self.app.call_from_thread(self._replayed, seq)

    def _replayed(self, seq: int | None) -> None:
        if self.replaying == seq:
            self.replaying = None
        if self.at == seq:
            self.redraw()

    def action_travel(self, delta: int) -> None:
        self.travel_to(self.upto + delta)

    def action_travel_far(self, direction: int) -> None:
        self.travel_to(self.upto + direction * max(10, self.reader.last_seq // 20))

    def action_live(self) -> None:
        self.travel_to(None)

    def action_expand(self) -> None:
        self.expanded = not self.expanded
        self._dirty.add("conversation")
        if self.active == "conversation":
            self._draw_pane("conversation")

    def action_ask(self, what: str) -> None:
        field = self.query_one("#ask", Input)
        self.asking = what
        field.placeholder = "search this pane (Enter finds, Esc cancels)" if what == "search" else "go to seq"
        field.value = ""
        field.add_class("-shown")
        field.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        field = self.query_one("#ask", Input)
        field.remove_class("-shown")
        value = event.value.strip()
        if self.asking == "seq":
            self.pane(self.active).focus()
            if value.isdigit():
                self.travel_to(int(value))
            elif value:
                self.app.notify(
                    f"Not a sequence number: {safe(value).plain}", markup=False, severity="warning"
                )
            return
        self.search = value
        self.pane(self.active).focus()
        self.action_next_match(from_cursor=True)

    def action_next_match(self, from_cursor: bool = False) -> None:
        if not self.search:
            return
        pane = self.focused if isinstance(self.focused, LinesPane) else self.pane(self.active)
        start = pane.cursor if from_cursor else pane.cursor + 1
        row = pane.find(self.search, start)
        if row is None:
            self.app.notify(f"No match for {safe(self.search).plain!r}.", markup=False, severity="warning")
        else:
            pane.move_to(row)

    def action_back(self) -> None:
        field = self.query_one("#ask", Input)
        if field.has_class("-shown"):
            field.remove_class("-shown")
            self.pane(self.active).focus()
        elif self.node is not None or self.attempt is not None:
            self.node, self.attempt = None, None
            self.graph.picked = None
            self._redraw_filtered(include_steps=True)
        elif len(self.app.screen_stack) > 2:
            self.app.pop_screen()
