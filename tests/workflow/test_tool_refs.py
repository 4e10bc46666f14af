"""``mcp("NAME", only=[...])`` in ``agent(tools=...)``: what a workflow file may write (``docs/tools-mcp.md``)."""

from __future__ import annotations

import pytest

from piw import DefinitionError, agent, mcp


def test_mcp_references_sit_beside_tool_names_and_keep_their_order() -> None:
    node = agent(prompt="p", tools=("read", mcp("notes", only=["search", "search", "fetch"]), mcp("web")))
    assert node.tools == ("read",)
    assert [ref.to_json() for ref in node.mcp] == [
        {"server": "notes", "only": ["search", "fetch"]},
        {"server": "web"},
    ]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: mcp("no spaces"), "mcp server name 'no spaces'"),
        (lambda: mcp("notes", only="search"), "must be a list of tool names"),
        (lambda: mcp("notes", only=[]), "offers no tool"),
        (lambda: agent(prompt="p", tools=(mcp("notes"), mcp("notes", only=["a"]))), "same mcp server twice"),
        (lambda: agent(prompt="p", tools=(42,)), "tool names and mcp(...) servers"),
    ],
)
def test_a_bad_reference_is_a_definition_error_naming_it(build: object, message: str) -> None:
    with pytest.raises(DefinitionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()  # type: ignore[operator]
