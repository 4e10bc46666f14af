"""Run-start validation, include flattening (mount-path ids) and the definition snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from piw import (
    DefinitionError,
    action,
    agent,
    assistant_message,
    compute,
    define_workflow,
    edge,
    human_decision,
    include,
    shell,
    switch,
)
from piw.workflow.graph import definition_digest, flatten, snapshot, successors
from piw.workflow.loader import load_workflow


class Verdict(BaseModel):
    ok: bool


def inner() -> Any:
    return define_workflow(
        name="inner",
        start_at="i1",
        nodes={"i1": compute(1), "i2": compute(2)},
        edges=[edge("i1", "i2")],
    )


def child() -> Any:
    return define_workflow(
        name="child",
        start_at="c1",
        nodes={"c1": compute(1), "good": compute(2), "bad": compute(3)},
        includes={"deep": include(inner())},
        edges=[edge("c1", "deep"), switch("deep", on="$.v", cases={"1": "good", "2": "bad"})],
        exits={"yes": {"from_": "good"}, "no": {"from_": "bad"}},
    )


def parent() -> Any:
    return define_workflow(
        name="parent",
        start_at="pre",
        nodes={"pre": compute(1), "accept": compute(2), "reject": compute(3)},
        includes={"sub": include(child(), input=lambda c: {"k": 1})},
        edges=[edge("pre", "sub"), switch("sub", on="$exit", cases={"yes": "accept", "no": "reject"})],
    )


def test_includes_flatten_to_mount_path_ids() -> None:
    graph = flatten(parent())
    assert sorted(graph.nodes) == [
        "accept",
        "pre",
        "reject",
        "sub/bad",
        "sub/c1",
        "sub/deep/i1",
        "sub/deep/i2",
        "sub/good",
    ]
    deep = graph.nodes["sub/deep/i2"]
    assert (deep.local_id, deep.mount_path) == ("i2", ("sub", "deep"))
    assert graph.mounts["sub"].start == "sub/c1"
    assert graph.mounts["sub"].exits == {"yes": "sub/good", "no": "sub/bad"}
    assert graph.mounts["sub/deep"].exits == {"done": "sub/deep/i2"}  # one terminal: implicit "done"
    assert successors(graph, "pre") == ["sub/c1"]
    assert successors(graph, "sub/c1") == ["sub/deep/i1"]
    assert sorted(successors(graph, "sub/deep/i2")) == ["sub/bad", "sub/good"]
    assert sorted(successors(graph, "sub/good")) == ["accept", "reject"]


def test_a_start_that_is_an_include_enters_it() -> None:
    workflow = define_workflow(
        name="p",
        start_at="m",
        nodes={"after": compute(1)},
        includes={"m": include(inner())},
        edges=[edge("m", "after")],
    )
    graph = flatten(workflow)
    assert graph.start_at == "m/i1"
    assert successors(graph, "m/i2") == ["after"]


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (
            lambda: define_workflow(name="w", start_at="zz", nodes={"a": compute(1)}),
            "start_at 'zz' is not a node",
        ),
        (
            lambda: define_workflow(name="w", start_at="a", nodes={"a": compute(1)}, edges=[edge("q", "a")]),
            "edge from unknown node 'q'",
        ),
        (
            lambda: define_workflow(
                name="w",
                start_at="a",
                nodes={"a": compute(1), "b": compute(1)},
                edges=[edge("a", "b"), switch("a", on="$.x", cases={"1": "b"})],
            ),
            "more than one outgoing edge",
        ),
        (
            lambda: define_workflow(
                name="w",
                start_at="a",
                nodes={"a": compute(1)},
                edges=[switch("a", on="$.x", cases={"1": "zz"})],
            ),
            "targets unknown node 'zz'",
        ),
        (
            lambda: define_workflow(
                name="w",
                start_at="a",
                nodes={"a": compute(1), "b": compute(1)},
                edges=[switch("a", on="$exit", cases={"done": "b"})],
            ),
            "'$exit' needs an include",
        ),
        (
            lambda: define_workflow(name="w", start_at="a", nodes={"a": compute(1), "b": compute(1)}),
            "node 'b' is unreachable",
        ),
        (
            lambda: define_workflow(
                name="w",
                start_at="a",
                nodes={"a": compute(1)},
                includes={
                    "m": include(
                        define_workflow(
                            name="c", start_at="x", nodes={"x": compute(1)}, exits={"out": {"from_": "nope"}}
                        )
                    )
                },
                edges=[edge("a", "m")],
            ),
            "exit 'out' names unknown node 'nope'",
        ),
        (
            lambda: define_workflow(
                name="w",
                start_at="a",
                nodes={"a": compute(1)},
                includes={
                    "m": include(
                        define_workflow(name="c", start_at="x", nodes={"x": compute(1), "lost": compute(2)})
                    )
                },
                edges=[edge("a", "m")],
            ),
            "workflow 'c': node 'lost' is unreachable",
        ),
    ],
)
def test_run_start_validation(build: Any, needle: str) -> None:
    with pytest.raises(DefinitionError) as info:
        flatten(build())
    assert needle in str(info.value)


def test_unknown_tools_are_refused_when_a_registry_is_given() -> None:
    workflow = define_workflow(name="w", start_at="a", nodes={"a": agent(prompt="x", tools=["grep", "nope"])})
    flatten(workflow)  # without a registry the tool names are not checked
    with pytest.raises(DefinitionError, match="unknown tool 'nope'"):
        flatten(workflow, tools_known={"grep"}.__contains__)


def test_include_cycle_is_found_by_identity_not_by_name() -> None:
    leaf = define_workflow(name="same", start_at="x", nodes={"x": compute(1)})
    # A different workflow that happens to share its parent's name is not a cycle.
    top = define_workflow(
        name="same",
        start_at="m",
        nodes={"y": compute(1)},
        includes={"m": include(leaf)},
        edges=[edge("m", "y")],
    )
    assert "m/x" in flatten(top).nodes
    leaf.includes["back"] = include(top)  # closing the loop needs mutation; the DSL alone cannot build one
    with pytest.raises(DefinitionError, match=r"include cycle \(same → same → same\)"):
        flatten(top)


def test_a_built_in_named_by_id_is_mounted_only_by_the_loader(tmp_path: Path) -> None:
    """``include("id")`` in a definition built in Python names a built-in the loader never saw: flattening says so."""
    top = define_workflow(
        name="top",
        start_at="s",
        nodes={"y": compute(1)},
        includes={"s": include("plain-summary", input={"source": "S.", "purpose": "P"})},
        edges=[edge("s", "y")],
    )
    with pytest.raises(DefinitionError, match=r"include 's' names the built-in 'plain-summary'"):
        flatten(top)
    path = tmp_path / "top.workflow.py"
    path.write_text(
        "from piw import compute, define_workflow, edge, include\n"
        "workflow = define_workflow(name='top', start_at='s', nodes={'y': compute(1)},\n"
        "    includes={'s': include('plain-summary', input={'source': 'S.', 'purpose': 'P'})},\n"
        "    edges=[edge('s', 'y')])\n",
        encoding="utf-8",
    )
    assert "s/summarize" in load_workflow(path, tmp_path).graph.nodes


def test_snapshot_is_json_without_functions_and_digest_is_stable() -> None:
    def build() -> Any:
        return define_workflow(
            name="snap",
            start_at="ask",
            contract_id="snap.v1",
            revision="7",
            max_steps=9,
            nodes={
                "ask": agent(prompt=lambda c: "x", expected_output=Verdict, status_detail="asking"),
                "reply": agent(
                    prompt="y", expected_output=assistant_message(max_chars=50), timeout_s=lambda c: 3
                ),
                "act": action(lambda c: 1, effect="idempotent"),
                "cmd": shell(lambda c: {"command": "true"}, timeout_s=2.5),
                "gate": human_decision("ops", ["yes", "no"], "ok?"),
            },
            includes={"sub": include(inner())},
            edges=[
                edge("ask", "reply"),
                edge("reply", "act"),
                edge("act", "cmd"),
                edge("cmd", "sub"),
                edge("sub", "gate"),
            ],
        )

    data = snapshot(flatten(build()))
    text = json.dumps(data)
    assert "<function" not in text and "lambda" not in text
    assert data["schema"] == "pi-workflows.definition-snapshot.v1"
    assert (data["name"], data["contractId"], data["revision"], data["startAt"]) == (
        "snap",
        "snap.v1",
        "7",
        "ask",
    )
    nodes = data["nodes"]
    assert nodes["ask"]["expectedOutput"]["kind"] == "json-schema"
    assert nodes["ask"]["statusDetail"] == "asking" and nodes["ask"]["timeoutMs"] == 900_000
    assert nodes["reply"]["expectedOutput"] == {"kind": "assistant-message", "maxChars": 50}
    assert nodes["reply"]["timeoutMs"] is None  # a function: unknown until the node runs (nullable)
    assert nodes["act"]["actionExecution"] == {"kind": "function", "effect": "idempotent"}
    assert nodes["act"]["timeoutMs"] is None
    assert nodes["cmd"]["actionExecution"] == {"kind": "shell"} and nodes["cmd"]["timeoutMs"] == 2500
    assert nodes["gate"]["humanDecision"] == {
        "audience": "ops",
        "choices": [{"id": "yes", "label": "yes"}, {"id": "no", "label": "no"}],
    }
    assert nodes["sub/i1"]["mountPath"] == ["sub"] and nodes["sub/i1"]["localNodeId"] == "i1"
    assert nodes["sub/i1"]["includeTransition"] == {"enters": "sub"}
    assert {"from": "cmd", "to": "sub/i1"} in data["edges"]
    assert {"from": "sub/i2", "to": "gate", "exit": "done"} in data["edges"]
    assert data["composition"]["mounts"]["sub"]["workflowName"] == "inner"
    assert definition_digest(data) == definition_digest(snapshot(flatten(build())))
    assert definition_digest(data).startswith("sha256:") and len(definition_digest(data)) == 71


def test_exit_switch_edges_in_the_snapshot() -> None:
    data = snapshot(flatten(parent()))
    rows = [row for row in data["edges"] if row.get("on") == "$exit"]
    assert {"from": "sub/good", "to": "accept", "on": "$exit", "when": "yes"} in rows
    assert {"from": "sub/bad", "to": "reject", "on": "$exit", "when": "no"} in rows
    assert len(rows) == 2
