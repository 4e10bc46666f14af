"""A script node's progress per phase and its leaves as step cards (``docs/dynamic-workflows.md``, "Seeing it
run").

Everything here reads the folded ``RunState`` only: the latest ``script.phase`` update of each phase (``done``,
``total``, ``running``, ``startedAt``) and the ``child_step_finished`` payloads the fold keeps on the attempt (its
leaves: key, phase, outcome, output). The ETA is the progress estimator's (:func:`piw.progress.estimate_progress`)
over two samples, the phase's start with nothing done and its latest update, counted down from that update as the
progress panel counts down its own (``docs/views.md``). ``piw inspect`` (state view), the viewer's state pane,
``--view steps`` and the viewer's step screen show these lines; ``piw runs`` shows :func:`current_phase`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.text import Text

from piw.progress import PROGRESS_SCHEMA, ProgressSample, estimate_progress, format_remaining, parse_instant
from piw.store.script_phase import PHASE_TYPE, current_phase
from piw.store.state import RunState, UpdateRecord
from piw.views.base import OUTCOME_MARKS, STATUS_STYLES, compact, fmt_duration, safe

__all__ = ["Phase", "current_phase", "leaf_cards", "phase_lines", "script_phases"]


@dataclass(frozen=True)
class Phase:
    """One phase of a script attempt as its latest ``script.phase`` update says."""

    name: str
    order: int
    status: str
    done: int
    total: int
    running: int
    started_at: str | None
    at: str
    node_id: str
    attempt_id: str
    seq: int


def _int(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _phase(record: UpdateRecord) -> Phase:
    data = record.data if isinstance(record.data, dict) else {}
    started = data.get("startedAt")
    return Phase(
        name=str(data.get("phase") or record.key),
        order=_int(data, "order"),
        status="completed" if data.get("status") == "completed" else "running",
        done=_int(data, "done"),
        total=max(_int(data, "total"), _int(data, "done")),
        running=_int(data, "running"),
        started_at=started if isinstance(started, str) else None,
        at=record.at,
        node_id=record.node_id,
        attempt_id=record.attempt_id,
        seq=record.seq,
    )


def script_attempt(state: RunState) -> tuple[str, str] | None:
    """``(node id, attempt id)`` of the script attempt to show: the one in progress when it published phases,
    else the last one that did."""
    current = state.current
    latest: UpdateRecord | None = None
    for (kind, _key), record in state.updates.items():
        if kind != PHASE_TYPE:
            continue
        if current is not None and record.attempt_id == current.attempt_id:
            return record.node_id, record.attempt_id
        if latest is None or record.seq > latest.seq:
            latest = record
    return None if latest is None else (latest.node_id, latest.attempt_id)


def script_phases(state: RunState, attempt_id: str | None = None) -> list[Phase]:
    """The phases of one script attempt (default :func:`script_attempt`), in the order they first ran."""
    if attempt_id is None:
        found = script_attempt(state)
        if found is None:
            return []
        attempt_id = found[1]
    phases = [
        _phase(record)
        for (kind, _key), record in state.updates.items()
        if kind == PHASE_TYPE and record.attempt_id == attempt_id
    ]
    return sorted(phases, key=lambda phase: (phase.order, phase.seq))


def is_live(state: RunState, phase: Phase) -> bool:
    """Whether the phase's attempt is the one running now (otherwise its counts are final)."""
    current = state.current
    return state.status == "running" and current is not None and current.attempt_id == phase.attempt_id


def eta_ms(phase: Phase, now: datetime) -> float | None:
    """The estimator's median time left for a running phase, counted down from its latest update; ``None``
    before a leaf is done, or without a start time."""
    start, latest = parse_instant(phase.started_at), parse_instant(phase.at)
    if start is None or latest is None or phase.done == 0 or phase.done >= phase.total or latest <= start:
        return None

    def sample(at: datetime, completed: int) -> ProgressSample:
        data = {"schema": PROGRESS_SCHEMA, "status": "running", "phase": phase.name[:128] or "phase"}
        return ProgressSample(at, {**data, "completed": completed, "total": phase.total, "unit": "leaves"})

    estimate = estimate_progress(phase.name, [sample(start, 0), sample(latest, phase.done)], now)
    median = estimate.remaining_median_ms
    if median is None:
        return None
    return max(0.0, median - max(0.0, (now - latest).total_seconds() * 1000))


