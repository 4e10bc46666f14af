"""Every ``piw …`` command named in the project's messages and hints exists, with the options it names.

The source is parsed (no text search): every string constant and f-string of ``piw/`` and the shipped
workflows is rendered, with ``X`` standing in for each interpolated value, and every ``piw <command>`` in it is
checked against the real typer app: the command must exist and each ``--option`` written after it must be one
of that command's options. The docs are checked the same way, in their code (inline spans and fenced blocks).

A command that another helper of this session is still building is listed in ``PENDING`` with its owner; the
test then fails loudly while it is missing, naming who owes it — and fails again once it exists and is still
listed, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main

from piw.cli.app import app
from piw.cli.commands import register_all

REPO = Path(__file__).resolve().parent.parent

PENDING: dict[str, str] = {}
"""Commands (and options) named in messages that the owning helper has not landed yet: name → owner."""

SPEC_COMMANDS = frozenset(
    {"run", "watch", "inspect", "runs", "list", "validate", "graph", "resume", "pause", "cancel", "answer",
     "decide", "host", "providers", "fork", "show", "view"}
)  # fmt: skip
"""The commands the contract names (spec README §4, plus later issues): named anywhere, they must exist."""

MISTAKES = frozenset({"--bogus"})
"""Options the docs show on purpose as a mistake (the error they get)."""

COMMAND = re.compile(
    r"(?<![\w/.-])(?P<quote>[`'\"$] ?)?piw (?P<name>[a-z][a-z-]*)"
    r"(?P<rest>(?: +(?:--?[A-Za-z][\w-]*(?:=\S+)?|[^\s'\"`)(|;,]+))*)"
)
OPTION = re.compile(r"(?<!\S)(--[a-z][\w-]*)")


@functools.cache
def _commands() -> dict[str, Any]:
    """The CLI's commands by name (typer vendors its own click, so the group is read by duck typing)."""
    register_all()
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


def _render(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            else:
                parts.append("X")
        return "".join(parts)
    return None


def source_strings() -> Iterator[tuple[str, str]]:
    """``(where, text)`` for every string literal and f-string in the package and the shipped workflows."""
    files = sorted((REPO / "piw").rglob("*.py")) + sorted((REPO / "workflows").rglob("*.py"))
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        inside_fstring = {
            id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values
        }
        for node in ast.walk(tree):
            if id(node) in inside_fstring or not isinstance(node, ast.expr):
                continue
            text = _render(node)
            if text and "piw " in text:
                yield f"{path.relative_to(REPO)}:{node.lineno}", text


def doc_snippets() -> Iterator[tuple[str, str]]:
    """``(where, text)`` for inline code spans and fenced code lines of ``docs/`` and the README.

    Not ``docs/design/``: the design notes are the specification the code cites, and they also name what is
    planned (``piw export``, ``piw host --database``), not only what ships."""
    design = REPO / "docs" / "design"
    pages = [path for path in sorted((REPO / "docs").rglob("*.md")) if design not in path.parents]
    for path in [REPO / "README.md", *pages]:
        fenced = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            where = f"{path.relative_to(REPO)}:{number}"
            if fenced:
                yield where, line
            else:
                for span in re.findall(r"`([^`]+)`", line):
                    yield where, span


def named_commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """``piw <command> [--options]`` in a text: a command the contract names, or any word written as code
    (quoted, in backticks, after ``$``); ``piw`` in prose ("the tools piw ships") is not a command."""
    for match in COMMAND.finditer(text):
        name, rest = match.group("name"), match.group("rest")
        if name == "import" and text[: match.start()].endswith("from "):
            continue  # Python's 'from piw import …', not the command
        quoted = match.group("quote") is not None or match.start() == 0
        if name == "import" and text[: match.start()].rstrip().endswith("from"):
            continue  # Python ('from piw import agent'), not the 'piw import' command
        if name in SPEC_COMMANDS or name in _commands() or (quoted and name != "import"):
            yield name, OPTION.findall(rest)


def _problems(snippets: Iterator[tuple[str, str]]) -> tuple[list[str], set[str]]:
    commands = _commands()
    problems: list[str] = []
    named: set[str] = set()
    for where, text in snippets:
        for name, options in named_commands(text):
            named.add(name)
            command = commands.get(name)
            if command is None:
                if name not in PENDING:
                    problems.append(f"{where}: 'piw {name}' is not a command (in {text.strip()[:120]!r})")
                continue
            known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
            for option in options:
                pending = f"{name} {option}" in PENDING
                if option not in known and option != "--help" and option not in MISTAKES and not pending:
                    problems.append(
                        f"{where}: 'piw {name}' has no option {option} (in {text.strip()[:120]!r})"
                    )
    return problems, named


def test_the_finder_reads_commands_and_options() -> None:
    found = list(
        named_commands("continue it with 'piw resume X --provider P' or piw decide X replan --text '…'.")
    )
    assert found == [("resume", ["--provider"]), ("decide", ["--text"])]
    assert list(named_commands("the tools piw ships; see piw runs; 'piw resme X'.")) == [
        ("runs", []),
        ("resme", []),
    ]
    assert list(named_commands("from piw import agent")) == []
    assert _render(ast.parse("f'Cancel it with piw cancel {run_id} now'", mode="eval").body) == (
        "Cancel it with piw cancel X now"
    )


def test_every_command_named_in_a_message_exists() -> None:
    problems, named = _problems(source_strings())
    assert not problems, "\n".join(problems)
    assert {"resume", "answer", "decide", "runs"} <= named  # the scan really reads the messages


def test_every_command_in_the_docs_exists() -> None:
    problems, _ = _problems(doc_snippets())
    assert not problems, "\n".join(problems)


def test_no_command_named_in_a_message_is_still_owed() -> None:
    """Fails loudly while ``PENDING`` lists a command someone still owes (they all exist by the end)."""
    assert not PENDING, f"named in messages but not built yet: {PENDING}"
