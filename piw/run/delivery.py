"""Delivering notifications from the outbox (``docs/design/persistence.md`` §10.3): leases, redelivery, deduplication.

- The origin session — the foreground ``piw run``/``resume``/``answer``/``decide`` process — delivers the
  notifications of the run it executes: a trace listener that, after each ``notification_queued``, takes the
  30 s delivery lease on the run's undelivered rows, delivers them and sets ``delivered_at``. The live view has
  already shown the one just queued (it reads the trace); a row left undelivered by a process that died before
  delivering it is shown here, once, when the run continues.
- ``piw host`` delivers the rows with no target session (:func:`deliver_untargeted`).
- ``piw watch`` and the other viewers only read the trace and the conversation: they never take a lease and
  never mark anything delivered.

Delivery never writes the trace (the bundle may already be final). Consumers deduplicate by notification id,
so an expired lease that another consumer took again shows nothing twice in one process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from piw.errors import PiwError
from piw.store.db.deadline import HolderDeadline, holder_clock
from piw.store.db.outbox import DELIVERY_LEASE_MS, NotificationRow, Outbox
from piw.store.fold import RunState
from piw.store.place import runs_home
from piw.store.trace import TraceEvent, iter_trace

Show = Callable[[NotificationRow], None]


class OriginDelivery:
    """The origin session's consumer, installed as a listener of the run it executes."""

    def __init__(self, outbox: Outbox, home: Path, show: Show | None = None) -> None:
        self.outbox = outbox
        self.home = home
        self.show = show
        self.delivered: set[str] = set()

    def __call__(self, event: TraceEvent, state: RunState) -> None:
        if event.type == "notification_queued":
            self.deliver(event.run_id, shown=str(event.payload.get("notificationId")))
        elif event.type == "run_resumed":
            self.deliver(event.run_id, shown=None, queued=self._queued(event.run_id))

    def _queued(self, run_id: str) -> set[str]:
        """Notifications whose ``notification_queued`` is committed: a row without one is still being sent by a
        node that reruns now (it is shown when its event is written), so it is not delivered early."""
        path = runs_home(self.home) / "runs" / run_id / "trace.ndjson"
        with contextlib.suppress(PiwError, OSError):
            return {
                str(e.payload.get("notificationId"))
                for e in iter_trace(path)
                if e.type == "notification_queued"
            }
        return set()

    def deliver(self, run_id: str, shown: str | None, queued: set[str] | None = None) -> int:
        """Lease, deliver and mark the run's undelivered rows (only ``queued`` ones, when given); how many.

        A row whose ``notification_queued`` is not committed is left alone: its node reruns and queues it.
        """
        count = 0
        with contextlib.suppress(PiwError):
            for row in self.outbox.lease_for_run(run_id, only=queued):
                if row.notification_id not in self.delivered and row.notification_id != shown and self.show:
                    self.show(row)
                if self.outbox.mark_delivered(row.notification_id, str(row.delivery_token)):
                    count += 1
                self.delivered.add(row.notification_id)
        return count


def deliver_untargeted(outbox: Outbox, show: Show, delivered: set[str] | None = None) -> int:
    """A host's pass over the outbox: rows with no target session, each shown once and marked delivered.

    Delivering is an effect under a delivery lease: past the lease's conservative local deadline (a host frozen
    mid-pass, ``docs/detached.md``, "Self-fencing") the rest is left for the next consumer to lease again."""
    seen = delivered if delivered is not None else set()
    count = 0
    sent = holder_clock()
    rows = outbox.lease_untargeted()
    deadline = HolderDeadline(sent, lambda: None, lease_ms=DELIVERY_LEASE_MS)
    for row in rows:
        if deadline.passed():
            break
        if row.notification_id not in seen:
            show(row)
            seen.add(row.notification_id)
        if outbox.mark_delivered(row.notification_id, str(row.delivery_token)):
            count += 1
    return count
