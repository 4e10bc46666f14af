"""``piw watch``: a live, read-only view of one run that follows its ``trace.ndjson`` as it grows.

Following the files (watchfiles with a polling fallback, the incremental tail, the fold of what was appended)
is :mod:`piw.views.follow`, shared with the full-screen viewer. A running run whose writer is gone is shown as
"possibly interrupted". Watching ends when the run reaches a terminal state, on ``q``, or on Ctrl-C.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from piw.cli.live import StepLog
from piw.errors import RunNotFound
from piw.progress import parse_instant
from piw.store.bundle import Bundle, list_bundles, run_is_live
from piw.store.replay import RunState
from piw.views.follow import Follower, file_changes
from piw.views.frame import FrameView

__all__ = ["Follower", "KeyReader", "Watcher", "file_changes", "newest_run", "watch_run"]


def newest_run(home: Path) -> str:
    """The id of the most recent run, or ``RunNotFound`` when there is none."""
    for bundle in list_bundles(home):
        return bundle.run_id
    raise RunNotFound(f"No runs in {home / 'runs'}; start one with 'piw run WORKFLOW'.")


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
