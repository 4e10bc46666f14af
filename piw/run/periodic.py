"""A duty of ``piw host``'s loop that is called on every pass but looks at most once per interval.

The host loop wakes about every half second (``docs/detached.md``); a duty such as the schedules
(``docs/schedules.md``) or retention (``docs/cli.md``, "Retention") does its work far less often, so each one
keeps the time it last looked and skips the calls in between. :class:`PeriodicDuty` is that throttle, written
once; a subclass sets :attr:`~PeriodicDuty.every_ms` and does its pass in :meth:`~PeriodicDuty.tick`.
"""

from __future__ import annotations

from typing import ClassVar

from piw.store.db.database import Clock, now_ms


class PeriodicDuty:
    """Called from every pass of the host loop; runs :meth:`tick` when ``every_ms`` passed since it last did."""

    every_ms: ClassVar[int]

    def __init__(self, clock: Clock = now_ms) -> None:
        self.clock = clock
        self._looked = 0

    def __call__(self) -> None:
        now = self.clock()
        if now - self._looked < self.every_ms:
            return
        self._looked = now
        self.tick(now)

    def tick(self, now: int) -> object:
        """One look at the duty's work (the tests call it directly, with their own ``now``)."""
        raise NotImplementedError
