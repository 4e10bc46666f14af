"""Reading a plan a planner model wrote: the prompt, the lenient parser and the go/no-go decision.

A plan is a parsed convention rather than a tool call or structured output: it works on every provider,
including weak local models that rarely emit tool calls, and the check that matters (is every agent a known
worker?) runs however the plan arrived. Leniency lives here and only here, because the input is model text;
everywhere else in piw malformed input is an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

QUOTE_CHARS = 2_000
"""How much of the planner's text an error quotes: enough to see what went wrong, not a whole transcript."""


@dataclass(frozen=True)
class Worker:
    """An agent a plan may delegate to; the planner reads only its name and description."""

    name: str
    description: str


@dataclass(frozen=True)
class PlannedTask:
    """One step of a plan; ``agent`` is always a known worker, because unknown names never get this far."""

    agent: Worker
    task: str


@dataclass(frozen=True)
class DroppedTask:
    """A step the planner wrote that cannot run: an unknown agent (kept verbatim) or an empty task."""

    agent: str
    task: str


@dataclass(frozen=True)
class AgentResult:
    """The planner's own turn, shaped like ``ctx.run_agent``'s child result so that can be passed as is."""

    outcome: Literal["ok", "failed", "timed_out", "cancelled"]
    output: Any = None
    error: str | None = None


@dataclass(frozen=True)
class PlanOutcome:
    """A validated plan, or the reason there is none, decided before any worker starts.

    ``plan`` is empty whenever ``ok`` is False, so a caller that forgets to check ``ok`` has nothing to run.
    ``error`` is set if and only if ``ok`` is False and quotes what the planner wrote.
    """

    plan: list[PlannedTask]
    planning: AgentResult
    ok: bool
    error: str | None = None


def planning_prompt(input: str, workers: Sequence[Worker], max_tasks: int) -> str:
    """The question put to the planner: the work, who is available, and the one answer shape we ask for."""
    _check_limits(workers, max_tasks)
    roster = "\n".join(f"- {worker.name}: {worker.description}" for worker in workers)
    return (
        f"Split the work below into at most {max_tasks} independent subtasks, each assigned to one of these "
        f"agents:\n{roster}\n\n"
        f"Work:\n{input.strip()}\n\n"
        "Each subtask must make sense on its own: its agent sees only its task and the work above, never the "
        "other subtasks or their results. Use only the agent names listed, spelled exactly as shown.\n\n"
        'Answer only with a JSON array of {"agent": "name", "task": "…"} objects, for example:\n'
        '[{"agent": "name", "task": "…"}]\n'
        "Write no prose before or after it and no code fence."
    )


def parse_plan(output: str, workers: Sequence[Worker]) -> list[PlannedTask]:
    """The runnable steps of a planner's text, in order of appearance; empty means nothing usable was said."""
    return read_plan(output, workers)[0]


def read_plan(output: str, workers: Sequence[Worker]) -> tuple[list[PlannedTask], list[DroppedTask]]:
    """Like :func:`parse_plan`, but also returns the steps that were dropped, for reports that show them.

    JSON objects with string ``agent`` and ``task`` are collected wherever they appear (an array, bare, one
    per line, fenced, in prose), because asked for an array real planners also answer with bare objects. Only
    when no such object exists are ``agent: task`` lines read. An unknown agent is dropped, never mapped to a
    similar name: guessing what a hallucinated name meant is how a workflow silently does the wrong work.
    """
    by_name = {_name_key(worker.name): worker for worker in workers}
    pairs = list(_json_pairs(output)) or list(_line_pairs(output))
    plan: list[PlannedTask] = []
    dropped: list[DroppedTask] = []
    for agent, task in pairs:
        worker = by_name.get(_name_key(agent))
        task = task.strip()
        if worker is None or not task:
            dropped.append(DroppedTask(agent=agent, task=task))
        else:
            plan.append(PlannedTask(agent=worker, task=task))
    return plan, dropped


def decide_plan(planning: AgentResult, workers: Sequence[Worker], max_tasks: int = 8) -> PlanOutcome:
    """Accept or refuse the planner's plan before any worker starts.

    A plan over ``max_tasks`` is refused, never truncated: every task is a session and a bill, so a runaway
    plan must fail before anything is spawned, and running only the first few would do work nobody asked for.
    """
    _check_limits(workers, max_tasks)
    text = planner_text(planning.output)
    if planning.outcome != "ok":
        reason = planning.error or "no error message"
        return _refuse(planning, f"The planner step ended {planning.outcome}: {reason}.", text)
    plan = parse_plan(text, workers)
    if not plan:
        names = ", ".join(worker.name for worker in workers)
        return _refuse(planning, f"The planner named no task for a known agent ({names}).", text)
    if len(plan) > max_tasks:
        message = (
            f"The planner proposed {len(plan)} tasks, more than the limit of {max_tasks}; nothing was run."
        )
        return _refuse(planning, message, text)
    return PlanOutcome(plan=plan, planning=planning, ok=True)


