"""``piw watch``: a live, read-only view of one run that follows its ``trace.ndjson`` as it grows.

Following the files (watchfiles with a polling fallback, the incremental tail, the fold of what was appended)
is :mod:`piw.views.follow`, shared with the full-screen viewer. Whether a running run is live comes from its queue
row (``piw.store.db.liveness``, read-only). Watching ends when the run reaches a terminal state, when no process is
writing it (interrupted, paused, parked: it says so and exits 0, instead of ticking forever), on ``q`` (exit 0), or
on Ctrl-C (exit 130, as for every command interrupted).
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from piw.cli.live import StepLog
from piw.cli.stdout_guard import reader_gone
from piw.errors import PiwError, RunNotFound
from piw.progress import parse_instant
from piw.store.bundle import Bundle, list_bundles
from piw.store.db.liveness import Liveness, liveness
from piw.store.fold import RunState
from piw.views.base import node_kinds
from piw.views.follow import Follower, file_changes
from piw.views.frame import FrameView

__all__ = [
    "Follower",
    "KeyReader",
    "WatchInterrupted",
    "Watcher",
    "file_changes",
    "newest_run",
    "run_to_watch",
    "watch_run",
]

LIVENESS_S = 1.0
"""How often a watcher asks the queue row whether anyone still writes the run."""


class WatchInterrupted(KeyboardInterrupt):
    """Ctrl-C while watching: the CLI exits 130 (the run being watched is not affected)."""


def newest_run(home: Path) -> str:
    """The id of the most recent run, or ``RunNotFound`` when there is none."""
    for bundle in list_bundles(home):
        return bundle.run_id
    raise RunNotFound(f"No runs in {home / 'runs'}; start one with 'piw run WORKFLOW'.")


def run_to_watch(home: Path) -> str:
    """What ``piw watch`` follows without a run id: the newest run some process is running (or a host is about to
    start), else the newest run. A newer run that already ended is not what someone typing ``piw watch`` wants
    to see while another one runs."""
    from piw.store.history import run_summaries

    try:
        for summary in run_summaries(home, "running"):
            if summary.detail in (None, "pausing", "cancelling", "queued"):  # live, or a host starts it
                return summary.run_id
    except PiwError:
        pass  # an unreadable index: the newest bundle is still a fine answer
    return newest_run(home)


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
        probe: Callable[[Bundle], Liveness] = liveness,
    ) -> None:
        self.follower = Follower(bundle)
        self.probe = probe
        self._liveness: Liveness | None = None
        self._probed_at = 0.0
        self.stopped_because: str | None = None
        """Set when watching ended because nobody writes the run: the line that was printed."""
        self.console = console
        self.interactive = console.is_terminal if interactive is None else interactive
        self.force_polling = force_polling
        self.clock = clock
        self.on_frame = on_frame

    def liveness(self, fresh: bool = False) -> Liveness | None:
        """The queue row's answer for a running run (re-read at most every ``LIVENESS_S``)."""
        if self.follower.state.status != "running":
            return None
        now = time.monotonic()
        if fresh or self._liveness is None or now - self._probed_at >= LIVENESS_S:
            self._liveness = self.probe(self.follower.bundle)
            self._probed_at = now
        return self._liveness

    def _nobody_writes(self) -> bool:
        """True (after noting why) when a running run has no writer and no host is about to start it."""
        found = self.liveness()
        if found is None or found.live or found.waiting_for_a_host:
            return False
        # The writer may have just finished: read the tail once more before saying the run is not live.
        self.follower.poll()
        if self.follower.state.status != "running":
            return False
        self.stopped_because = found.explain(self.follower.bundle.run_id)
        return True

    def frame(self) -> FrameView:
        state = self.follower.state
        found = self.liveness()
        live = found.live if found is not None else None
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
            raise WatchInterrupted from None
        if self.stopped_because:
            self.console.print(self.stopped_because, soft_wrap=True)
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
                    if self.follower.state.is_terminal or self._nobody_writes():
                        break
        finally:
            keys.close()

    def _plain(self, stop: threading.Event) -> None:
        self.console.print(self.frame())
        steps = StepLog(self.console, self.follower.model.notification_text)
        steps.kinds = node_kinds(self.follower.model.snapshot)
        for changed in file_changes(self.follower.bundle, stop, force_polling=self.force_polling):
            if changed:
                restarts = self.follower.restarts
                self.follower.poll(on_event=steps)
                if self.follower.restarts != restarts:
                    self.console.print("The trace was repaired; reading it again from the start.")
            if self.on_frame is not None:
                self.frame()
            if self.follower.state.is_terminal or reader_gone() or self._nobody_writes():
                break


def watch_run(bundle: Bundle, console: Console, *, once: bool = False) -> RunState:
    """Follow a run until it ends (or print one frame with ``once``)."""
    return Watcher(bundle, console).run(once=once)
