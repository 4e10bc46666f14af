"""The definition DSL: helpers check their arguments at once and return frozen values."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel

from piw import (
    DefinitionError,
    ShellCommand,
    ShellUpdates,
    action,
    agent,
    assistant_message,
    checkpoint,
    compute,
    decision,
    define_workflow,
    edge,
    human_decision,
    include,
    notify,
    shell,
    switch,
)


class Out(BaseModel):
    route: str


def small(**extra: Any) -> Any:
    return define_workflow(name="w", start_at="a", nodes={"a": compute(1)}, **extra)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: agent(prompt=5), "prompt must be"),
        (lambda: agent(prompt="p", expected_output=5), "expected_output"),
        (lambda: agent(prompt="p", expected_output=dict), "expected_output"),
        (lambda: agent(prompt="p", expected_output=assistant_message(), validate=lambda v, c: v), "validate"),
        (lambda: agent(prompt="p", validate="no"), "validate must be a function"),
        (lambda: agent(prompt="p", timeout_s=0), "timeout_s"),
        (lambda: agent(prompt="p", timeout_s=float("inf")), "timeout_s"),
        (lambda: agent(prompt="p", timeout_s=True), "timeout_s"),
        (lambda: agent(prompt="p", timeout_s="10"), "timeout_s"),
        (lambda: agent(prompt="p", status_detail=3), "status_detail"),
        (lambda: agent(prompt="p", tools="bash"), "tools"),
        (lambda: agent(prompt="p", tools=["workflow"]), "reserved"),
        (lambda: assistant_message(max_chars=0), "max_chars"),
        (lambda: assistant_message(max_chars=True), "max_chars"),
        (lambda: decision("q", []), "choices"),
        (lambda: decision("q", ["a", ""]), "choices"),
        (lambda: action("not callable"), "action run"),
        (lambda: action(lambda c: 1, effect=3), "effect"),
        (lambda: action(lambda c: 1, timeout_s=-1), "timeout_s"),
        (lambda: shell(42), "shell exec"),
        (lambda: shell(ShellCommand("true"), parse="x"), "parse"),
        (lambda: shell(ShellCommand("true"), updates=lambda line, ctx: None), "ShellUpdates"),
        (lambda: ShellUpdates(parse_line=lambda line, ctx: None, streams=()), "streams"),
        (lambda: ShellUpdates(parse_line=lambda line, ctx: None, streams=("stdout", "stdout")), "repeat"),
        (lambda: ShellUpdates(parse_line=lambda line, ctx: None, streams=("stdin",)), "streams"),
        (lambda: ShellUpdates(parse_line="x"), "parse_line"),
        (lambda: notify(5), "notify message"),
        (lambda: notify("hi", kind="loud"), "kind"),
        (lambda: human_decision("", ["yes"], "ok?"), "audience"),
        (lambda: human_decision("ops", [], "ok?"), "choices"),
        (lambda: human_decision("ops", ["yes"], 7), "request"),
        (lambda: human_decision("ops", ["yes"], "ok?", on_timeout=3), "on_timeout"),
        (lambda: include(object()), "include child"),
        (lambda: edge("a", 3), "edge"),
        (lambda: switch(3, on="$.x", cases={"a": "b"}), "source"),
        (lambda: switch("a", on="route", cases={"a": "b"}), "switch on"),
        (lambda: switch("a", on="$result.output", cases={"a": "b"}), "switch on"),
        (lambda: switch("a", on="$.x", cases={}), "cases"),
        (lambda: switch("a", on="$.x", cases={1: "b"}), "cases"),
    ],
)
def test_helper_arguments_are_checked_at_once(make: Any, needle: str) -> None:
    with pytest.raises(DefinitionError, match=None) as info:
        make()
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"name": ""}, "name"),
        ({"nodes": {}}, "nodes must be a non-empty mapping"),
        ({"nodes": {"a": lambda c: 1}}, "is not a node"),
        ({"nodes": {"1a": compute(1)}, "start_at": "1a"}, "must match"),
        ({"nodes": {"a/b": compute(1)}, "start_at": "a/b"}, "must match"),
        ({"start_at": ""}, "start_at"),
        ({"edges": ["a->b"]}, "edges must be"),
        ({"exits": {"done": "a"}}, "from_"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": True}, "max_steps"),
        ({"title": 5}, "title"),
        ({"input": 5}, "input"),
        ({"includes": {"a": include(small())}}, "same id as a node"),
        ({"includes": {"m": small()}}, "include(child"),
    ],
)
def test_define_workflow_shape_errors(kwargs: dict[str, Any], needle: str) -> None:
    base: dict[str, Any] = {"name": "w", "start_at": "a", "nodes": {"a": compute(1)}}
    with pytest.raises(DefinitionError) as info:
        define_workflow(**{**base, **kwargs})
    assert needle in str(info.value)


def test_valid_definitions_are_frozen_values() -> None:
    child = small(exits={"out": {"from_": "a"}})
    workflow = define_workflow(
        name="full",
        start_at="ask",
        nodes={
            "ask": agent(
                prompt=lambda c: "go", expected_output=Out, timeout_s=lambda c: 5.0, tools=("bash",)
            ),
            "reply": agent(prompt="say", expected_output=assistant_message(max_chars=80)),
            "pick": decision("which?", ["x", "y"]),
            "calc": compute(lambda c: 1, status_detail="adding"),
            "do": action(lambda c: None, effect="idempotent", timeout_s=2),
            "run": shell({"command": "true"}),
            "tell": notify("hi", kind="final"),
            "wait": checkpoint(),
            "gate": human_decision("ops", ("yes", "no"), "approve?"),
        },
        includes={"sub": include(child, input={"k": 1})},
        description="every helper",
        contract_id="full.v1",
        revision=2,
        max_steps=7,
    )
    assert workflow.nodes["reply"].completion == "assistant"  # type: ignore[union-attr]
    assert workflow.nodes["ask"].completion == "submit"  # type: ignore[union-attr]
    assert workflow.nodes["run"].node_type == "action"
    assert workflow.exits == {} and child.exits == {"out": "a"}
    assert workflow.max_steps == 7 and workflow.revision == 2
    assert workflow.source_file == __file__  # the file that called define_workflow
    with pytest.raises(dataclasses.FrozenInstanceError):
        workflow.name = "other"  # type: ignore[misc]


def test_decision_validates_the_choice() -> None:
    node = decision("pick", ["bug", "feature"], field="kind")
    assert node.validate is not None
    assert node.validate({"kind": "bug"}, None) == {"kind": "bug"}  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one of: bug, feature"):
        node.validate({"kind": "other"}, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["$.route", "$output.route", "$.a.b-c_d", "$result.outcome", "$exit"])
def test_switch_paths(path: str) -> None:
    assert switch("a", on=path, cases={"x": "b"}).on == path
