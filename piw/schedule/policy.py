"""What a schedule does with the fires that came due since it was last looked at (``docs/schedules.md``).

Pure: from the stored schedule and the time now, a :class:`~piw.store.db.schedules.Decision` — which fires to
claim (start), which to record as ``missed``, and when a backlog is held. Only the newest due fire can be on time
(found within :data:`GRACE_MS`, or one period when that is shorter, of its instant); every older one was missed
while no host looked (the host was down or the machine slept). Then ``--missed``:

- ``skip``: the missed fires are recorded ``missed``; the newest runs only if it is on time;
- ``latest``: the newest due fire runs (on time or not), the older ones are recorded ``missed``;
- ``all``: each runs, up to ``--max-backlog`` missed ones; beyond it none runs: they are recorded ``held`` and
  the schedule is held (paused) until ``piw schedule resume``, so nothing is spent before someone decides.
"""

from __future__ import annotations

from piw.schedule.times import Timing
from piw.store.db.schedules import Decision, ScheduleRow

GRACE_MS = 60_000
"""How late a fire may be found and still count as on time (at most one period)."""
RECORD_CAP = 1000
"""At most this many missed fires are recorded one by one (the newest); the oldest record counts the rest."""
MISSED_POLICIES = ("skip", "latest", "all")
OVERLAP_POLICIES = ("skip", "queue", "allow")


def decide(row: ScheduleRow, now: int) -> Decision:
    """The fires of ``row`` due in ``(cursor_at, now]`` and what becomes of each."""
    timing = Timing.from_json(row.timing)
    due, cut = timing.between(row.cursor_at, now, RECORD_CAP)
    if not due:
        return Decision()
    newest = due[-1]
    following = timing.next(newest, 1)
    period = following[0] - newest if following else GRACE_MS
    on_time = now - newest <= min(GRACE_MS, period)
    late = due[:-1] if on_time else due
    fires: dict[int, tuple[str, str | None]] = {}
    held = None
    if row.missed == "all" and len(late) > row.max_backlog:
        for instant in due:
            fires[instant] = ("held", f"{len(late)} missed fires exceed --max-backlog {row.max_backlog}")
        held = {"count": len(late) + (1 if on_time else 0), "firstAt": due[0], "lastAt": newest, "cut": cut}
    elif row.missed == "all":
        fires = {
            instant: ("claimed", "missed, run from the backlog" if instant in late else None)
            for instant in due
        }
    else:
        for instant in late:
            fires[instant] = ("missed", "no host was running")
        if row.missed == "latest" or on_time:
            fires[newest] = ("claimed", None if on_time else "missed, run as the latest")
    if cut and due[0] in fires and fires[due[0]][0] != "claimed":
        state, _ = fires[due[0]]
        fires[due[0]] = (state, "and earlier fires not recorded one by one")
    return Decision(fires=fires, cursor_at=newest, held=held)
