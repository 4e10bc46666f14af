"""The holder's own deadline: a claim stops itself before anyone else may take it (``docs/detached.md``).

A lease expires on the database's clock (``claim_expires_at``), which a holder never compares with its own wall
clock. What the holder knows for sure is when it *sent* the request that set that expiry: the server set
``now + LEASE_MS`` after receiving it, so ``sent + LEASE_MS`` on a local clock that only has to run at the right
rate is never later than the server's expiry. The holder's deadline is that, less a safety margin of
:data:`SAFETY_MS` (2 s of 30 s) that covers clock-rate drift and the SIGTERM-then-SIGKILL of a shell group.

Past the deadline the holder *self-fences*: it starts no new effect (every effect point fences first), its active
node is aborted (the shell group gets SIGTERM then SIGKILL, the model stream is closed) and it writes nothing more.
So a holder cut off from its database, or frozen and then continued, has stopped its own effects before another
host can claim the run; the database's fenced write refuses a stale holder independently
(``multi-host.md`` §4.4). Wall-clock skew between machines changes nothing.

The local clock is ``CLOCK_BOOTTIME`` where it exists (Linux): unlike ``CLOCK_MONOTONIC`` it keeps counting while
the machine is suspended, during which the server's lease runs on. ``PIW_TEST_NO_SELF_FENCE=1`` turns
self-fencing off, for the one test that shows what the database alone refuses.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from piw.store.db.rows import LEASE_MS

SAFETY_MS = max(LEASE_MS // 15, min(LEASE_MS // 4, 1_000))
"""How much earlier than the server's expiry the holder stops itself: 2 s of a 30 s lease, and at least a quarter
of a short one (up to 1 s), since scheduling delay does not shrink with the lease."""
NO_SELF_FENCE_ENV = "PIW_TEST_NO_SELF_FENCE"

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def holder_clock() -> float:
    """Seconds on a clock that never jumps and keeps counting through a suspend (``CLOCK_BOOTTIME``, else
    ``time.monotonic``)."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()


def self_fencing_enabled() -> bool:
    """False only under the test hook ``PIW_TEST_NO_SELF_FENCE=1``."""
    return os.environ.get(NO_SELF_FENCE_ENV, "") != "1"


class HolderDeadline:
    """The conservative local deadline of one claim, and a watchdog that calls ``on_passed`` once it passes.

    The watchdog is its own thread so that a renewal blocked on a lost connection cannot delay it: it sleeps
    until the deadline, and when a renewal moved the deadline on, sleeps again."""

    def __init__(
        self,
        sent_at: float,
        on_passed: Callable[[], None],
        *,
        lease_ms: int = LEASE_MS,
        safety_ms: int = SAFETY_MS,
        enabled: bool | None = None,
    ) -> None:
        self.budget_s = max(lease_ms - safety_ms, 0) / 1000
        self.at = sent_at + self.budget_s
        self.enabled = self_fencing_enabled() if enabled is None else enabled
        self._on_passed = on_passed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def extend(self, sent_at: float) -> None:
        """A renewal (or an append that renews) sent at ``sent_at`` succeeded: the deadline moves on."""
        self.at = max(self.at, sent_at + self.budget_s)

    def passed(self) -> bool:
        """Whether the holder must no longer act on its claim."""
        return self.enabled and holder_clock() >= self.at

    def start(self, name: str) -> None:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self._thread = None

    def _watch(self) -> None:
        # At most a second at a time: a timed wait runs on CLOCK_MONOTONIC, which stands still while suspended.
        while not self._stop.wait(min(max(self.at - holder_clock(), 0.0), 1.0)):
            if holder_clock() >= self.at:
                self._on_passed()
                return
