"""Mermaid and Graphviz DOT text for a definition snapshot (``piw graph --format mermaid|dot``).

Node ids from the snapshot are never used as identifiers in the output: nodes are numbered (``n0``, ``n1``, …)
and the id goes into a quoted, escaped label, so any id — or any hostile text in a label — yields valid
syntax. Control characters are escaped first (:func:`piw.terminal.single_line`), so the text is also
terminal-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from piw.terminal import single_line
from piw.views.graph import ASSISTANT_MARKER, cards, segments
from piw.views.graph_layout import END, START

_MERMAID_ESCAPES = {
    "&": "#amp;",
    '"': "#quot;",
    "<": "#lt;",
    ">": "#gt;",
    "|": "#124;",
    "#": "#35;",
    "`": "#96;",
}


def _ids(snapshot: Mapping[str, Any]) -> dict[str, str]:
    ids = {card.id: f"n{index}" for index, card in enumerate(cards(snapshot))}
    ids[START], ids[END] = "start_", "end_"
    return ids


def _label_lines(snapshot: Mapping[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for card in cards(snapshot):
        lines = [card.title, card.type]
        if card.assistant:
            lines.append(ASSISTANT_MARKER)
        out[card.id] = [single_line(line) for line in lines]
    return out


def mermaid_escape(text: str) -> str:
    """Text safe inside a double-quoted Mermaid label (entity codes for the characters Mermaid reserves)."""
    return "".join(_MERMAID_ESCAPES.get(char, char) for char in single_line(text))


def to_mermaid(snapshot: Mapping[str, Any]) -> str:
    """A ``flowchart TD`` with one quoted label per node, start/end circles and labelled branch edges."""

    def node(node_id: str, label: list[str]) -> str:
        return f'    {node_id}["{"<br/>".join(mermaid_escape(part) for part in label)}"]'

    def edge(source: str, target: str, label: str | None) -> str:
        arrow = f'-->|"{mermaid_escape(label)}"|' if label else "-->"
        return f"    {source} {arrow} {target}"

    head = ["flowchart TD", '    start_(("start"))']
    return _drawn(snapshot, head, node, '    end_(("end"))', edge, tail=[])


def _drawn(
    snapshot: Mapping[str, Any],
    head: list[str],
    node: Callable[[str, list[str]], str],
    end: str,
    edge: Callable[[str, str, str | None], str],
    *,
    tail: list[str],
) -> str:
    """The lines of a drawn graph: ``head``, a line per node, the end marker when an edge reaches it, a line per
    edge, then ``tail``; ids are the export's short ids (``n0``, ``start_``, ``end_``)."""
    ids = _ids(snapshot)
    lines = [*head]
    lines.extend(node(ids[node_id], label) for node_id, label in _label_lines(snapshot).items())
    edges = segments(snapshot)
    if any(seg.target == END for seg in edges):
        lines.append(end)
    lines.extend(edge(ids[seg.source], ids[seg.target], seg.label) for seg in edges)
    return "\n".join([*lines, *tail]) + "\n"


def dot_quote(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, control characters already made visible."""
    return '"' + single_line(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(snapshot: Mapping[str, Any]) -> str:
    """A ``digraph`` with box nodes, point-like start/end markers and labelled branch edges."""
    name = dot_quote(str(snapshot.get("name", "workflow")))

    def node(node_id: str, label: list[str]) -> str:
        # "\n" inside a DOT string is a line break for Graphviz; the escaped parts cannot contain one.
        joined = "\\n".join(dot_quote(part)[1:-1] for part in label)
        return f'    {node_id} [label="{joined}"];'

    def edge(source: str, target: str, label: str | None) -> str:
        attrs = f" [label={dot_quote(label)}]" if label else ""
        return f"    {source} -> {target}{attrs};"

    head = [f"digraph {name} {{", "    rankdir=TB;", '    node [shape=box, fontname="monospace"];']
    head.append('    start_ [label="start", shape=circle];')
    return _drawn(snapshot, head, node, '    end_ [label="end", shape=doublecircle];', edge, tail=["}"])
