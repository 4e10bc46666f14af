"""Shared fixtures: a private ``PIW_HOME`` per test, no model requests, and helpers that drive piw for real.

Tests talk to piw through its public surface: the ``piw`` command, the public API, and the files a run leaves
on disk. ``cli`` runs the console script's entry point in process (``cli.process``/``cli.popen``: a real
subprocess); ``run_workflow`` starts a run in-process through the same library call ``piw run`` makes
(``piw.run.runner.start_run``), e.g. with a fake file layer.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from piw_inprocess import run_piw

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

try:
    import piw.providers as _providers
except Exception:  # pragma: no cover - the provider layer is written by a colleague
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

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
WORKFLOW_FIXTURES = FIXTURES / "workflows"
_SCRIPT = Path(sys.executable).with_name("piw")
PIW_COMMAND = (
    [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-c", "from piw.cli.main import main; main()"]
)


@pytest.fixture(autouse=True)
def piw_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own ``PIW_HOME``; provider keys and durability overrides are cleared."""
    home = tmp_path_factory.mktemp("piw-home")
    monkeypatch.setenv("PIW_HOME", str(home))
    for key in list(os.environ):
        if key.startswith(("OPENAI_", "ANTHROPIC_", "PIW_TEST_")) or key in (
            "PIW_DURABILITY",
            "PIW_PROVIDER",
        ):
            monkeypatch.delenv(key, raising=False)
    if _providers is not None:
        monkeypatch.setattr(_providers, "ALLOW_MODEL_REQUESTS", False)
    yield home


@dataclass
class Cli:
    """Runs ``piw`` with the test's ``PIW_HOME``: in this process by default, as a real subprocess on request.

    ``cli(*args)`` calls the console script's entry point in process (``tests/piw_inprocess.py``: same argv,
    environment, working directory and non-terminal streams as a subprocess, process state put back after);
    ``cli.process(*args)`` and ``cli.popen(*args)`` start the real ``piw`` script, for tests where process
    behaviour (signals, crashes, terminals, locks, races) is the point.
    """

    home: Path
    cwd: Path

    def environment(self, env: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, "PIW_HOME": str(self.home), "NO_COLOR": "1", "COLUMNS": "100", **(env or {})}

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """In process; ``timeout`` is kept for the signature (pytest-timeout bounds every test)."""
        return run_piw(args, env=self.environment(env), cwd=self.cwd, input=input)

    def process(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Always a real subprocess: for tests where process behaviour (signals, exit, terminals, locks) is
        the point."""
        return subprocess.run(
            [*PIW_COMMAND, *args],
            cwd=self.cwd,
            env=self.environment(env),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*PIW_COMMAND, *args],
            cwd=self.cwd,
            env=self.environment(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        """Run a ``--json`` command and parse its stdout (which must be the only output there)."""
        done = self(*args, "--json", env=env)
        assert done.returncode in (0, 1), done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def cli(piw_home: Path, tmp_path: Path) -> Cli:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Cli(piw_home, work)


WorkflowMaker = Callable[[str, str], Path]


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


RunWorkflow = Callable[..., Any]


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


def bundle_dir(home: Path, run_id: str) -> Path:
    return home / "runs" / run_id


def trace_lines(home: Path, run_id: str) -> list[dict[str, Any]]:
    """Every line of a run's trace as parsed JSON (the file must be fully valid)."""
    data = (bundle_dir(home, run_id) / "trace.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in data.splitlines()]


@pytest.fixture
def read_trace_lines(piw_home: Path) -> Callable[[str], list[dict[str, Any]]]:
    return lambda run_id: trace_lines(piw_home, run_id)


def only_run_id(home: Path) -> str:
    """The id of the single run bundle in ``home``."""
    runs = [p.name for p in (home / "runs").iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture
def single_run_id(piw_home: Path) -> Callable[[], str]:
    return lambda: only_run_id(piw_home)
