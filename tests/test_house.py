"""The house rules of ``docs/development.md`` ("The layers", "The gate"), checked on the source.

Modules stay under 600 lines and classes under 400; ``# fmt: skip`` is for tables of data only; and the packages
of ``piw/`` (each folder, and each top-level module) import each other one way, so the layers can be read
bottom-up. Imports inside functions and under ``TYPE_CHECKING`` count (``tests/test_imports.py`` walks them).
"""

from __future__ import annotations

import ast

from tests.test_imports import GRAPH, MODULES, PACKAGE

MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
FMT_SKIP_TABLES = {"piw/views/canvas.py"}
"""Files whose ``# fmt: skip`` keeps a table of data laid out by hand (the box-drawing joints)."""


def test_no_module_over_600_lines_and_no_class_over_400() -> None:
    too_long = []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    too_long.append(f"{name}.{node.name}: {size} lines")
    assert not too_long, "\n".join(too_long)


def test_fmt_skip_only_keeps_tables_of_data() -> None:
    repo = PACKAGE.parent
    found = {
        str(path.relative_to(repo))
        for path in MODULES.values()
        if "# fmt: skip" in path.read_text(encoding="utf-8")
    }
    assert found <= FMT_SKIP_TABLES, sorted(found - FMT_SKIP_TABLES)


def _package_of(module: str) -> str:
    """``piw.store.db.queue`` → ``store``; ``piw.errors`` → ``errors.py``."""
    parts = module.split(".")
    return parts[1] if (PACKAGE / parts[1]).is_dir() else f"{parts[1]}.py"


def _package_arrows() -> dict[str, set[str]]:
    arrows: dict[str, set[str]] = {}
    for name, deps in GRAPH.items():
        if name == "piw":
            continue  # the package __init__ is the public facade
        source = _package_of(name)
        arrows.setdefault(source, set()).update(
            _package_of(dep) for dep in deps if dep != "piw" and _package_of(dep) != source
        )
    return arrows


def _cycle(arrows: dict[str, set[str]]) -> list[str] | None:
    """One loop of packages, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(arrows.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(arrows):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def _witness(source: str, target: str) -> str:
    for name, deps in sorted(GRAPH.items()):
        if name != "piw" and _package_of(name) == source:
            for dep in sorted(deps):
                if dep != "piw" and _package_of(dep) == target:
                    return f"{name} imports {dep}"
    return "?"


def test_the_packages_import_each_other_one_way() -> None:
    loop = _cycle(_package_arrows())
    assert loop is None, (
        " -> ".join(loop or [])
        + ": "
        + "; ".join(_witness(a, b) for a, b in zip(loop or [], (loop or [])[1:], strict=False))
    )


def test_the_loop_finder_finds_a_loop() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_every_package_is_seen() -> None:
    seen = set(_package_arrows())
    assert {"store", "run", "config", "cli", "views", "errors.py"} <= seen
