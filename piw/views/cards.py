"""Step cards (``docs/design/agent-steps.md`` §5): how a step message is shown, built only from its ``details``.

Pure functions used by the live display of ``piw run`` and by the conversation view; they never parse the prompt
text, which is shown verbatim only in the expanded card.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from piw.terminal import sanitize_terminal_text, visible_title


def _one_line(value: str) -> str:
    return sanitize_terminal_text(value).replace("\n", " ")


def clip_cells(text: str, width: int) -> str:
    """Clip to ``width`` terminal cells, ending in ``…`` when cut; never wider than ``width`` (down to 1)."""
    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(0, width - 1)).rstrip("\x00") + "…" if width > 1 else "…"


def _workflow_name(details: dict[str, Any]) -> str:
    contract = details.get("contract") or {}
    return visible_title(contract.get("workflowName")) or visible_title(details.get("workflowName")) or ""


def _run_title(details: dict[str, Any]) -> str:
    """The run title when it is a string that shows something; a blank, invisible or non-string one is none."""
    return visible_title((details.get("presentation") or {}).get("runTitle")) or ""


def card_label(details: dict[str, Any]) -> str:
    """The run title when set, not blank and different from the workflow name; else the workflow name.

    Empty only when the details name no workflow either: the card then shows the node alone, never ``▶  › node``.
    """
    workflow, title = _workflow_name(details), _run_title(details)
    return title if title and title != workflow else workflow


def card_node(details: dict[str, Any]) -> str:
    return str((details.get("contract") or {}).get("nodeId", "")).replace("/", " › ")


def compact_card_lines(details: dict[str, Any], width: int) -> list[str]:
    """Line 1 ``▶ label › node`` (``↻ … · kind`` for reminders and resumes); line 2 the status detail if any."""
    kind = str(details.get("kind", "step"))
    label = card_label(details)
    head = f"{label} › {card_node(details)}" if label else card_node(details)
    first = f"▶ {head}" if kind == "step" else f"↻ {head} · {kind}"
    lines = [first]
    detail = (details.get("presentation") or {}).get("statusDetail")
    if detail:
        lines.append(str(detail))
    return [clip_cells(_one_line(line), width) for line in lines]


def expanded_card_lines(details: dict[str, Any], content: str, width: int) -> list[str]:
    """Every field of the step message, then the full prompt (wrapped by the console, never clipped)."""
    contract = details.get("contract") or {}
    completion = "assistant response" if contract.get("completion") == "assistant" else "submit"
    if contract.get("completion") == "assistant":
        limit = contract.get("maxOutputChars")
        expected = f"at most {limit} characters" if limit else "no character limit"
    else:
        expected = str(contract.get("expectedOutput", ""))
    fields = [
        ("workflow", _workflow_name(details)),
        ("run title", _run_title(details)),
        ("run id", contract.get("runId", "")),
        ("node", contract.get("nodeId", "")),
        ("attempt", contract.get("attemptId", "")),
        ("delivery", details.get("kind", "step")),
        ("completion", completion),
        ("expected output", expected),
    ]
    lines = compact_card_lines(details, width)
    lines += [clip_cells(_one_line(f"  {name}: {value}"), width) for name, value in fields if value]
    lines.append("  prompt:")
    lines.extend(sanitize_terminal_text(content).splitlines())
    return lines


def card_text(details: dict[str, Any], content: str, width: int, *, expanded: bool = False) -> Text:
    """The card as one rich ``Text`` (plain, never markup)."""
    lines = expanded_card_lines(details, content, width) if expanded else compact_card_lines(details, width)
    text = Text("\n".join(lines))
    text.stylize("bold cyan", 0, len(lines[0]))
    return text
