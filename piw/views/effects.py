"""What the views say about effect classes and an unresolved effect (``docs/effects.md``).

Read from the replayed ``RunState`` and the definition snapshot only (views never import the engine): the
``unresolvedEffect`` an ``effect="once"`` attempt left when it was interrupted, and each action node's class as
its snapshot's ``actionExecution.effect`` names it (no label, or ``"idempotent"``: ``retry``).
"""

from __future__ import annotations

from typing import Any

from piw.store.fold import RunState
from piw.terminal import single_line
from piw.views.base import node_label

UNKNOWN_MARK = "?"


def unresolved_lines(state: RunState) -> list[str]:
    """``outcome unknown: send (effect once), started 2026-… · shell: mail --to …`` and the idempotency key."""
    unresolved = state.unresolved
    if not unresolved:
        return []
    node = node_label(str(unresolved.get("nodeId") or ""))
    started = unresolved.get("effectStartedAt") or "?"
    head = f"outcome unknown: {node} (effect {unresolved.get('effect', 'once')}), started {started}"
    lines = [single_line(head)]
    if unresolved.get("actionType") == "shell" and unresolved.get("command"):
        argv = " ".join([str(unresolved["command"]), *map(str, unresolved.get("args") or [])])
        lines.append(single_line(f"command: {argv}")[:200])
    if unresolved.get("reason"):
        lines.append(single_line(str(unresolved["reason"]))[:200])
    if unresolved.get("idempotencyKey"):
        lines.append(f"idempotency key: {unresolved['idempotencyKey']}")
    return lines


def effect_class_of(snapshot_node: dict[str, Any] | None) -> str | None:
    """An action node's effect class from its snapshot (``None`` for any other node)."""
    if not snapshot_node or snapshot_node.get("nodeType") != "action":
        return None
    label = (snapshot_node.get("actionExecution") or {}).get("effect")
    return label if label in ("once", "reconcile") else "retry"
