"""A script's progress per phase, published as ``script.phase`` updates (``docs/dynamic-workflows.md``, "Seeing
it run").

Each phase's update carries ``{phase, order, status, done, total, running, startedAt}``: ``total`` counts the leaves
reached so far plus those a running ``parallel``/``pipeline`` has announced (items × stages) and not reached yet,
so it is known from the start of a fan-out and the estimator can give an ETA (``piw.views.phases``). Updates are
durable trace events the views read back through the fold; this module only decides when one is worth writing:
written by a timer of the board at most every :data:`INTERVAL_S` (one frame per changed phase; a resume that finds
1,000 committed leaves writes a handful, not 1,000), off the threads that ask leaves, and all at once when ``main``
returns. A frame the run's update rate limit refuses is written again at the next tick, so the last state of a
phase is not lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INTERVAL_S = 0.25
"""How long a change waits for the board's timer, which writes every phase changed meanwhile."""

FINAL_TRIES = 10
"""How often ``finish`` writes the last frames before it gives up on one the rate limit keeps refusing."""

Report = Callable[[str, dict[str, Any]], bool]
"""Publishes one phase's data under its key; ``False`` when the update was refused (a full rate bucket)."""


@dataclass
class PhaseCount:
    """Progress of one phase: leaves finished, reached and running, and announced but not reached yet."""

    order: int
    total: int = 0
    done: int = 0
    running: int = 0
    pending: int = 0
    open: int = 0
    """How many ``with flow.phase(name)`` blocks of this name are running (parallel items may each open one)."""
    started_at: str | None = None
    ended: bool = False

    def data(self, name: str) -> dict[str, Any]:
        status = "completed" if self.ended and self.open == 0 and self.running == 0 else "running"
        data: dict[str, Any] = {
            "phase": name,
            "order": self.order,
            "status": status,
            "done": self.done,
            "total": max(self.total + self.pending, self.done),
            "running": self.running,
        }
        if self.started_at is not None:
            data["startedAt"] = self.started_at
        return data


@dataclass
class Fan:
    """One ``parallel``/``pipeline`` call: the leaves it announced for its phase and has not reached yet."""

    phase: str
    remaining: int


class PhaseBoard:
    """The per-phase counters of one run of ``main`` and the throttled publishing of them."""

    def __init__(
        self,
        report: Report | None,
        now: Callable[[], str] | None = None,
        *,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._report = report
        self._now = now
        self._interval = interval_s
        self._lock = threading.Lock()
        self.phases: dict[str, PhaseCount] = {}
        self._keys: dict[str, str] = {}
        self._writing = threading.Lock()
        self._dirty: set[str] = set()
        self._timer: threading.Timer | None = None
        self._closed = False

    def _count(self, name: str) -> PhaseCount:
        counts = self.phases.get(name)
        if counts is None:
            counts = self.phases[name] = PhaseCount(order=len(self.phases) + 1)
            if self._now is not None:
                counts.started_at = self._now()
        return counts

    # ---- what the flow tells the board ------------------------------------------------------------------

    def enter(self, name: str, key: str) -> None:
        with self._lock:
            self._keys.setdefault(name, key)
            counts = self._count(name)
            counts.open += 1
            counts.ended = False
        self._changed(name)

    def exit(self, name: str) -> None:
        with self._lock:
            counts = self._count(name)
            counts.open -= 1
            counts.ended = counts.open == 0
        self._changed(name)

    def announce(self, name: str, key: str, leaves: int) -> Fan:
        """A fan-out of ``leaves`` (items × stages) starts in phase ``name``."""
        with self._lock:
            self._keys.setdefault(name, key)
            self._count(name).pending += leaves
        self._changed(name)
        return Fan(name, leaves)

    def settle(self, fan: Fan) -> None:
        """A fan-out ended: leaves it announced and never reached (a stage that asked none) leave the total."""
        with self._lock:
            counts = self._count(fan.phase)
            counts.pending -= fan.remaining
            fan.remaining = 0
        self._changed(fan.phase)

    def reached(self, name: str, key: str, fan: Fan | None) -> None:
        """A leaf of phase ``name`` was reached (committed or about to be asked)."""
        with self._lock:
            self._keys.setdefault(name, key)
            counts = self._count(name)
            counts.total += 1
            if fan is not None and fan.phase == name and fan.remaining > 0:
                fan.remaining -= 1
                counts.pending -= 1

    def leaf(self, name: str, *, done: int = 0, running: int = 0) -> None:
        with self._lock:
            counts = self._count(name)
            counts.done += done
            counts.running += running
        self._changed(name)

    def finish(self) -> None:
        """``main`` returned: every phase is complete; the last frames are written now."""
        with self._lock:
            for counts in self.phases.values():
                counts.ended, counts.open = True, 0
            self._dirty.update(self.phases)
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        for _ in range(FINAL_TRIES):  # a frame the rate limit refused is tried again (20 tokens a second)
            self.flush()
            with self._lock:
                if not self._dirty:
                    return
            time.sleep(self._interval / 5)

    # ---- publishing -------------------------------------------------------------------------------------

    def _changed(self, name: str) -> None:
        """Mark a phase changed; the board's timer writes it (never the leaf's own thread, which goes on to its
        request: a resume over 1,000 committed leaves asks its first new leaf without waiting for an fsync)."""
        with self._lock:
            self._dirty.add(name)
        self._schedule()

    def flush(self) -> None:
        """Write every phase changed since the last write. One flush at a time (``_writing``): a tick that read
        the counters before ``finish`` must not write its older frame after ``finish``'s."""
        if self._report is None:
            return
        with self._writing:
            with self._lock:
                if self._closed:
                    return
                frames = [(n, self._keys.get(n, n), self.phases[n].data(n)) for n in sorted(self._dirty)]
                self._dirty.clear()
            for name, key, data in frames:
                if not self._report(key, data):
                    with self._lock:
                        self._dirty.add(name)
        self._schedule()

    def close(self) -> None:
        """The attempt is over (returned or raised): nothing more is written."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _schedule(self) -> None:
        """A timer writes what is still held back once it is due (one timer for the board at a time)."""
        with self._lock:
            if not self._dirty or self._timer is not None or self._closed:
                return
            timer = self._timer = threading.Timer(self._interval, self._tick)
            timer.daemon = True
        timer.start()

    def _tick(self) -> None:
        with self._lock:
            self._timer = None
        self.flush()
