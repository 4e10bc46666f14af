"""pydantic's plugin scan (``piw/pydantic_plugins.py``): skipped in a piw process unless ``PYDANTIC_DISABLE_PLUGINS``
is set, in which case pydantic loads the plugins its rules allow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import piw
from pydantic import BaseModel

class Shape(BaseModel):
    x: int

print(Shape(x=1).x)
"""


def _site(tmp_path: Path) -> Path:
    """A folder holding an installed distribution whose ``pydantic`` entry point writes a file when loaded."""
    site = tmp_path / "site"
    info = site / "marker_plugin-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: marker-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nmarker = marker_plugin:plugin\n")
    (site / "marker_plugin.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(os.environ['MARKER']).write_text('loaded')\n"
        "class _Plugin:\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n"
        "plugin = _Plugin()\n"
    )
    return site


def _run(tmp_path: Path, **env: str) -> bool:
    marker = tmp_path / "marker"
    marker.unlink(missing_ok=True)
    base = {key: value for key, value in os.environ.items() if key != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**base, "PYTHONPATH": str(_site(tmp_path)), "MARKER": str(marker), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    return marker.exists()


def test_a_piw_process_loads_no_pydantic_plugin(tmp_path: Path) -> None:
    assert _run(tmp_path) is False


def test_the_variable_set_gives_pydantic_its_own_rules(tmp_path: Path) -> None:
    assert _run(tmp_path, PYDANTIC_DISABLE_PLUGINS="") is True  # empty: every plugin loads, as in pydantic
    assert _run(tmp_path, PYDANTIC_DISABLE_PLUGINS="__all__") is False


def test_the_loader_piw_serves_answers_what_pydantic_asks_of_it() -> None:
    """The stand-in answers ``get_plugins()`` with none without importing ``importlib.metadata``; any other name is
    taken from pydantic's real loader, loaded then."""
    probe = (
        "import sys, piw\n"
        "from pydantic import BaseModel\n"
        "class Shape(BaseModel):\n"
        "    x: int\n"
        "Shape(x=1)\n"
        "from pydantic.plugin._loader import get_plugins\n"
        "print(list(get_plugins()), 'importlib.metadata' in sys.modules)\n"
        "from pydantic.plugin._loader import entry_points\n"
        "print(entry_points.__module__)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[] False", "importlib.metadata"]
