"""What reaches a run from outside its step loop: the claim, the active attempt, a park request, why it stopped.

A lease thread (cancel requested, claim lost), a host shutting down (park) and Ctrl-C all act on the attempt
that is running; the loop, for its part, records here why it stopped short of a terminal event, which is how
the claim is settled (``piw.run.claims``). One per engine, made before any bundle exists.
"""

from __future__ import annotations

from piw.run.claims import ClaimControl, Stop
from piw.run.executors import Attempt


class Parked(BaseException):
    """Unwinds the loop when the holder shuts down: the active node is aborted without a terminal event."""


class RunControl:
    """The claim of one run, its active attempt, and the flags the loop and the holder share."""

    def __init__(self) -> None:
        self.claim = ClaimControl(self.abort_active)
        self.active: Attempt | None = None
        self.stopped: Stop | None = None
        """Why the loop stopped short of a terminal event (a pause, a park reason, ...)."""
        self.park_requested = False
        self.interrupted = False
        """Ctrl-C or SIGTERM reached a foreground run: kept here too, since Python drops the ``KeyboardInterrupt``
        when the signal lands in a garbage collector callback (``piw.stop_signal``)."""

    def abort_active(self) -> None:
        """Cancel requested or claim lost: abort the active node (its model request closed, its shell group
        killed); the loop then records the cancellation, or writes nothing more after a lost claim."""
        active = self.active
        if active is not None:
            active.cancel.set()

    def request_park(self) -> None:
        """Holder shutdown (a host stopping): abort the active node without a terminal event and park the run."""
        self.park_requested = True
        self.abort_active()

    def request_interrupt(self) -> None:
        """Ctrl-C or SIGTERM in a foreground run: abort the active node; the loop unwinds as interrupted."""
        self.interrupted = True
        self.abort_active()

    @property
    def halted(self) -> bool:
        """A cancel, a lost claim or a park was asked for: an attempt about to start is cancelled at once."""
        return self.claim.cancel_requested or self.claim.lost or self.park_requested or self.interrupted
