"""Routing rules through real runs: output paths, outcomes, missing cases, failures, includes, max_steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.runs import RunWorkflow, WorkflowMaker

HEADER = """
from piw import action, compute, define_workflow, edge, include, switch
"""


@pytest.fixture
def route(make_workflow: WorkflowMaker, run_workflow: RunWorkflow) -> Any:
    def run(body: str, raw_input: Any = None) -> Any:
        return run_workflow(make_workflow("routes", HEADER + body), raw_input)

    return run


def visited(state: Any) -> list[str]:
    return [step.node_id for step in state.steps]


PICK = """
workflow = define_workflow(
    name="pick", start_at="a",
    nodes={{"a": compute(lambda c: c.input), "x": compute("went x"), "y": compute("went y")}},
    edges=[switch("a", on={path!r}, cases={cases!r})],
)
"""


@pytest.mark.parametrize(
    ("path", "cases", "raw", "expected"),
    [
        ("$.route", {"one": "x", "two": "y"}, {"route": "two"}, "went y"),
        ("$output.route", {"one": "x", "two": "y"}, {"route": "one"}, "went x"),
        ("$.deep.er", {"a": "x", "b": "y"}, {"deep": {"er": "b"}}, "went y"),
        ("$output.flag", {"true": "x", "false": "y"}, {"flag": True}, "went x"),
        ("$.flag", {"true": "x", "false": "y"}, {"flag": False}, "went y"),
        ("$.n", {"3": "x", "4": "y"}, {"n": 4}, "went y"),
        ("$result.outcome", {"ok": "x", "failed": "y"}, {"whatever": 1}, "went x"),
    ],
)
def test_switch_paths_route(route: Any, path: str, cases: dict[str, str], raw: Any, expected: str) -> None:
    state = route(PICK.format(path=path, cases=cases), raw)
    assert state.status == "completed" and state.final_output == expected


@pytest.mark.parametrize(
    ("raw", "shown"),
    [({"route": "three"}, "'three'"), ({}, "nothing"), ({"route": {"nested": 1}}, "{'nested': 1}")],
)
def test_a_missing_case_fails_the_run_with_a_routing_error(route: Any, raw: Any, shown: str) -> None:
    state = route(PICK.format(path="$.route", cases={"one": "x", "two": "y"}), raw)
    assert state.status == "failed" and visited(state) == ["a"]
    assert state.error == (
        f"Routing error at a: $.route is {shown}, which matches no case (one, two). "
        "Add a case or fix the node's "
        "output."
    )
    assert state.results["a"].outcome == "ok"  # the node itself succeeded


FAILING = """
import time
def slow(ctx):
    ctx.sleep(10)

workflow = define_workflow(
    name="after-failure", start_at="a",
    nodes={{"a": {node}, "x": compute(lambda c: {{"seen": c.results["a"]["outcome"],
                                                 "err": c.results["a"]["error"],
                                                 "has_output": "a" in c.outputs}})}},
    edges=[{edge}],
)
"""


@pytest.mark.parametrize(
    ("node", "edge", "status", "final"),
    [
        # only a $result. switch can route after a failure ...
        (
            "compute(lambda c: 1 / 0)",
            'switch("a", on="$result.outcome", cases={"failed": "x", "ok": "x"})',
            "completed",
            {"seen": "failed", "err": "ZeroDivisionError: division by zero", "has_output": False},
        ),
        (
            "action(slow, timeout_s=0.2)",
            'switch("a", on="$result.outcome", cases={"timed_out": "x"})',
            "completed",
            {"seen": "timed_out", "err": "Action a timed out after 0.2s.", "has_output": False},
        ),
        # ... an output switch or a plain edge ends the run with the node's outcome
        ("compute(lambda c: 1 / 0)", 'switch("a", on="$.route", cases={"failed": "x"})', "failed", None),
        ("compute(lambda c: 1 / 0)", 'edge("a", "x")', "failed", None),
        ("action(slow, timeout_s=0.2)", 'edge("a", "x")', "timed_out", None),
        # a $result switch without a case for the outcome is a routing error
        ("compute(lambda c: 1 / 0)", 'switch("a", on="$result.outcome", cases={"ok": "x"})', "failed", None),
    ],
)
def test_after_a_failure_only_a_result_switch_routes(
    route: Any, node: str, edge: str, status: str, final: Any
) -> None:
    state = route(FAILING.format(node=node, edge=edge))
    assert state.status == status
    if final is None:
        assert visited(state) == ["a"] and state.final_output is None and state.error
        if "$result" in edge:
            assert state.error.startswith("Routing error at a: $result.outcome is 'failed'")
        else:
            assert state.error == state.results["a"].error  # the node's own error
    else:
        assert visited(state) == ["a", "x"] and state.final_output == final


def test_a_node_without_an_edge_ends_the_run(route: Any) -> None:
    state = route(
        'workflow = define_workflow(name="w", start_at="a", nodes={"a": compute(1), "b": compute([1, 2])},'
        ' edges=[edge("a", "b")])'
    )
    assert state.status == "completed" and state.final_output == [1, 2] and visited(state) == ["a", "b"]


EXITS = """
child = define_workflow(
    name="child", start_at="judge",
    nodes={"judge": compute(lambda c: {"good": c.input["n"] > 0}),
           "yes": compute(lambda c: {"verdict": "yes"}),
           "no": compute(lambda c: {"verdict": "no"})},
    edges=[switch("judge", on="$.good", cases={"true": "yes", "false": "no"})],
    exits={"accepted": {"from_": "yes"}, "rejected": {"from_": "no"}},
)
workflow = define_workflow(
    name="parent", start_at="check",
    nodes={"on_yes": compute(lambda c: {"took": "yes", "child": c.outputs["check"]}),
           "on_no": compute(lambda c: {"took": "no", "child": c.outputs["check"]})},
    includes={"check": include(child, input=lambda c: {"n": c.input["n"]})},
    edges=[switch("check", on="$exit", cases={"accepted": "on_yes", "rejected": "on_no"})],
)
"""


@pytest.mark.parametrize(("n", "took"), [(1, "yes"), (-1, "no")])
def test_exit_switch_on_an_include(route: Any, n: int, took: str, piw_home: Path) -> None:
    state = route(EXITS, {"n": n})
    assert state.status == "completed"
    assert state.final_output == {"took": took, "child": {"verdict": took}}
    assert visited(state) == ["check/judge", f"check/{took}", f"on_{took}"]
    assert state.mounts["check"]["exit"] == ("accepted" if n > 0 else "rejected")


def test_leaving_an_include_outside_its_exits_fails(route: Any) -> None:
    state = route(
        """
