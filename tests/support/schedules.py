"""Hosts firing schedules at once, for the tests of "each fire starts exactly once" (``docs/schedules.md``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from piw.run.schedule_duty import ScheduleDuty


def tick_together(duties: Sequence[ScheduleDuty], instants: Iterable[int]) -> list[str]:
    """At each instant, every duty ticks at the same time on its own thread (as hosts would); the run ids started."""
    started: list[str] = []
    lock = threading.Lock()
    for now in instants:

        def look(duty: ScheduleDuty, now: int = now) -> None:
            found = duty.tick(now)
            with lock:
                started.extend(found)

        threads = [threading.Thread(target=look, args=(duty,)) for duty in duties]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return started
