"""Shared fixtures: a private ``PIW_HOME`` per test, no model requests, and fixtures that drive piw for real.

Tests talk to piw through its public surface: the ``piw`` command, the public API, and the files a run leaves
on disk. ``cli`` runs the console script's entry point in process (``cli.process``/``cli.popen``: a real
subprocess); ``run_workflow`` starts a run in-process through the same library call ``piw run`` makes
(``piw.run.runner.start_run``), e.g. with a fake file layer. The classes and functions behind them are in
``tests/support``.
"""

from __future__ import annotations

import importlib
import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.support.cli import Cli
from tests.support.runs import RunWorkflow, WorkflowMaker, only_run_id, trace_lines

# Real `piw` subprocesses start with byte-compiled modules, as an installed piw does: where PYTHONDONTWRITEBYTECODE
# is set (this machine sets it), every one of them would otherwise compile every module it imports (~0.15 s each).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

pytest.register_assert_rewrite("piw.testing")
try:
    importlib.import_module("piw.testing")
except Exception:  # pragma: no cover - the loopback stub is optional for this suite
    pytest_plugins: list[str] = []
else:
    pytest_plugins = ["piw.testing"]
# The built-in tests' fixtures (``run_builtin``, ``resume_builtin``), registered here so no test imports a fixture.
pytest_plugins.append("tests.support.builtin_harness")
# A throwaway PostgreSQL per test session and a fresh schema per test (``pg_server``, ``pg_setting``).
pytest_plugins.append("tests.support.pg")

# Long real-process scenarios (``@pytest.mark.long``) run in their own ``.ci/run`` phase, so the README's gate stays
# near four minutes; ``PIW_LONG=1`` runs them (docs/development.md, "Running the gate").
LONG = os.environ.get("PIW_LONG") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the long scenarios unless ``PIW_LONG=1`` asks for them."""
    if LONG:
        return
    skip = pytest.mark.skip(reason="a long scenario: runs in the .ci/run long phase (PIW_LONG=1)")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(skip)


try:
    import piw.providers as _providers
except Exception:  # pragma: no cover - a broken provider layer fails its own tests, not every test's set-up
    _providers = None  # type: ignore[assignment]
if _providers is not None:
    _providers.ALLOW_MODEL_REQUESTS = False

# Hypothesis: the default profile keeps the gate fast and reproducible (100 examples a property, derived from each
# test's name, so a gate run cannot fail on examples another run never tried; no per-example deadline on this
# shared 2-core machine); PIW_HYPOTHESIS_PROFILE=heavy explores with 20 times as many random ones
# (tests/test_properties.py). A case it finds is fixed and pinned with @example.
settings.register_profile("piw", max_examples=100, deadline=None, derandomize=True)
settings.register_profile("heavy", max_examples=2_000, deadline=None)
settings.load_profile(os.environ.get("PIW_HYPOTHESIS_PROFILE", "piw"))


@pytest.fixture(autouse=True)
def piw_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own ``PIW_HOME``; provider keys and durability overrides are cleared."""
    home = tmp_path_factory.mktemp("piw-home")
    monkeypatch.setenv("PIW_HOME", str(home))
    for key in list(os.environ):
        if key.startswith(("OPENAI_", "ANTHROPIC_", "PIW_TEST_", "OTEL_")) or key in (
            "PIW_DURABILITY",
            "PIW_PROVIDER",
        ):
            monkeypatch.delenv(key, raising=False)
    if _providers is not None:
        monkeypatch.setattr(_providers, "ALLOW_MODEL_REQUESTS", False)
    yield home


@pytest.fixture
def cli(piw_home: Path, tmp_path: Path) -> Cli:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Cli(piw_home, work)


@pytest.fixture
def make_workflow(tmp_path: Path) -> WorkflowMaker:
    """Write ``<tmp>/workflows/NAME.workflow.py`` from (dedented) source and return its path."""
    folder = tmp_path / "workflows"
    folder.mkdir(exist_ok=True)

    def make(name: str, source: str) -> Path:
        path = folder / f"{name}.workflow.py"
        path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
        return path

    return make


@pytest.fixture
def run_workflow(piw_home: Path) -> RunWorkflow:
    """Start a run in-process (``piw.run.runner.start_run``, as ``piw run`` does); return its ``RunState``."""
    from piw.run.runner import ForegroundOptions, start_run

    def run(
        path: Path | str,
        raw_input: Any = None,
        *,
        durability: str | None = None,
        files: Any = None,
        title: str | None = None,
    ) -> Any:
        options = ForegroundOptions(durability=durability, files=files)
        return start_run(str(path), piw_home, {} if raw_input is None else raw_input, title, options)

    return run


@pytest.fixture
def resume_workflow(piw_home: Path) -> Callable[..., Any]:
    """Resume a run in-process (``piw.run.runner.resume_run``) and return its final ``RunState``."""
    from piw.run.runner import ForegroundOptions, resume_run

    def resume(run_id: str, *, durability: str | None = None, files: Any = None) -> Any:
        return resume_run(run_id, piw_home, ForegroundOptions(durability=durability, files=files))

    return resume


@pytest.fixture
def read_trace_lines(piw_home: Path) -> Callable[[str], list[dict[str, Any]]]:
    return lambda run_id: trace_lines(piw_home, run_id)


@pytest.fixture
def single_run_id(piw_home: Path) -> Callable[[], str]:
    return lambda: only_run_id(piw_home)
