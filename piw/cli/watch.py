"""``piw watch``: a live, read-only view of one run that follows its ``trace.ndjson`` as it grows.

File events come from ``watchfiles`` (coalesced over ~50 ms, with a once-a-second wake-up so clocks tick), and
a plain stat-polling loop takes over when file notifications are unavailable. Reading is incremental: the
:class:`~piw.views.source.Tail` keeps its byte offset, buffers a partial last line and starts again from byte
0 when the file shrank (a torn tail repaired on resume), in which case the frame is rebuilt from scratch;
otherwise only the new events are folded (``fold_more``). A running run whose writer is gone is shown as
"possibly interrupted". Watching ends when the run reaches a terminal state, on ``q``, or on Ctrl-C.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from piw.cli.live import StepLog
from piw.errors import RunNotFound
from piw.progress import parse_instant
from piw.store.bundle import Bundle, list_bundles, run_is_live
from piw.store.foldcache import events_of_type, replay
from piw.store.replay import RunState
from piw.views.frame import FrameModel, FrameView
from piw.views.source import session_tail, trace_tail

COALESCE_MS = 50
"""Changes are grouped for at most this long (``debounce``), yielded once 25 ms pass without another one."""
TICK_S = 1.0
POLL_S = 0.05


def newest_run(home: Path) -> str:
    """The id of the most recent run, or ``RunNotFound`` when there is none."""
    for bundle in list_bundles(home):
        return bundle.run_id
    raise RunNotFound(f"No runs in {home / 'runs'}; start one with 'piw run WORKFLOW'.")


class Follower:
    """Keeps a :class:`FrameModel` in step with a bundle's trace and session files."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.trace = trace_tail(bundle)
        self.session = session_tail(bundle)
        self.model = FrameModel(bundle.read_snapshot())
        self.restarts = 0

    @property
    def state(self) -> RunState:
        return self.model.state

    @property
    def notice(self) -> str | None:
        return self.trace.corruption or self.session.corruption

    def _start(self) -> None:
        """The first read: the state from the newest fold checkpoint plus the tail, not a fold of every line.

        The progress tracks still see every progress update of the run (found by a byte search of the folded
        prefix); the trace tail then continues from where the fold stopped, so nothing is read twice.
        """
        replayed = replay(self.bundle.path, self.bundle.run_id)
        self.model.reset(replayed.state)
        self.model.tracks.feed(events_of_type(self.bundle.trace_path, "update_published", replayed.offset))
        self.trace.offset, self.trace.next_seq = replayed.offset, replayed.next_seq

    def poll(self, on_event: Callable[[Any, RunState], None] | None = None) -> bool:
        """Read what was appended since the last call; True when anything changed.

        Both files are taken a chunk at a time (a first read of a long run never holds all its records), and
        a repaired file (shorter than what was read) starts everything again.
        """
        started = self.trace.offset == 0 and on_event is None
        if started:
            self._start()
        changed = self._read(on_event)
        if changed is None:  # repaired
            self.restarts += 1
            self.trace.reset()
            self.session.reset()
            self.model.reset()
            if on_event is None:
                self._start()
            self._read(on_event)
            return True
        return started or changed

    def _read(self, on_event: Callable[[Any, RunState], None] | None) -> bool | None:
        changed = False
        # The trace's size is taken first: every entry an event up to there names is then in the session
        # read below (a session line is durable before the event naming it).
        trace_size = self.trace.size()
        for entries, restarted in self.session.stream():
            if restarted:
                return None
            self.model.add_entries(entries)
            changed = changed or bool(entries)
        for events, restarted in self.trace.stream(trace_size):
            if restarted:
                return None
            if on_event is None:
                self.model.add_events(events)
            else:
                for event in events:
                    self.model.add_events([event])
                    on_event(event, self.model.state)
            changed = changed or bool(events)
        return changed


def _is_followed(path: str, bundle: Bundle) -> bool:
    return Path(path).name in (bundle.trace_path.name, bundle.session_path.name)


def file_changes(bundle: Bundle, stop: threading.Event, *, force_polling: bool = False) -> Iterator[bool]:
    """Yield True after the trace or session changed, False on the once-a-second tick; until ``stop`` is
    set."""
    if not force_polling:
        try:
            import watchfiles

            for changes in watchfiles.watch(
                bundle.path,
                watch_filter=lambda _change, path: _is_followed(path, bundle),
                step=COALESCE_MS // 2,
                debounce=COALESCE_MS,
                rust_timeout=int(TICK_S * 1000),
                yield_on_timeout=True,
                stop_event=stop,
                raise_interrupt=False,
            ):
                yield bool(changes)
            return
        except (ImportError, OSError, RuntimeError):
            pass  # no file notifications here (e.g. an inotify limit): fall back to polling
    yield from _poll_changes(bundle, stop)


