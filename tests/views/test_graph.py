"""The graph view: layout properties at many widths, highlights and markers, and valid Mermaid and DOT.

Mermaid and DOT are checked with small structural parsers written here (no renderer is available offline):
each accepts only well-formed statements, requires every quoted string to be closed and free of raw control
characters, and returns the declared nodes and the edges, whose endpoints must be declared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from piw.views.graph import draw_graph, graph_view
from piw.views.graph_export import to_dot, to_mermaid
from piw.workflow.loader import load_workflow
from tests.support.views import Runs, render, shared_runs

# ---- Mermaid -----------------------------------------------------------------------------------------------

_MERMAID_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MERMAID_RESERVED = {
    "end",
    "graph",
    "subgraph",
    "flowchart",
    "style",
    "class",
    "classDef",
    "click",
    "linkStyle",
}
_SHAPES = (('(("', '"))'), ('["', '"]'), ('("', '")'), ('{"', '"}'))


def _quoted_ok(text: str) -> bool:
    return '"' not in text and not any(ord(c) < 32 or c == "\x7f" for c in text)


def parse_mermaid(source: str) -> tuple[set[str], list[tuple[str, str, str | None]]]:
    """Nodes and edges of a ``flowchart`` made of node declarations and ``a -->|"label"| b`` edges."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    assert re.fullmatch(r"(flowchart|graph) (TD|TB|BT|RL|LR)", lines[0]), lines[0]
    nodes: set[str] = set()
    edges: list[tuple[str, str, str | None]] = []
    for line in lines[1:]:
        edge = re.fullmatch(r"(\S+) -->(?:\|\"(.*)\"\|)? (\S+)", line)
        if edge:
            source_id, label, target = edge.groups()
            assert label is None or _quoted_ok(label), line
            edges.append((source_id, target, label))
            continue
        match = _MERMAID_ID.match(line)
        assert match, f"not a statement: {line!r}"
        node_id, shape = match.group(0), line[match.end() :]
        assert any(shape.startswith(a) and shape.endswith(b) for a, b in _SHAPES), f"bad shape: {line!r}"
        opening, closing = next((a, b) for a, b in _SHAPES if shape.startswith(a) and shape.endswith(b))
        assert _quoted_ok(shape[len(opening) : -len(closing)]), line
        nodes.add(node_id)
    for node_id in nodes:
        assert node_id not in _MERMAID_RESERVED, node_id
    for source_id, target, _ in edges:
        assert source_id in nodes and target in nodes, (source_id, target)
    return nodes, edges


# ---- DOT ---------------------------------------------------------------------------------------------------

_DOT_TOKEN = re.compile(
    r'\s*(?:(->)|([{}\[\];,=])|([A-Za-z_][A-Za-z0-9_]*|-?\d+(?:\.\d+)?)|("(?:[^"\\\n]|\\.)*"))'
)


def _dot_tokens(source: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while source[position:].strip():
        match = _DOT_TOKEN.match(source, position)
        assert match, f"cannot tokenize DOT at {source[position : position + 30]!r}"
        arrow, punct, ident, string = match.groups()
        if string is not None:
            assert not any(ord(c) < 32 for c in string), string
        kind = "arrow" if arrow else "punct" if punct else "id"
        tokens.append((kind, arrow or punct or ident or string))
        position = match.end()
    return tokens


def parse_dot(source: str) -> tuple[set[str], list[tuple[str, str]]]:
    """Nodes and edges of ``digraph NAME { … }`` with node, edge, attribute and default statements."""
    tokens = _dot_tokens(source)
    position = 0

    def take(kind: str, value: str | None = None) -> str:
        nonlocal position
        token_kind, token = tokens[position]
        assert token_kind == kind and (value is None or token == value), (kind, value, tokens[position])
        position += 1
        return token

    def attrs() -> None:
        take("punct", "[")
        while tokens[position] != ("punct", "]"):
            take("id")
            take("punct", "=")
            take("id")
            if tokens[position] in (("punct", ","), ("punct", ";")):
                position_advance()
        take("punct", "]")

    def position_advance() -> None:
        nonlocal position
        position += 1

    take("id", "digraph")
    if tokens[position][0] == "id":
        take("id")
    take("punct", "{")
    nodes: set[str] = set()
    edges: list[tuple[str, str]] = []
    while tokens[position] != ("punct", "}"):
        first = take("id")
        if tokens[position] == ("punct", "="):
            take("punct", "=")
            take("id")
        elif tokens[position][0] == "arrow":
            take("arrow")
            edges.append((first, take("id")))
        elif first not in ("graph", "node", "edge"):
            nodes.add(first)
        if tokens[position] == ("punct", "["):
            attrs()
        take("punct", ";")
    take("punct", "}")
    assert position == len(tokens), "trailing tokens after the graph"
    for a, b in edges:
        assert a in nodes and b in nodes, (a, b)
    return nodes, edges


# ---- fixtures ----------------------------------------------------------------------------------------------

HOSTILE_WORKFLOW = """
import piw.workflow.definition as dsl
from piw import compute, edge, switch

workflow = dsl.define_workflow(
    name='evil "graph" \\x1b[2J',
    start_at="a",
    nodes={"a": compute({"r": 1}), "end": compute(1), "b": compute(2), "graph": compute(3),
           "c": dsl.agent(prompt="p", expected_output=dsl.assistant_message())},
    edges=[
        switch("a", on="$.r", cases={'x"]; evil': "b", "[red]<b>|#`\\x1b]52;\\x07": "c", "end": "end"}),
        edge("b", "graph"),
    ],
)
"""


def _load(tmp_path: Path, source: str, name: str = "g") -> dict[str, Any]:
    path = tmp_path / f"{name}.workflow.py"
    path.write_text(source, encoding="utf-8")
    return load_workflow(path, tmp_path / "home").snapshot


def _chain(count: int) -> str:
    nodes = ", ".join(f'"s{i}": compute({i})' for i in range(count))
    edges = ", ".join(f'edge("s{i}", "s{i + 1}")' for i in range(count - 1))
    header = "from piw import compute, define_workflow, edge\n"
    return (
        header
        + f"workflow = define_workflow(name='long', start_at='s0', nodes={{{nodes}}}, edges=[{edges}])\n"
    )


def _snapshot(nodes: int, links: list[tuple[int, list[int]]]) -> dict[str, Any]:
    edges: list[dict[str, Any]] = []
    for source, targets in links:
        if len(targets) == 1:
            edges.append({"from": f"n{source}", "to": f"n{targets[0]}"})
        for case, target in enumerate(targets if len(targets) > 1 else []):
            edges.append({"from": f"n{source}", "to": f"n{target}", "on": "$.r", "when": f"c{case}"})
    node_specs = {f"n{i}": {"nodeType": "compute"} for i in range(nodes)}
    return {"name": "random", "startAt": "n0", "nodes": node_specs, "edges": edges}


graphs = st.integers(1, 9).flatmap(
    lambda n: st.lists(
        st.tuples(
            st.integers(0, n - 1), st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True)
        ),
        max_size=n,
        unique_by=lambda link: link[0],
    ).map(lambda links: _snapshot(n, links))
)