def phase_text(phase: Phase, now: datetime, live: bool) -> Text:
    """``✓ draft  8/8 leaves`` or ``▶ verify  2/4 leaves · 2 running · ETA 3s``."""
    finished = phase.status == "completed" or not live
    mark = "✓" if phase.status == "completed" else ("▶" if live else "■")
    style = "green" if phase.status == "completed" else ("cyan" if live else "yellow")
    line = Text(f"{mark} ", style=style)
    line.append_text(safe(phase.name, "bold"))
    line.append(f"  {phase.done}/{phase.total} leaves")
    if not finished:
        if phase.running:
            line.append(f" · {phase.running} running")
        eta = eta_ms(phase, now)
        if eta is not None:
            line.append(f" · ETA {format_remaining(eta)}", style="dim")
    elif phase.status != "completed":
        line.append(" · stopped", style="dim")
    return line


def phase_lines(state: RunState, now: datetime, *, live_only: bool = False) -> list[Text]:
    """One line per phase of the script attempt :func:`script_attempt` picks (empty for a run without one);
    ``live_only``: only while that attempt runs (the live frame of ``piw watch`` and ``piw view``)."""
    phases = script_phases(state)
    if live_only and not (phases and is_live(state, phases[0])):
        return []
    return [phase_text(phase, now, is_live(state, phase)) for phase in phases]


def _leaf_phase(child: Mapping[str, Any], names: Iterable[str]) -> str:
    """A leaf's phase: recorded on it, else the first part of its key when that names a known phase."""
    recorded = child.get("phase")
    if isinstance(recorded, str):
        return recorded
    head = str(child.get("key", "")).split("/", 1)[0]
    return next((name for name in names if name == head), "main")


def leaf_cards(
    node_id: str, children: Iterable[Mapping[str, Any]], phases: list[Phase], indent: str = "    "
) -> Iterator[Text]:
    """A phase heading with its counts, then one step card per finished leaf:
    ``✓ node › draft/outline-write.0/1-outline/outline · 12ms  {"answer": …}``."""
    names = [phase.name for phase in phases]
    grouped: dict[str, list[Mapping[str, Any]]] = {name: [] for name in names}
    for child in children:
        grouped.setdefault(_leaf_phase(child, names), []).append(child)
    counts = {phase.name: phase for phase in phases}
    for name, leaves in grouped.items():
        phase = counts.get(name)
        heading = Text(indent + "phase ", style="dim")
        heading.append_text(safe(name, "bold"))
        if phase is not None:
            heading.append(f" · {phase.done}/{phase.total} leaves", style="dim")
            if phase.running:
                heading.append(f" · {phase.running} running", style="dim")
        yield heading
        for child in leaves:
            yield _card(node_id, child, indent + "  ")


def _card(node_id: str, child: Mapping[str, Any], indent: str) -> Text:
    outcome = str(child.get("outcome", "?"))
    card = Text(indent) + Text(OUTCOME_MARKS.get(outcome, "·"), style=STATUS_STYLES.get(outcome, ""))
    card.append(" ")
    card.append_text(safe(f"{node_id} › {child.get('key', '?')}", "cyan"))
    duration = child.get("durationMs")
    if isinstance(duration, int | float) and not isinstance(duration, bool):
        card.append(f" · {fmt_duration(duration)}", style="dim")
    card.append("  ")
    if outcome == "ok":
        card.append_text(safe(compact(child.get("output"), 400)))
    else:
        card.append_text(safe(str(child.get("error") or outcome), "red"))
    return card
