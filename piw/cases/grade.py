"""Grading one run of a case against its expectations: what differed, as readable text.

Each node's latest attempt is compared as its expectation says (``exact``, ``schema``, ``ignore``, ``check``); the
route and the status always exactly; the final output as the last node of the route is compared. Drift — a
prompt that changed, or nodes whose definition changed — comes from the replay and the definition pins
(``docs/testing.md``, "What a failure shows").
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from piw.cases.execute import Observed
from piw.cases.files import EXPECTED_FILE, Case, NodeExpectation, shown
from piw.cases.record import node_digests
from piw.errors import BrokenCase

Kind = Literal["status", "route", "output", "final", "prompt", "definition"]
DIFF_LINES = 40


@dataclass(frozen=True)
class Difference:
    """One thing that differed; ``text`` may span lines (a structural or unified diff)."""

    kind: Kind
    node: str | None
    text: str

    def headline(self) -> str:
        where = f" of {self.node}" if self.node else ""
        return {
            "status": "status",
            "route": "route",
            "output": f"output{where}",
            "final": "final output",
            "prompt": f"prompt drift{where}",
            "definition": "definition drift",
        }[self.kind]


def grade(case: Case, observed: Observed) -> list[Difference]:
    """Every difference between ``observed`` and the case's expectations (empty: the case passes)."""
    expected = case.expected
    found: list[Difference] = []
    if observed.status != expected.status:
        found.append(Difference("status", None, f"expected {expected.status}, got {observed.status}"))
        if observed.error:
            found[-1] = Difference("status", None, f"{found[-1].text}: {observed.error}")
    if observed.route != expected.route:
        found.append(Difference("route", None, _route_diff(expected.route, observed.route)))
    for node_id, expectation in expected.nodes.items():
        result = observed.nodes.get(node_id)
        if result is None:
            if expectation.expect != "ignore":
                found.append(Difference("output", node_id, "the node did not run"))
            continue
        problem = _node_problem(case, observed, node_id, expectation, result.outcome, result.output)
        if problem and result.error and result.outcome != expectation.outcome:
            problem = f"{problem}: {result.error}"
        if problem:
            found.append(Difference("output", node_id, problem))
    last = expected.route[-1] if expected.route else None
    final_rule = expected.nodes.get(last) if last else None
    if final_rule is None or final_rule.expect == "exact":
        ignore = final_rule.ignore_keys if final_rule else []
        lines = structural_diff(
            _without(expected.final_output, ignore), _without(observed.final_output, ignore)
        )
        if lines:
            found.append(Difference("final", None, "\n".join(lines)))
    changed = definition_changes(case, observed.snapshot)
    ref = case.case.workflow
    revision = observed.state.workflow_source.get("revision") if observed.state else None
    if ref.builtin is not None and revision is not None and str(revision) != ref.revision:
        moved = f"built-in {ref.builtin} is at revision {revision}; the case was recorded at revision {ref.revision}"
        changed = f"{moved}; {changed}" if changed else moved
    if changed:
        found.append(Difference("definition", None, changed))
    return found


def _route_diff(expected: Sequence[str], now: Sequence[str]) -> str:
    return f"expected {' → '.join(expected) or '(none)'}\n     got {' → '.join(now) or '(none)'}"


def definition_changes(case: Case, snapshot: dict[str, Any]) -> str | None:
    """Which nodes' definitions differ from the pinned ones (changed, added, removed), or ``None``."""
    pinned = case.case.definition.nodes
    if not pinned:
        return None
    now = node_digests(snapshot)
    changed = sorted(node for node in pinned.keys() & now.keys() if pinned[node] != now[node])
    added = sorted(now.keys() - pinned.keys())
    removed = sorted(pinned.keys() - now.keys())
    parts = [
        f"{label}: {', '.join(nodes)}"
        for label, nodes in (("changed", changed), ("added", added), ("removed", removed))
        if nodes
    ]
    return "; ".join(parts) or None


def _node_problem(
    case: Case, observed: Observed, node_id: str, rule: NodeExpectation, outcome: str, output: Any
) -> str | None:
    if rule.expect == "ignore":
        return None
    if outcome != rule.outcome:
        return f"outcome: expected {rule.outcome}, got {outcome}"
    if rule.expect == "exact":
        lines = structural_diff(_without(rule.output, rule.ignore_keys), _without(output, rule.ignore_keys))
        return "\n".join(lines) or None
    if rule.expect == "schema":
        return schema_problem(case, observed, node_id, output)
    return check_problem(case, observed, node_id, rule, output)


