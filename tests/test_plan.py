"""Plan parsing and the go/no-go decision (agent-steps.md §9, acceptance 39 and 40)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from piw.plan import (
    QUOTE_CHARS,
    AgentResult,
    DroppedTask,
    PlannedTask,
    Worker,
    decide_plan,
    parse_plan,
    planning_prompt,
    read_plan,
)

ANALYST = Worker("analyst", "Reads the data and reports findings.")
WRITER = Worker("writer", "Writes prose.")
WORKERS = [ANALYST, WRITER]
EXPECTED = [PlannedTask(ANALYST, "Study the logs"), PlannedTask(WRITER, "Draft the summary")]


def pairs(plan: list[PlannedTask]) -> list[tuple[str, str]]:
    return [(item.agent.name, item.task) for item in plan]


# --- acceptance 39: every shape a planner really writes gives the same plan, in order of appearance ---------

A = '{"agent": "analyst", "task": "Study the logs"}'
B = '{"agent": "writer", "task": "Draft the summary"}'
SHAPES = {
    "array": f"[{A}, {B}]",
    "bare objects": f"{A} {B}",
    "one per line": f"{A}\n{B}\n",
    "fenced": '```json\n[\n  {"agent": "analyst", "task": "Study the logs"},\n'
    '  {"agent": "writer", "task": "Draft the summary"}\n]\n```',
    "fenced without language": '```\n{"agent": "analyst", "task": "Study the logs"}\n'
    '{"agent": "writer", "task": "Draft the summary"}\n```',
    "prose": 'Here is my plan. First {"agent": "analyst", "task": "Study the logs"}, and then, once that is '
    'done, {"agent": "writer", "task": "Draft the summary"}. Let me know {if this works}.',
    "wrapper object": '{"plan": [{"agent": "analyst", "task": "Study the logs"}, '
    '{"agent": "writer", "task": "Draft the summary"}], "notes": "two steps"}',
    "lines": "analyst: Study the logs\nwriter: Draft the summary",
    "dash bullets": "Plan:\n- analyst: Study the logs\n- writer: Draft the summary\n",
    "star bullets": "* analyst: Study the logs\n* writer: Draft the summary",
    "numbered": "1. analyst: Study the logs\n2. writer: Draft the summary",
}


@pytest.mark.parametrize("text", SHAPES.values(), ids=SHAPES.keys())
def test_every_shape_gives_the_same_plan(text: str) -> None:
    assert parse_plan(text, WORKERS) == EXPECTED


def test_braces_inside_strings_do_not_break_spans() -> None:
    text = (
        'Plan: {"agent": "analyst", "task": "Check {x} and } and {{"} then {"agent": "writer", "task": "Go"}'
    )
    assert pairs(parse_plan(text, WORKERS)) == [("analyst", "Check {x} and } and {{"), ("writer", "Go")]


def test_escaped_quotes_stay_inside_the_string() -> None:
    text = r'{"agent": "writer", "task": "Quote \"{the\" report}\\"} trailing }'
    assert pairs(parse_plan(text, WORKERS)) == [("writer", 'Quote "{the" report}\\')]


def test_nested_spans_are_searched_and_outermost_qualifying_object_wins() -> None:
    text = (
        '{"meta": {"planner": "v1"}, "steps": {"first": {"agent": "analyst", "task": "A", '
        '"sub": {"agent": "writer", "task": "inner"}}}} {"agent": "writer", "task": "B"}'
    )
    assert pairs(parse_plan(text, WORKERS)) == [("analyst", "A"), ("writer", "B")]


def test_spans_that_do_not_parse_are_looked_inside() -> None:
    text = '{ the plan is: {"agent": "analyst", "task": "A"} and {"agent": "writer", "task": "B"} (roughly) }'
    assert pairs(parse_plan(text, WORKERS)) == [("analyst", "A"), ("writer", "B")]


def test_unbalanced_brace_and_stray_quote_before_the_plan() -> None:
    text = 'Sizes like 5" and a { that never closes.\n{"agent": "analyst", "task": "A"}'
    assert pairs(parse_plan(text, WORKERS)) == [("analyst", "A")]


def test_objects_need_string_agent_and_task() -> None:
    text = '{"agent": "analyst", "task": 3} {"agent": ["writer"], "task": "x"} {"agent": "writer"}'
    assert parse_plan(text, WORKERS) == []


def test_names_match_after_strip_ignoring_case_and_keep_the_declared_worker() -> None:
    text = '[{"agent": "  ANALYST ", "task": "A"}, {"agent": "Writer", "task": "B"}]'
    plan = parse_plan(text, WORKERS)
    assert [item.agent for item in plan] == [ANALYST, WRITER]


def test_unknown_agents_are_dropped_never_remapped() -> None:
    text = (
        '[{"agent": "writter", "task": "B"}, {"agent": "analyst", "task": "A"}, '
        '{"agent": "analysts", "task": "C"}]'
    )
    plan, dropped = read_plan(text, WORKERS)
    assert pairs(plan) == [("analyst", "A")]
    assert dropped == [DroppedTask("writter", "B"), DroppedTask("analysts", "C")]


def test_empty_tasks_are_dropped_and_tasks_are_stripped() -> None:
    text = '[{"agent": "analyst", "task": "   "}, {"agent": "writer", "task": "  B \\n"}]'
    assert pairs(parse_plan(text, WORKERS)) == [("writer", "B")]


def test_lines_are_read_only_when_no_object_qualifies() -> None:
    text = 'analyst: from a line\n{"agent": "writer", "task": "from JSON"}'
    assert pairs(parse_plan(text, WORKERS)) == [("writer", "from JSON")]
    # An object naming an unknown agent still qualifies, so the lines stay unread.
    assert parse_plan('{"agent": "nobody", "task": "x"}\nanalyst: y', WORKERS) == []


def test_lines_ignore_prose_and_keep_colons_in_the_task() -> None:
    text = (
        "Here is the plan:\n\n- Analyst: read http://example.com: carefully\nThanks!\n  3.  writer :  wrap up"
    )
    plan, dropped = read_plan(text, WORKERS)
    assert pairs(plan) == [("analyst", "read http://example.com: carefully"), ("writer", "wrap up")]
    assert dropped == [DroppedTask("Here is the plan", "")]


def test_nothing_usable_is_an_empty_plan() -> None:
    assert parse_plan("I could not decide.", WORKERS) == []
    assert parse_plan("", WORKERS) == []
    assert parse_plan("{}", WORKERS) == []


@given(st.lists(st.tuples(st.sampled_from(["analyst", "WRITER", "ghost"]), st.text(max_size=30)), max_size=6))
def test_any_json_array_round_trips(items: list[tuple[str, str]]) -> None:
    text = json.dumps([{"agent": agent, "task": task} for agent, task in items])
    expected = [(agent.lower(), task.strip()) for agent, task in items if agent != "ghost" and task.strip()]
    assert pairs(parse_plan(text, WORKERS)) == expected


@given(st.text(alphabet='{}[]":,\\ \nagentsk-*1.analyst', max_size=200))
def test_arbitrary_text_never_raises(text: str) -> None:
    for item in parse_plan(text, WORKERS):
        assert item.agent in WORKERS and item.task


def test_pathological_nesting_does_not_blow_up() -> None:
    deep = '{"a":' * 5_000 + "1" + "}" * 5_000
    assert parse_plan(deep + '{"agent": "analyst", "task": "A"}', WORKERS) == [PlannedTask(ANALYST, "A")]
    assert parse_plan("{" * 50_000, WORKERS) == []


# --- planning_prompt ----------------------------------------------------------------------------------------


def test_planning_prompt_lists_workers_and_the_answer_shape() -> None:
    prompt = planning_prompt("Review the release.", WORKERS, 3)
    assert "- analyst: Reads the data and reports findings.\n- writer: Writes prose." in prompt
    assert "at most 3 independent subtasks" in prompt
    assert '[{"agent": "name", "task": "…"}]' in prompt
    assert "Review the release." in prompt
    assert "no code fence" in prompt


# --- acceptance 40: decide_plan -----------------------------------------------------------------------------


def test_decide_plan_accepts_a_plan_within_the_limit() -> None:
    planning = AgentResult("ok", SHAPES["array"])
    outcome = decide_plan(planning, WORKERS, max_tasks=2)
    assert outcome.ok and outcome.error is None
    assert outcome.plan == EXPECTED
    assert outcome.planning is planning


def test_decide_plan_reads_a_structured_submission() -> None:
    output = [
        {"agent": "analyst", "task": "Study the logs"},
        {"agent": "writer", "task": "Draft the summary"},
    ]
    assert decide_plan(AgentResult("ok", output), WORKERS).plan == EXPECTED


def test_over_max_tasks_fails_quoting_the_planner_and_never_truncates() -> None:
    text = "\n".join(f"analyst: step {n}" for n in range(1, 5))
    outcome = decide_plan(AgentResult("ok", text), WORKERS, max_tasks=3)
    assert not outcome.ok
    assert outcome.plan == []
    assert outcome.error is not None
    assert "4 tasks" in outcome.error and "limit of 3" in outcome.error
    assert text in outcome.error


def test_nothing_usable_fails_quoting_the_planner() -> None:
    text = '[{"agent": "writter", "task": "Draft"}]'
    outcome = decide_plan(AgentResult("ok", text), WORKERS)
    assert not outcome.ok and outcome.plan == []
    assert outcome.error is not None and text in outcome.error


def test_the_quote_is_the_first_2000_characters() -> None:
    text = "x" * QUOTE_CHARS + "TAIL-NOT-QUOTED"
    outcome = decide_plan(AgentResult("ok", text), WORKERS)
    assert outcome.error is not None
    assert "x" * QUOTE_CHARS in outcome.error
    assert "TAIL-NOT-QUOTED" not in outcome.error


@pytest.mark.parametrize("outcome", ["failed", "timed_out", "cancelled"])
def test_a_failed_planner_fails_the_plan(outcome: str) -> None:
    planning = AgentResult(outcome, SHAPES["array"], error="model said no")  # type: ignore[arg-type]
    decided = decide_plan(planning, WORKERS)
    assert not decided.ok and decided.plan == []
    assert decided.error is not None
    assert outcome in decided.error and "model said no" in decided.error


def test_a_failed_planner_without_output_says_so() -> None:
    decided = decide_plan(AgentResult("failed", error="HTTP 500"), WORKERS)
    assert decided.error is not None and "HTTP 500" in decided.error and "wrote nothing" in decided.error


@pytest.mark.parametrize("max_tasks", [0, -1, True])
def test_bad_max_tasks_raises(max_tasks: int) -> None:
    with pytest.raises(ValueError, match="max_tasks"):
        decide_plan(AgentResult("ok", SHAPES["array"]), WORKERS, max_tasks=max_tasks)
    with pytest.raises(ValueError, match="max_tasks"):
        planning_prompt("x", WORKERS, max_tasks)


def test_no_workers_raises() -> None:
    with pytest.raises(ValueError, match="worker"):
        decide_plan(AgentResult("ok", SHAPES["array"]), [])
    with pytest.raises(ValueError, match="worker"):
        planning_prompt("x", [], 3)
