"""Spend against budget, in words: the state view's budget rows and the wait of a run stopped by its budget.

A pure view of what the fold recorded (``RunState.budget``, ``spent``, ``spentByNode``) and of the stop summary
the run ended with. An unknown price is said, never shown as $0.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

from rich.text import Text

from piw.terminal import single_line
from piw.views.base import node_label

LABELS = {"modelRequests": "requests", "tokens": "tokens", "costUsd": "cost", "agentSteps": "agent steps"}
SPENT_OF = {"modelRequests": "requests", "tokens": "tokens", "costUsd": "cost", "agentSteps": "agentSteps"}


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}" if count == 1 or (word.endswith("s") and count != 1) else f"{count:,} {word}s"


def money(value: float) -> str:
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def spent_line(spent: dict[str, Any] | None, limits: dict[str, Any] | None = None) -> str:
    """``3 of 5 requests · 1,200 of 200,000 tokens · $0.0120 of $2.50`` (cost unknown said as such)."""
    spent = spent or {}
    limits = limits or {}
    parts: list[str] = []
    requests = int(spent.get("requests", 0))
    parts.append(
        _with_limit(requests, limits.get("modelRequests"), "request" if requests == 1 else "requests")
    )
    parts.append(_with_limit(int(spent.get("tokens", 0)), limits.get("tokens"), "tokens"))
    unpriced = int(spent.get("unpricedRequests", 0))
    if requests and (unpriced == requests or ("cost" not in spent and "unpricedRequests" not in spent)):
        parts.append("cost unknown (no price configured)")
    else:
        cost = money(float(spent.get("cost", 0.0)))
        if limits.get("costUsd") is not None:
            cost += f" of {money(float(limits['costUsd']))}"
        if unpriced:
            cost += f" (+ {unpriced} unpriced {'request' if unpriced == 1 else 'requests'})"
        parts.append(cost)
    if limits.get("agentSteps") is not None:
        parts.append(_with_limit(int(spent.get("agentSteps", 0)), limits["agentSteps"], "agent steps"))
    return " · ".join(parts)


def _with_limit(count: int, limit: Any, word: str) -> str:
    return f"{count:,} of {int(limit):,} {word}" if limit is not None else f"{count:,} {word}"


def budget_stop_lines(run_id: str, stop: Any) -> Iterator[Text]:
    """Why the run stopped, what was spent and on what, and the commands that top it up or stop it."""
    stop = stop if isinstance(stop, dict) else {}
    if stop.get("limit") == "confirmAbove":
        yield from _confirm_lines(run_id, stop)
        return
    fan_out = stop.get("fanOut") if isinstance(stop.get("fanOut"), dict) else None
    head = Text(
        "Stopped by its budget before the fan-out of "
        if fan_out
        else "Stopped by its budget before a model request of "
    )
    head.append(node_label(str(stop.get("blockedNode", "?"))), style="bold")
    head.append(":")
    yield head
    yield Text(f"  {single_line(str(stop.get('reason', '')))}.")
    if stop.get("note"):
        yield Text(f"  {single_line(str(stop['note']))}", style="dim")
    yield Text("Spent: " + spent_line(stop.get("spent"), stop.get("limits")))
    by_node = stop.get("byNode") or {}
    for node, usage in sorted(by_node.items(), key=lambda item: -int(item[1].get("requests", 0))):
        yield Text(f"  {node_label(str(node))}  ", style="dim") + Text(spent_line(usage), style="dim")
    dimension = str(stop.get("limit") or "modelRequests")
    limit = (stop.get("limits") or {}).get(dimension)
    amount: Any = limit if isinstance(limit, int | float) and limit else 1
    top_up = json.dumps({"topUp": {dimension: amount}})
    yield Text("Continue with more: ") + Text(
        f"piw answer {shlex.quote(run_id)} {shlex.quote(top_up)}", style="bold"
    )
    fits = fan_out.get("fits") if fan_out else None
    if isinstance(fits, int) and fits >= 1:
        fewer = json.dumps({"maxTasks": fits})
        yield Text("Or fewer children:  ") + Text(
            f"piw answer {shlex.quote(run_id)} {shlex.quote(fewer)}", style="bold"
        )
    yield Text("Or stop it:         ") + Text(f"piw cancel {shlex.quote(run_id)}", style="bold")


def _confirm_lines(run_id: str, stop: dict[str, Any]) -> Iterator[Text]:
    """A run parked by ``--confirm-above`` before its first model request (``docs/planning.md``)."""
    yield Text("Waiting for confirmation before the first model request:")
    yield Text(f"  the {single_line(str(stop.get('reason', '')))}.")
    start = json.dumps({"confirm": True})
    yield Text("Start it:   ") + Text(f"piw answer {shlex.quote(run_id)} {shlex.quote(start)}", style="bold")
    yield Text("Or stop it: ") + Text(f"piw cancel {shlex.quote(run_id)}", style="bold")