def _sizes(bundle: Bundle) -> tuple[int, ...]:
    sizes = []
    for path in (bundle.trace_path, bundle.session_path):
        try:
            sizes.append(os.stat(path).st_size)
        except FileNotFoundError:
            sizes.append(-1)
    return tuple(sizes)


def _poll_changes(bundle: Bundle, stop: threading.Event) -> Iterator[bool]:
    last: tuple[int, ...] | None = (
        None  # the first round always reports, catching anything appended meanwhile
    )
    ticked = time.monotonic()
    while not stop.wait(POLL_S):
        sizes = _sizes(bundle)
        if sizes != last:
            last = sizes
            ticked = time.monotonic()
            yield True
        elif time.monotonic() - ticked >= TICK_S:
            ticked = time.monotonic()
            yield False


class KeyReader:
    """Sets ``stop`` when ``q`` is pressed on an interactive stdin (cbreak mode, restored on close)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self._saved: Any = None
        self._thread: threading.Thread | None = None
        if not sys.stdin.isatty():
            return
        import termios
        import tty

        fd = sys.stdin.fileno()
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        self._thread = threading.Thread(target=self._read, args=(fd,), daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        while not self.stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready and os.read(fd, 1) in (b"q", b"Q"):
                self.stop.set()

    def close(self) -> None:
        """Stop reading keys (the watch is over either way) and give the terminal its settings back."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
        if self._saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)
            self._saved = None


def _now() -> datetime:
    return datetime.now(UTC)


class Watcher:
    """Runs ``piw watch`` for one bundle on one console.

    On a terminal it redraws one frame in place (rich ``Live``); otherwise it prints one frame and then a
    plain step line per new event, so a pipe or CI log gets a readable, escape-free record.
    """

    def __init__(
        self,
        bundle: Bundle,
        console: Console,
        *,
        interactive: bool | None = None,
        force_polling: bool = False,
        clock: Callable[[], datetime] = _now,
        on_frame: Callable[[FrameView], None] | None = None,
    ) -> None:
        self.follower = Follower(bundle)
        self.console = console
        self.interactive = console.is_terminal if interactive is None else interactive
        self.force_polling = force_polling
        self.clock = clock
        self.on_frame = on_frame

    def frame(self) -> FrameView:
        state = self.follower.state
        live = run_is_live(self.follower.bundle) if state.status == "running" else None
        height = self.console.size.height if self.interactive else None
        now = self.clock()
        finished = parse_instant(state.finished_at) if state.is_terminal and state.finished_at else None
        now = min(now, finished) if finished is not None else now
        view = self.follower.model.frame(now, live=live, height=height, notice=self.follower.notice)
        if self.on_frame is not None:
            self.on_frame(view)
        return view

    def run(self, *, once: bool = False, stop: threading.Event | None = None) -> RunState:
        stop = stop or threading.Event()
        self.follower.poll()
        if once or self.follower.state.is_terminal:
            self.console.print(self.frame())
            return self.follower.state
        try:
            if self.interactive:
                self._live(stop)
            else:
                self._plain(stop)
        except KeyboardInterrupt:
            pass
        return self.follower.state

    def _live(self, stop: threading.Event) -> None:
        keys = KeyReader(stop)
        try:
            with Live(
                self.frame(), console=self.console, auto_refresh=False, vertical_overflow="crop"
            ) as live:
                for _changed in file_changes(self.follower.bundle, stop, force_polling=self.force_polling):
                    self.follower.poll()
                    live.update(self.frame(), refresh=True)
                    if self.follower.state.is_terminal:
                        break
        finally:
            keys.close()

    def _plain(self, stop: threading.Event) -> None:
        self.console.print(self.frame())
        steps = StepLog(self.console, self.follower.model.notification_text)
        for changed in file_changes(self.follower.bundle, stop, force_polling=self.force_polling):
            if changed:
                restarts = self.follower.restarts
                self.follower.poll(on_event=steps)
                if self.follower.restarts != restarts:
                    self.console.print("The trace was repaired; reading it again from the start.")
            if self.on_frame is not None:
                self.frame()
            if self.follower.state.is_terminal:
                break


def watch_run(bundle: Bundle, console: Console, *, once: bool = False) -> RunState:
    """Follow a run until it ends (or print one frame with ``once``)."""
    return Watcher(bundle, console).run(once=once)