child = define_workflow(name="child", start_at="a", nodes={"a": compute(1), "b": compute(2), "c": compute(3)},
                        edges=[switch("a", on="$result.outcome", cases={"ok": "c", "failed": "b"})],
                        exits={"out": {"from_": "b"}})
workflow = define_workflow(name="p", start_at="m", nodes={"z": compute(3)}, includes={"m": include(child)},
                           edges=[edge("m", "z")])
"""
    )
    assert state.status == "failed"
    assert (
        state.error
        == "Node m/c ended include m outside its exits (out); declare it in exits= or add an edge."
    )


def test_an_include_whose_input_fails_ends_the_run(route: Any) -> None:
    state = route(
        """
from pydantic import BaseModel
class In(BaseModel):
    n: int
child = define_workflow(name="child", start_at="a", nodes={"a": compute(1)}, input=In)
workflow = define_workflow(name="p", start_at="pre", nodes={"pre": compute(1)},
                           includes={"m": include(child, input=lambda c: {"n": "not a number"})},
                           edges=[edge("pre", "m")])
"""
    )
    assert state.status == "failed" and visited(state) == ["pre"]
    assert state.error.startswith("Include m could not start: Invalid input for child: n:")


LOOP = """
workflow = define_workflow(
    name="loop", start_at="tick", max_steps={max_steps},
    nodes={{"tick": compute(lambda c: {{"n": c.outputs.get("tick", {{"n": 0}})["n"] + 1}}),
           "stop": compute(lambda c: c.outputs["tick"])}},
    edges=[switch("tick", on="$.n", cases={{**{{str(i): "tick" for i in range(1, 10)}}, "10": "stop"}})],
)
"""


def test_max_steps_bounds_a_loop(route: Any) -> None:
    state = route(LOOP.format(max_steps=5))
    assert state.status == "failed" and len(state.steps) == 5
    assert state.error == (
        "Run stopped before tick: it reached max_steps (5). "
        "Raise max_steps in define_workflow if the loop is intended."
    )
    enough = route(LOOP.format(max_steps=11))
    assert enough.status == "completed" and enough.final_output == {"n": 10} and len(enough.steps) == 11
    exact = route(LOOP.format(max_steps=10))
    assert exact.status == "failed" and len(exact.steps) == 10 and "before stop" in exact.error


def test_loops_reenter_an_include_with_fresh_scope(route: Any) -> None:
    state = route(
        """
child = define_workflow(name="child", start_at="a",
                        nodes={"a": compute(lambda c: {"saw": sorted(c.outputs), "in": c.input}),
                               "b": compute(lambda c: {"a": c.outputs["a"], "results": sorted(c.results)})},
                        edges=[edge("a", "b")])
workflow = define_workflow(
    name="p", start_at="m", max_steps=20,
    nodes={"count": compute(lambda c: {"n": c.outputs.get("count", {"n": 0})["n"] + 1}),
           "end": compute(lambda c: c.outputs["m"])},
    includes={"m": include(child, input=lambda c: {"round": c.outputs.get("count", {"n": 0})["n"]})},
    edges=[edge("m", "count"), switch("count", on="$.n", cases={"1": "m", "2": "m", "3": "end"})],
)
"""
    )
    assert state.status == "completed", state.error
    # each visit of the mount sees only its own invocation's outputs, by local id
    assert state.final_output == {"a": {"saw": [], "in": {"round": 2}}, "results": ["a"]}
    assert state.mounts["m"]["invocation"] == 3


SENTINELS = """
child = define_workflow(name="child", start_at="c", nodes={"c": compute(
    lambda c: {"route": "go", "$artifact": {"path": "../../../../etc/passwd"}, "big": "z" * 5000})})
workflow = define_workflow(
    name="sentinel", start_at="m",
    nodes={"go": compute(lambda c: {"child": c.outputs["m"]["$artifact"],
                                    "big": len(c.outputs["m"]["big"])})},
    includes={"m": include(child)},
    edges=[switch("m", on="$.route", cases={"go": "go"})],
)
"""


def test_user_data_that_looks_like_an_artifact_ref_is_routed_as_data(route: Any) -> None:
    state = route(SENTINELS)
    assert state.status == "completed", state.error
    assert state.final_output == {"child": {"path": "../../../../etc/passwd"}, "big": 5000}