def planner_text(output: Any) -> str:
    """The planner's output as text: a reply is used as is, a structured submission as its JSON."""
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, default=str)


def _check_limits(workers: Sequence[Worker], max_tasks: int) -> None:
    if not workers:
        raise ValueError("A plan needs at least one worker to delegate to.")
    if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
        raise ValueError(f"max_tasks must be an integer of at least 1, got {max_tasks!r}.")


def _refuse(planning: AgentResult, reason: str, text: str) -> PlanOutcome:
    return PlanOutcome(plan=[], planning=planning, ok=False, error=f"{reason} {_quote(text)}")


def _quote(text: str) -> str:
    if not text.strip():
        return "The planner wrote nothing."
    quoted = f"The planner wrote:\n{text[:QUOTE_CHARS]}"
    if len(text) > QUOTE_CHARS:
        quoted += f"\n[quoted the first {QUOTE_CHARS:,} of {len(text):,} characters]"
    return quoted


def _name_key(name: str) -> str:
    return name.strip().casefold()


# --- JSON objects anywhere ---------------------------------------------------------------------------------

_SIGNIFICANT = re.compile(r'[{}"\\]')


def _json_pairs(text: str) -> Iterator[tuple[str, str]]:
    """Every ``{"agent": str, "task": str}`` object in ``text``, outermost first, in order of appearance.

    Each ``{`` not inside an already read span starts a candidate. A span that parses but does not qualify (a
    wrapper such as ``{"plan": [...]}``) is searched through its parsed value; one that does not parse (prose
    in braces, a truncated object) is looked inside by moving on to the next ``{``.
    """
    closing: dict[int, int | None] = {}
    start = text.find("{")
    while start != -1:
        end = _closing_brace(text, start, closing)
        value = _loads(text[start : end + 1]) if end is not None else _INVALID
        if value is _INVALID or end is None:
            start = text.find("{", start + 1)
            continue
        yield from _pairs_in(value)
        start = text.find("{", end + 1)


_INVALID = object()


def _loads(span: str) -> Any:
    try:
        return json.loads(span)
    except (ValueError, RecursionError):  # deeply nested input exhausts the decoder's stack
        return _INVALID


def _pairs_in(value: Any) -> Iterator[tuple[str, str]]:
    """Qualifying objects inside a parsed value, outermost first, in document order (no recursion limit)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            agent, task = item.get("agent"), item.get("task")
            if isinstance(agent, str) and isinstance(task, str):
                yield agent, task
            else:
                stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def _closing_brace(text: str, start: int, closing: dict[int, int | None]) -> int | None:
    """Index of the ``}`` that balances ``text[start]``, treating braces inside JSON strings as text.

    One pass records the partner of every ``{`` it meets outside a string in ``closing`` (``None`` when it
    never closes). A later scan reaching a recorded brace outside a string would retrace the same path, so it
    jumps over it instead; that keeps the whole parse close to linear even for long text full of stray braces.
    """
    if start in closing:
        return closing[start]
    stack = [start]
    in_string = False
    pos = start + 1
    while stack:
        match = _SIGNIFICANT.search(text, pos)
        if match is None:
            break
        index = match.start()
        char = text[index]
        pos = index + 1
        if in_string:
            if char == "\\":
                pos += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            if index not in closing:
                stack.append(index)
                continue
            known = closing[index]
            if known is None:
                break  # that brace never closes, so nothing opened before it can close either
            pos = known + 1
        elif char == "}":
            closing[stack.pop()] = index
            if not stack:
                return index
    for index in stack:
        closing[index] = None
    return None


# --- `agent: task` lines ---------------------------------------------------------------------------------

_LINE = re.compile(
    r"^[ \t]*(?:(?:[-*]|\d+\.)[ \t]*)?(?P<agent>[^:\n]+?)[ \t]*:(?P<task>[^\n]*)$", re.MULTILINE
)


def _line_pairs(text: str) -> Iterator[tuple[str, str]]:
    """``agent: task`` lines, optionally after a ``-``, ``*`` or ``1.`` bullet: the fallback format."""
    for match in _LINE.finditer(text):
        yield match.group("agent").strip(), match.group("task").strip()
