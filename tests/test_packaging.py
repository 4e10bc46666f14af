"""The wheel ships the package and the workflows (``piw/workflows``), and an installed copy finds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(REPO),
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("piw-*.whl")
    return built


def test_wheel_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "piw/__init__.py" in names and "piw/run/engine.py" in names and "piw/cli/__init__.py" in names
    assert "piw/workflows/examples/hello.workflow.py" in names
    assert "piw/store/pg/migrations/0001_initial.sql" in names  # the PostgreSQL schema ships as package data
    shipped = {n for n in names if n.startswith("piw/workflows/")}
    repo_files = {
        f"piw/{p.relative_to(REPO).as_posix()}"
        for p in (REPO / "workflows").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert repo_files <= shipped
    assert not any(n.startswith(("tests/", "bench/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "piw = piw.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.mark.long
def test_an_installed_copy_runs_shipped_workflows(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": str(target), "PIW_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import piw, piw.workflow.loader; print(piw.__file__); print(piw.workflow.loader.shipped_workflows_dir())",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tmp_path,
    )
    package_file, shipped = probe.stdout.splitlines()
    assert Path(package_file).parent == target / "piw"  # the installed copy, not the repository
    assert Path(shipped) == target / "piw" / "workflows"
    run = subprocess.run(
        [sys.executable, "-c", "from piw.cli.main import main; main()", "run", "hello", "--json"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["status"] == "completed"
    listed = subprocess.run(
        [sys.executable, "-c", "from piw.cli.main import main; main()", "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tmp_path,
    )
    hello = next(row for row in json.loads(listed.stdout) if row["id"] == "hello")
    assert hello["source"]["path"] == str(target / "piw" / "workflows" / "examples" / "hello.workflow.py")