def schema_problem(case: Case, observed: Observed, node_id: str, output: Any) -> str | None:
    """Valid against the step's own schema only: its pydantic model, or an assistant reply's length cap."""
    from piw.workflow.definition import AgentNode, AssistantMessage

    field = f"nodes.{node_id}.expect"
    gnode = observed.workflow.graph.nodes.get(node_id) if observed.workflow else None
    node = gnode.node if gnode is not None else None
    if not isinstance(node, AgentNode):
        kind = getattr(node, "node_type", "unknown")
        raise BrokenCase(
            shown(case.folder / EXPECTED_FILE),
            field,
            f"node {node_id} ({kind}) has no schema; use exact, ignore or check",
        )
    schema = node.expected_output
    if isinstance(schema, AssistantMessage):
        if not isinstance(output, str):
            return f"expected an assistant reply (text), got {_kind(output)}"
        if schema.max_chars is not None and len(output) > schema.max_chars:
            return f"the reply has {len(output)} characters, more than its {schema.max_chars}"
        return None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(output)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "(value)"
            return f"not valid against {schema.__name__}: {where}: {first['msg']}"
    return None


def check_problem(
    case: Case, observed: Observed, node_id: str, rule: NodeExpectation, output: Any
) -> str | None:
    """Call ``FILE.py:function`` from the workflow's folder with ``(output, expected)``.

    It passes by returning ``None`` or ``True``; ``False``, a message string or an ``AssertionError`` fail it."""
    field = f"nodes.{node_id}.check"
    source = shown(case.folder / EXPECTED_FILE)
    file_name, _, function_name = str(rule.check).partition(":")
    folder = observed.workflow.path.parent if observed.workflow else case.project
    path = folder / file_name
    if not function_name or not file_name.endswith(".py"):
        raise BrokenCase(source, field, "use 'FILE.py:function' (a file in the workflow's folder)")
    if not path.is_file():
        raise BrokenCase(source, field, f"no file {file_name} beside the workflow")
    function = getattr(_module(path), function_name, None)
    if not callable(function):
        raise BrokenCase(source, field, f"{file_name} defines no function {function_name}")
    try:
        verdict = function(output, rule.output)
    except AssertionError as exc:
        return f"{rule.check}: {exc}" if str(exc) else f"{rule.check} failed"
    except Exception as exc:  # the check's own bug fails this node, not the whole test command
        return f"{rule.check} raised {type(exc).__name__}: {exc}"
    if verdict is None or verdict is True:
        return None
    return f"{rule.check}: {verdict}" if isinstance(verdict, str) else f"{rule.check} returned {verdict!r}"


def _module(path: Path) -> Any:
    name = "piw_case_check_" + str(abs(hash(str(path.resolve()))))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without(value: Any, keys: Sequence[str]) -> Any:
    if not keys:
        return value
    if isinstance(value, dict):
        return {key: _without(item, keys) for key, item in value.items() if key not in keys}
    if isinstance(value, list):
        return [_without(item, keys) for item in value]
    return value


def structural_diff(expected: Any, now: Any, limit: int = DIFF_LINES) -> list[str]:
    """Lines naming each JSON path whose value differs: ``$.reason: expected "a", got "b"`` (empty: equal)."""
    lines = list(_walk("$", expected, now))
    if len(lines) > limit:
        lines = [*lines[:limit], f"… {len(lines) - limit} more differences"]
    return lines


def _walk(path: str, expected: Any, now: Any) -> Iterator[str]:
    if isinstance(expected, dict) and isinstance(now, dict):
        for key in expected:
            where = f"{path}.{key}"
            if key not in now:
                yield f"{where}: missing (expected {_short(expected[key])})"
            else:
                yield from _walk(where, expected[key], now[key])
        for key in now:
            if key not in expected:
                yield f"{path}.{key}: unexpected {_short(now[key])}"
        return
    if isinstance(expected, list) and isinstance(now, list):
        for index, (a, b) in enumerate(zip(expected, now, strict=False)):
            yield from _walk(f"{path}[{index}]", a, b)
        if len(expected) != len(now):
            yield f"{path}: expected {len(expected)} items, got {len(now)}"
        return
    if isinstance(expected, str) and isinstance(now, str) and expected != now and _long(expected, now):
        yield f"{path}: the text differs:"
        diff = difflib.unified_diff(
            expected.splitlines(), now.splitlines(), "expected", "got", lineterm="", n=1
        )
        yield from (f"  {line}" for line in diff)
        return
    if expected != now or type(expected) is not type(now):
        yield f"{path}: expected {_short(expected)}, got {_short(now)}"


def _long(*texts: str) -> bool:
    """Text a line-by-line diff shows better than two quoted values: several lines, or longer than a line."""
    return any("\n" in text or len(text) > 100 for text in texts)


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


def _kind(value: Any) -> str:
    return type(value).__name__
