"""Bounded memory and the direction of imports.

A long trace is written as real trace lines (the writer's own encoding); replaying it and paging through the
updates, progress and trace views must stay far below the size of the events held at once. The import test
walks the ``import`` statements of the viewer modules (``ast``), transitively through ``piw``, and fails on
any arrow into the engine, executors, providers, the agent loop or the runner.
"""

from __future__ import annotations

import ast
import io
import json
import shutil
import subprocess
import sys
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

import piw
from piw.store.trace import TraceEvent
from piw.views import view_for
from piw.views.source import load_run
from piw.wire import RUN_BUNDLE_SCHEMA

RUN_ID = "20260101T000000000Z-big-00000001"
EVENTS = 3_000
FILLER = 6_000
FORBIDDEN = (
    "piw.run",
    "piw.providers",
    "piw.agent_steps",
    "piw.store.writer",
    "piw.cli.main",
    "piw.cli.runs",
)
EMPTY_PACKAGES = {"piw.agent_steps", "piw.cli", "piw.run", "piw.store", "piw.workflow", "piw.updates"}
"""Packages whose ``__init__`` imports nothing: a view may load them on the way to a module it needs."""
VIEWER_MODULES = [
    "piw.cli.watch",
    "piw.cli.live",
    *(f"piw.views.{p.stem}" for p in Path(piw.__file__).parent.glob("views/*.py")),
    *(f"piw.app.{p.stem}" for p in Path(piw.__file__).parent.glob("app/*.py")),
]