# ---- tests -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


@settings(max_examples=60, deadline=None)
@given(graphs)
def test_any_graph_fits_any_width(snapshot: dict[str, Any]) -> None:
    for width in (80, 40, 17, 5, 1):
        text = render(graph_view(snapshot), width)
        assert all(cell_len(line) <= width for line in text.splitlines()), text
        if width >= 40:
            for node in snapshot["nodes"]:
                assert re.search(rf"\b{node}\b", text), (node, text)
    nodes, _ = parse_mermaid(to_mermaid(snapshot))
    assert len(nodes) >= len(snapshot["nodes"]) + 1
    parse_dot(to_dot(snapshot))


def test_hostile_names_stay_valid_mermaid_and_dot(tmp_path: Path) -> None:
    snapshot = _load(tmp_path, HOSTILE_WORKFLOW)
    nodes, edges = parse_mermaid(to_mermaid(snapshot))
    assert {"start_", "end_"} <= nodes and len(nodes) == 7
    labels = {label for _, _, label in edges if label}
    assert any("#quot;" in label for label in labels)
    assert not any("\x1b" in label for label in labels)
    dot_nodes, dot_edges = parse_dot(to_dot(snapshot))
    assert len(dot_nodes) == 7 and len(dot_edges) == len(edges)
    text = render(graph_view(snapshot), 80)
    assert "\x1b" not in text and "\x07" not in text and "[red]<b>" in text


def test_definition_graph_of_the_fixture(runs: Runs) -> None:
    snapshot = load_workflow(runs.workflow, runs.root / "home").snapshot
    text = render(graph_view(snapshot), 80)
    assert text.count("assistant response") == 1
    assert "▲" in text, "the classify → crunch loop is drawn back up the right side"
    for label in ("full, again", "ask", "reply", "skip"):
        assert label in text


def test_current_node_is_highlighted_once(runs: Runs) -> None:
    data = runs.load("running")
    drawing = draw_graph(data.snapshot, data.state, data.now, 80)
    text = "\n".join(line.plain for line in drawing.lines)
    assert text.count("┏") == 1 and "┃ reply" in text
    assert drawing.focus is not None
    top, bottom = drawing.focus
    assert drawing.lines[top].plain.strip().startswith("│  ┏") or "┏" in drawing.lines[top].plain
    assert "┗" in drawing.lines[bottom].plain


def test_wide_graph_degrades_to_a_list_at_80_columns(tmp_path: Path) -> None:
    branches = ", ".join(f'"branch_{i}": compute({i})' for i in range(7))
    cases = ", ".join(f'"c{i}": "branch_{i}"' for i in range(7))
    source = (
        "from piw import compute, define_workflow, switch\n"
        f"workflow = define_workflow(name='wide', start_at='route',"
        f" nodes={{'route': compute(1), {branches}}}, edges=[switch('route', on='$.r', cases={{{cases}}})])\n"
    )
    snapshot = _load(tmp_path, source, "wide")
    text = render(graph_view(snapshot), 80)
    assert "├→ branch_0  [c0]" in text and "└→ branch_6  [c6]" in text
    assert max(cell_len(line) for line in text.splitlines()) <= 80


def test_long_workflow_draws_every_node(tmp_path: Path) -> None:
    snapshot = _load(tmp_path, _chain(100), "long")
    for width in (80, 40):
        text = render(graph_view(snapshot), width)
        assert all(f"s{i} " in text for i in range(100))
        assert max(cell_len(line) for line in text.splitlines()) <= width


def test_empty_snapshot_says_so() -> None:
    assert render(graph_view({"nodes": {}, "edges": []}), 80).strip() == "No nodes in this workflow."


def test_switch_labels_are_shown_in_both_layouts(tmp_path: Path) -> None:
    snapshot = _load(tmp_path, HOSTILE_WORKFLOW)
    assert "[red]<b>" in render(graph_view(snapshot), 120)
    assert "[red]<b>" in render(graph_view(snapshot), 30)
