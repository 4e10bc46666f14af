"""The holder's side of a claim: lease renewal, pause/cancel polling, and a fence cheap enough for every append.

Every bundle write is preceded by a fence of the claim (``docs/detached.md``, "What the database holds"). Reading the
queue row costs ~14 µs, several times per step, against a compute-step budget of 200 µs. :meth:`Lease.fence` reads
the row only when it has to, and this is why skipping the read in between is sound:

1. Only the holder of a live claim changes its row's token, generation or status (the queue protocol's rule:
   other processes set request flags only). Another process can take the row over only through
   ``claim_next``/``claim_run``, which require ``claim_expires_at <= now`` or a dead holder on this host.
2. The holder set ``claim_expires_at`` itself (``Claim.expires_at``) from the same wall clock the claimers read.
   While ``now < expires_at`` the lease has not expired for anyone on this host, and the holder is alive (it is
   the one asking), so nobody can have taken the row over: the last confirmation still holds.
3. So :meth:`fence` is a clock comparison while ``now`` is before both the lease deadline and
   ``confirmed_at + RENEW_MS`` (a confirmation is a successful row read or renewal); past either it reads the
   row and raises ``ClaimLost(reason)``. The ``RENEW_MS`` bound re-reads at least every 10 s even if rule 1 were
   broken from outside (a row edited by hand), and a renewal thread that stalls makes every append read the row
   until a renewal succeeds, so an expired claim is never written under.
4. The gap between a fence check and the write is closed by the per-bundle writer lock, which a new holder
   must take before writing (the run store's ``acquire``); a stale holder paused between check and write still
   holds it.

Rule 2 needs one clock for holder and claimers: true on one host, which is all SQLite claims support ("claims are
for one machine", ``docs/detached.md``). A queue implementation for many machines must fence with a row read (or
bound clock skew) instead.

Beside the row, the lease keeps the holder's own conservative deadline (:mod:`piw.store.db.deadline`): past it,
:meth:`Lease.fence` refuses without reading anything and a watchdog aborts the active node, so a holder that lost
its database or was frozen stops its effects before the lease can expire for anyone else (self-fencing).

A background thread reads the row every :data:`POLL_MS` (the pause and cancel flags, and a confirmation) and
renews the lease every :data:`RENEW_MS`; on ``ClaimLost`` it calls ``on_lost`` so the engine aborts the node. A step
boundary reads the flags too (:meth:`Lease.current_flags`), so a pause takes effect at the first boundary after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from piw.errors import ClaimLost, StoreBusy
from piw.store.db.deadline import HolderDeadline, holder_clock
from piw.store.db.queue import POLL_MS, RENEW_MS, ClaimCheck, RunQueue
from piw.store.db.rows import Claim, FinalStatus, ParkReason

log = logging.getLogger(__name__)

BOUNDARY_FLAGS_MS = 5
"""A step boundary reads the flags itself unless they were read this recently: a pause asked for while a step ran
is seen at that step's end, and a run of fast steps reads the row at most every 5 ms (~14 µs each)."""