def _write_big_run(home: Path) -> Path:
    bundle = home / "runs" / RUN_ID
    (bundle / "session").mkdir(parents=True)
    snapshot = {"schema": "pi-workflows.definition-snapshot.v1", "name": "big", "startAt": "work",
                "nodes": {"work": {"nodeType": "action"}}, "edges": []}  # fmt: skip
    (bundle / "workflow.json").write_text(json.dumps(snapshot), encoding="utf-8")
    manifest = {"schema": RUN_BUNDLE_SCHEMA, "runId": RUN_ID, "workflowName": "big", "status": "completed"}
    (bundle / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def at(seq: int) -> str:
        return (
            (start + timedelta(milliseconds=seq * 10))
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )

    filler = "x" * FILLER
    with (bundle / "trace.ndjson").open("wb") as out:
        out.write(
            TraceEvent(1, at(1), "run", "run_started", RUN_ID, {"workflowName": "big", "input": {}}).encode()
        )
        out.write(
            TraceEvent(
                2, at(2), "node", "node_started", RUN_ID, {"nodeType": "action"}, "work", "a1"
            ).encode()
        )
        for seq in range(3, EVENTS + 3):
            key = f"worker/{seq % 7}"
            data = {"schema": "pi-workflows.progress.v1", "status": "running", "label": f"Worker {seq % 7}",
                    "completed": seq, "total": EVENTS * 2, "unit": "rows"}  # fmt: skip
            payload = {
                "updateId": f"u{seq}",
                "type": "progress",
                "key": key,
                "data": data,
                "idempotencyKey": filler,
            }
            out.write(
                TraceEvent(seq, at(seq), "node", "update_published", RUN_ID, payload, "work", "a1").encode()
            )
        end = EVENTS + 3
        done = {"outcome": "ok", "durationMs": 5, "output": {"rows": EVENTS}}
        out.write(TraceEvent(end, at(end), "node", "node_finished", RUN_ID, done, "work", "a1").encode())
        final = {"status": "completed", "finalOutput": {"rows": EVENTS}}
        out.write(TraceEvent(end + 1, at(end + 1), "run", "run_completed", RUN_ID, final).encode())
    return bundle


@pytest.fixture(scope="module")
def big_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("big")
    _write_big_run(home)
    return home


@pytest.mark.parametrize("view", ["progress", "updates", "trace", "state", "steps", "graph"])
@pytest.mark.long
def test_long_run_views_keep_memory_bounded(big_home: Path, view: str) -> None:
    trace_size = (big_home / "runs" / RUN_ID / "trace.ndjson").stat().st_size
    assert trace_size > 18_000_000
    console = Console(file=io.StringIO(), width=100, color_system=None)
    tracemalloc.start()
    try:
        run = load_run(big_home, RUN_ID)
        lines = 0
        for page in view_for(view, run).pages(console, 100, size=200):
            lines += len(list(page.lines(console, 100)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines > 0
    assert peak < 12_000_000, f"{view}: peak {peak:,} bytes for a {trace_size:,}-byte trace"


def test_progress_of_a_long_run_is_the_latest_per_track(big_home: Path) -> None:
    text = io.StringIO()
    Console(file=text, width=200, color_system=None).print(view_for("progress", load_run(big_home, RUN_ID)))
    rendered = text.getvalue()
    assert rendered.count("samples · ") == 7
    assert f"{EVENTS + 2:,}/{EVENTS * 2:,} rows" in rendered


def test_listing_a_long_run_without_a_runs_index_keeps_memory_bounded(big_home: Path, tmp_path: Path) -> None:
    """The first listing of a home (no ``piw.sqlite`` yet: ``piw view`` or ``piw runs`` right after an upgrade,
    or a copied-in run) folds every run with no current ``state.json`` into the index. The fold streams the
    trace, so its events are never all held at once, and leaves the bundle as it was."""
    from piw.app.runs import load_rows

    shutil.copytree(big_home / "runs", tmp_path / "runs")
    bundle = tmp_path / "runs" / RUN_ID
    before = sorted(p.name for p in bundle.iterdir())
    trace_size = (bundle / "trace.ndjson").stat().st_size
    tracemalloc.start()
    try:
        rows = load_rows(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(row.run_id, row.status, row.title) for row in rows] == [(RUN_ID, "completed", "big")]
    assert peak < 12_000_000, f"peak {peak:,} bytes for a {trace_size:,}-byte trace"
    assert sorted(p.name for p in bundle.iterdir()) == before


# ---- imports -----------------------------------------------------------------------------------------------


def _module_file(name: str) -> Path | None:
    root = Path(piw.__file__).parent.parent
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(name: str) -> set[str]:
    path = _module_file(name)
    if path is None:
        return set()
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(
                f"{base}.{alias.name}" for alias in node.names if _module_file(f"{base}.{alias.name}")
            )
    parents = {".".join(item.split(".")[:i]) for item in found for i in range(1, item.count(".") + 1)}
    return {item for item in found | parents if item == "piw" or item.startswith("piw.")}


def test_viewers_never_import_the_engine_side() -> None:
    seen: dict[str, str | None] = {module: None for module in VIEWER_MODULES}
    todo = list(VIEWER_MODULES)
    while todo:
        module = todo.pop()
        for imported in _imports(module):
            if imported not in seen:
                seen[imported] = module
                todo.append(imported)
    for module, importer in seen.items():
        if module.startswith(FORBIDDEN) and module not in EMPTY_PACKAGES:
            chain = [module]
            while importer is not None:
                chain.append(importer)
                importer = seen[importer]
            pytest.fail("forbidden import: " + " ← ".join(chain))
    assert "piw.store.fold" in seen and "piw.progress" in seen, "the walk reaches the fold and the estimator"


def test_allowed_empty_packages_import_nothing() -> None:
    for package in EMPTY_PACKAGES:
        assert _imports(package) == set(), f"{package}/__init__.py must stay free of imports"


def test_importing_the_viewers_loads_no_engine_module() -> None:
    code = (
        "import sys, piw.views, piw.cli.watch, piw.cli.live, piw.app.viewer; "
        "print('\\n'.join(m for m in sys.modules if m.startswith('piw')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    bad = [m for m in loaded if m.startswith(FORBIDDEN) and m not in EMPTY_PACKAGES]
    assert not bad, bad


def test_the_cli_starts_without_textual() -> None:
    """``piw --help`` and every command but ``view`` never import Textual (start-up stays fast)."""
    code = "import sys; from piw.cli.commands import register_all; register_all(); print('textual' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "False"


def test_the_walk_would_catch_a_wrong_arrow() -> None:
    assert "piw.run.engine" in _imports("piw.run.runner") and "piw.views" in _imports("piw.cli.views")
