"""Is anyone writing this run? A read-only answer from its queue row, for viewers (``docs/detached.md``).

A ``running`` run is live when its ``run_queue`` row holds a claim with an unexpired lease whose holder is not
known to be dead. Viewers must never write, so the row is read through the queue's read-only reader
(:func:`~piw.store.db.queue.read_row`), which never creates the database; without a database or a row (a run from
before the database existed) it falls back to probing the bundle's writer lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from piw.store.bundle import Bundle, run_is_live
from piw.store.db.database import now_ms
from piw.store.db.queue import read_row
from piw.store.place import mirrors_at


@dataclass(frozen=True)
class Liveness:
    """What a viewer can say about who runs a ``running`` run."""

    live: bool
    """Some process holds a live claim (or, without a queue row, the writer lock)."""
    state: str
    """``live``, ``queued`` (a host will start it), ``paused``, ``parked: <reason>`` or ``interrupted``."""

    @property
    def waiting_for_a_host(self) -> bool:
        return self.state == "queued"

    def explain(self, run_id: str) -> str:
        """One line for a viewer that found nobody writing the run."""
        resume = f"'piw resume {run_id}'"
        if self.state == "paused":
            return f"Run {run_id} is paused; continue it with {resume}."
        if self.state == "queued":
            return f"Run {run_id} is queued; 'piw host' starts it."
        if self.state.startswith("parked: "):
            reason = self.state.removeprefix("parked: ")
            return f"Run {run_id} is parked ({reason}); continue it with {resume} or end it with 'piw cancel {run_id}'."
        return (
            f"Run {run_id} is not being run by any process (it was interrupted or crashed); continue it with "
            f"{resume} or end it with 'piw cancel {run_id}'."
        )


def liveness(bundle: Bundle) -> Liveness:
    """Who runs ``bundle``'s run, from its queue row (read-only)."""
    home = bundle.path.parent.parent
    mirrors = mirrors_at(home)
    row = read_row(home, bundle.run_id) if mirrors is None else mirrors.queue_row(bundle.run_id)
    if row is None and mirrors is not None:
        return Liveness(False, "interrupted")
    if row is None:
        live = run_is_live(bundle)
        return Liveness(live, "live" if live else "interrupted")
    status, park_reason = row.status, row.park_reason
    if row.has_live_claim(now_ms()):
        return Liveness(True, "live")
    if row.pause_requested:
        return Liveness(False, "paused")
    if status == "queued" or (status == "parked" and park_reason is None):
        return Liveness(False, "queued")
    if status == "parked" and park_reason not in (None, "interrupted"):
        return Liveness(False, f"parked: {park_reason.replace('_', ' ')}")
    return Liveness(False, "interrupted")


def writer_is_live(bundle: Bundle) -> bool:
    return liveness(bundle).live
