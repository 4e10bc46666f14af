"""Dependencies point one way (style.md "Shape"): checked by walking every ``import`` with ``ast``.

The engine and everything it pulls in never import the views or the CLI; views and watch read bundles and
never import the engine, executors, providers, agent steps or the runner; shipped workflow files import only
the public ``piw`` API. Imports inside functions and under ``TYPE_CHECKING`` count too: an arrow is an arrow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "piw"
WORKFLOWS = REPO / "workflows"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path) -> set[str]:
    """Every module a file imports (absolute names; ``from a import b`` yields ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}
GRAPH = {
    name: {dep for dep in imported(path) if dep in MODULES and dep != name} for name, path in MODULES.items()
}


def closure(roots: Iterable[str]) -> dict[str, list[str]]:
    """Every piw module reachable from ``roots`` by explicit imports, with one path that reaches it."""
    paths = {root: [root] for root in roots}
    todo = list(paths)
    while todo:
        current = todo.pop()
        for dep in sorted(GRAPH[current]):
            if dep == "piw":  # the package __init__ is the public facade, not an arrow of its own
                continue
            if dep not in paths:
                paths[dep] = [*paths[current], dep]
                todo.append(dep)
    return paths


def in_group(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_the_walker_sees_the_package() -> None:
    assert {
        "piw.run.engine",
        "piw.store.fold",
        "piw.cli",
        "piw.cli.runs",
        "piw.run.executors.shell",
    } <= set(MODULES)
    assert "piw.store.fold" in closure(["piw.run.engine"])
    assert imported(PACKAGE / "run" / "executors" / "compute.py") >= {
        "piw.workflow.definition",
        "piw.run.executors",
    }


def test_the_engine_never_imports_views_or_the_cli() -> None:
    reached = closure(["piw.run.engine", "piw.run.runner"])
    wrong = {name: path for name, path in reached.items() if in_group(name, ("piw.views", "piw.cli"))}
    assert not wrong, [" → ".join(path) for path in wrong.values()]


@pytest.mark.parametrize(
    "root", sorted(name for name in MODULES if in_group(name, ("piw.views", "piw.cli.watch", "piw.app")))
)
def test_views_never_import_the_engine_side(root: str) -> None:
    forbidden = ("piw.run", "piw.providers", "piw.agent_steps", "piw.store.writer")
    wrong = {name: path for name, path in closure([root]).items() if in_group(name, forbidden)}
    assert not wrong, [" → ".join(path) for path in wrong.values()]


def test_the_viewer_app_is_reached_only_by_its_command() -> None:
    """Textual loads only for ``piw view``: no module but the command imports the app package."""
    importers = {name for name, deps in GRAPH.items() if any(in_group(d, ("piw.app",)) for d in deps)}
    assert {name for name in importers if not in_group(name, ("piw.app",))} <= {"piw.cli.viewer"}
    assert not any(in_group(name, ("piw.cli",)) for name in closure(["piw.app.viewer"]))


def test_core_modules_stay_below_the_engine() -> None:
    """Definition, graph, trace, fold and store never reach up to the engine or anything above it."""
    core = [
        "piw.workflow.definition",
        "piw.workflow.graph",
        "piw.store.trace",
        "piw.store.fold",
        "piw.store.bundle",
        "piw.store.artifacts",
        "piw.wire",
    ]
    forbidden = ("piw.run", "piw.cli", "piw.views", "piw.agent_steps", "piw.providers")
    wrong = {name: path for name, path in closure(core).items() if in_group(name, forbidden)}
    assert not wrong, [" → ".join(path) for path in wrong.values()]


SHIPPED = sorted(WORKFLOWS.rglob("*.workflow.py"))


def imported_modules(path: Path) -> set[str]:
    """The modules named by ``import m`` and ``from m import …`` (not the names imported from them)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_workflows_import_only_the_public_api(path: Path) -> None:
    allowed = {"piw", "piw.progress", "piw.plan"}
    wrong = {name for name in imported_modules(path) if name.split(".")[0] == "piw" and name not in allowed}
    assert not wrong, f"{path.name} imports {sorted(wrong)}; use the public piw API"
    assert not any(name.startswith(".") for name in imported_modules(path))


def test_the_shipped_check_catches_private_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.workflow.py"
    bad.write_text("import piw.run.engine\nfrom piw.store.bundle import piw_home\nfrom piw import compute\n")
    assert imported_modules(bad) == {"piw.run.engine", "piw.store.bundle", "piw"}


def test_there_are_shipped_workflows() -> None:
    assert any(p.name == "hello.workflow.py" for p in SHIPPED)


def test_the_cli_knows_every_view_without_importing_them() -> None:
    from piw.cli.views import VIEW_NAMES as CLI_VIEW_NAMES
    from piw.views import VIEW_NAMES

    assert CLI_VIEW_NAMES == VIEW_NAMES


def test_test_cases_sit_between_the_agent_steps_and_the_cli() -> None:
    """``piw.cases`` (``piw test``) imports neither the CLI nor the views itself (the agent stack it runs draws step
    cards), reaches no CLI module, and only the CLI and the pytest plugin import it (docs/development.md)."""
    cases = [name for name in MODULES if in_group(name, ("piw.cases",))]
    wrong = {
        name: GRAPH[name] for name in cases if any(in_group(d, ("piw.cli", "piw.views")) for d in GRAPH[name])
    }
    assert not wrong, wrong
    assert not any(in_group(name, ("piw.cli",)) for name in closure(cases))
    importers = {name for name, deps in GRAPH.items() if any(in_group(d, ("piw.cases",)) for d in deps)}
    outside = {name for name in importers if not in_group(name, ("piw.cases",))}
    assert outside <= {"piw.cli.testing", "piw.pytest_plugin"}, outside
