"""Where a running script is: its node and the phase it works in, for the runs index (``piw runs``,
``docs/dynamic-workflows.md``).

A script node publishes one ``script.phase`` update per phase; the fold keeps the latest of each in
``RunState.updates``. The runs index has one text column for the current node, so a script's phase rides in it as
``node › phase`` (a node id never holds a space) and :func:`split_place` takes it apart again for
``RunSummary`` (``currentNode`` and ``currentPhase`` in ``piw runs --json``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (``piw runs`` reads this module without the fold or msgspec)
    from piw.store.state import RunState

PHASE_TYPE = "script.phase"
SEPARATOR = " › "


def current_phase(state: RunState) -> str | None:
    """The phase of the attempt in progress that changed last and still has leaves to finish, or ``None``."""
    current = state.current
    if current is None:
        return None
    best: tuple[int, str] | None = None
    for (kind, _key), record in state.updates.items():
        if kind != PHASE_TYPE or record.attempt_id != current.attempt_id:
            continue
        data = record.data if isinstance(record.data, dict) else {}
        if data.get("status") == "completed":
            continue
        done, total = data.get("done"), data.get("total")
        if isinstance(done, int) and isinstance(total, int) and done >= total:
            continue
        if best is None or record.seq > best[0]:
            best = (record.seq, str(data.get("phase") or record.key))
    return None if best is None else best[1]


def place_of(state: RunState) -> str | None:
    """The index's current-node text: the node id, then `` › phase`` while a script works in one."""
    if state.current is None:
        return None
    phase = current_phase(state)
    node = state.current.node_id
    return node if phase is None else f"{node}{SEPARATOR}{' '.join(phase.split())}"


def split_place(place: str | None) -> tuple[str | None, str | None]:
    """``(node, phase)`` of an index's current-node text."""
    if place is None or SEPARATOR not in place:
        return place, None
    node, phase = place.split(SEPARATOR, 1)
    return node, phase