class Lease:
    """A claim held by this process: fenced writes, a renewed lease, polled flags."""

    def __init__(
        self,
        queue: RunQueue,
        claim: Claim,
        *,
        poll_ms: int = POLL_MS,
        renew_ms: int = RENEW_MS,
        on_lost: Callable[[str], None] | None = None,
        on_cancel: Callable[[], None] | None = None,
        sent_at: float | None = None,
    ) -> None:
        """``sent_at``: :func:`~piw.store.db.deadline.holder_clock` taken before the claim request was sent (now,
        when not given), where the holder's deadline starts."""
        self.queue = queue
        self.claim = claim
        self.poll_ms = poll_ms
        self.renew_ms = renew_ms
        self.on_lost = on_lost
        self.on_cancel = on_cancel
        self.lost: str | None = None
        self.pause_requested = False
        self.cancel_requested = False
        self.row_reads = 0
        now = queue.clock()
        self._confirmed_at = now
        self._renewed_at = now
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cancel_signalled = False
        self._appended_since_boundary = False
        """A fenced append read the flags since the last step boundary (database mode: :meth:`appended`)."""
        self.deadline = HolderDeadline(
            holder_clock() if sent_at is None else sent_at, lambda: self._lose("expired")
        )

    @property
    def run_id(self) -> str:
        return self.claim.run_id

    # ---- the fence ------------------------------------------------------------------------------------

    def fence(self) -> None:
        """Raise ``ClaimLost`` unless this process still holds the claim (see the module docstring)."""
        self._check_deadline()
        now = self.queue.clock()
        claim = self.claim
        if now < claim.expires_at and now < self._confirmed_at + self.renew_ms:
            return
        self.confirm()

    def confirm(self) -> ClaimCheck:
        """Read the row now: check the claim and take in the pause/cancel flags."""
        self._check_deadline()
        now = self.queue.clock()
        self.row_reads += 1
        try:
            row = self.queue.fence(self.claim)
        except ClaimLost as exc:
            self._lose(exc.reason)
            raise
        self._confirmed_at = now
        self._take_flags(row)
        return row

    def _check_deadline(self) -> None:
        """``ClaimLost`` once the claim is gone or the holder's own deadline passed (self-fencing)."""
        if self.lost is None and self.deadline.passed():
            self._lose("expired")
        if self.lost is not None:
            raise ClaimLost(self.lost)

    def appended(self, status: str, pause_requested: bool, cancel_requested: bool) -> None:
        """A fenced append (database mode) just checked this claim on the database and read the flags with it:
        the same as :meth:`confirm`, without a row read of its own (``piw.store.pg.run_store``)."""
        if self.lost is not None:
            return
        self._confirmed_at = self.queue.clock()
        self._appended_since_boundary = True
        self._take_flags(ClaimCheck(status, pause_requested, cancel_requested))

    def current_flags(self, max_age_ms: int = BOUNDARY_FLAGS_MS) -> None:
        """Read the pause/cancel flags now unless they were read less than ``max_age_ms`` ago (0: read them).

        The background thread reads them every ``poll_ms``; a step boundary reads them itself, so a pause asked
        for while a step ran takes effect at the boundary that step ends at, not one poll later (by when a few fast
        steps may have finished the run). A busy database leaves the flags as last read."""
        appended, self._appended_since_boundary = self._appended_since_boundary, False
        if self.lost is not None or self.queue.clock() - self._confirmed_at < max_age_ms:
            return
        if max_age_ms == 0 and appended:
            return  # a step with effects ends with a synchronous fenced append, which read the flags after them
        try:
            self.confirm()
        except StoreBusy as exc:
            log.warning("run %s: reading the pause and cancel flags failed: %s", self.run_id, exc)

    def _take_flags(self, row: ClaimCheck) -> None:
        self.pause_requested = row.pause_requested
        self.cancel_requested = row.cancel_requested
        if row.cancel_requested and not self._cancel_signalled:
            self._cancel_signalled = True
            if self.on_cancel is not None:
                self.on_cancel()

    def _lose(self, reason: str) -> None:
        with self._lock:
            first = self.lost is None
            self.lost = reason
        if first and self.on_lost is not None:
            self.on_lost(reason)

    # ---- renewal and polling ------------------------------------------------------------------------

    def renew(self) -> None:
        """Extend the lease now (``ClaimLost`` when it expired or changed: an expired claim never renews)."""
        self._check_deadline()
        now = self.queue.clock()
        sent = holder_clock()
        try:
            self.claim = self.queue.renew(self.claim)
        except ClaimLost as exc:
            self._lose(exc.reason)
            raise
        self._renewed_at = self._confirmed_at = now
        self.deadline.extend(sent)

    def renewed(self, sent_at: float) -> None:
        """A write that renews the lease as it fences (database mode's append) succeeded, sent at ``sent_at``."""
        self.deadline.extend(sent_at)

    def tick(self) -> None:
        """One round of the background thread: read the flags, and renew when a renewal is due."""
        try:
            self.confirm()
            if self.queue.clock() >= self._renewed_at + self.renew_ms:
                self.renew()
        except ClaimLost:
            return
        except StoreBusy as exc:  # a busy or locked database: try again next round
            log.warning("run %s: lease round failed: %s", self.run_id, exc)

    def start(self) -> Lease:
        """Start the background thread (daemon: a crashed process simply stops renewing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"lease-{self.run_id}", daemon=True)
            self._thread.start()
            self.deadline.start(f"deadline-{self.run_id}")
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.poll_ms / 1000):
            if self.lost is not None:
                return
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        self.deadline.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self._thread = None

    # ---- giving the claim back ----------------------------------------------------------------------

    def park(self, reason: ParkReason | None = None, *, delay_ms: int = 0, error: str | None = None) -> None:
        self.stop()
        if self.lost is None:
            self.queue.park(self.claim, reason, delay_ms=delay_ms, error=error)
            self.lost = "released"

    def requeue(self) -> None:
        self.stop()
        if self.lost is None:
            self.queue.requeue(self.claim)
            self.lost = "released"

    def release(self, status: FinalStatus, error: str | None = None) -> None:
        self.stop()
        if self.lost is None:
            self.queue.release(self.claim, status, error)
            self.lost = "released"
