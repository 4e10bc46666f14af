"""A workflow importing a module that sits beside it is told why that fails and how to do it (issue 26, "confusing").

piw does not put a workflow file's folder on ``sys.path`` (``docs/authoring.md``), so ``import helper`` of a sibling
``helper.py`` failed with a bare ``ModuleNotFoundError: No module named 'helper'``, which reads as if the file were
missing. The error now says the folder is not on ``sys.path`` and how to import it; a module that exists nowhere
keeps the plain error.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.cli import Cli

HELPER = "GREETING = 'hello from the helper'\n"
FLOW = """
{imports}
from piw import compute, define_workflow

workflow = define_workflow(name="sib", start_at="go", nodes={{"go": compute(lambda ctx: {{"said": GREETING}})}})
"""


def _write(folder: Path, imports: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sib.workflow.py"
    path.write_text(textwrap.dedent(FLOW.format(imports=imports)).lstrip(), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("imports", "layout"),
    [
        ("from helper import GREETING", {"helper.py": HELPER}),
        ("import helper\nGREETING = helper.GREETING", {"helper.py": HELPER}),
        ("from tools.words import GREETING", {"tools/__init__.py": "", "tools/words.py": HELPER}),
    ],
    ids=["from-module", "import-module", "package"],
)
def test_a_sibling_import_says_the_folder_is_not_on_sys_path(
    cli: Cli, tmp_path: Path, imports: str, layout: dict[str, str]
) -> None:
    folder = tmp_path / "flows"
    for name, text in layout.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    path = _write(folder, imports)
    for command in (("validate", str(path)), ("run", str(path))):
        done = cli(*command)
        assert done.returncode == 2, done.stdout
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"Error: {path}:1: ModuleNotFoundError: No module named ")
        assert f"the workflow's folder ({folder}) is not on sys.path" in line
        assert "sys.path.insert(0, str(Path(__file__).parent))" in line


def test_following_the_hint_loads_the_sibling(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "helper.py").write_text(HELPER, encoding="utf-8")
    path = _write(folder, "import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path(__file__).parent))\n"
                          "from helper import GREETING")  # fmt: skip
    done = cli("run", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert '"said": "hello from the helper"' in done.stdout


def test_a_module_that_is_nowhere_keeps_the_plain_error(cli: Cli, tmp_path: Path) -> None:
    path = _write(tmp_path / "flows", "from no_such_module_anywhere import GREETING")
    done = cli("validate", str(path))
    assert done.returncode == 2
    assert done.stderr == f"Error: {path}:1: ModuleNotFoundError: No module named 'no_such_module_anywhere'\n"
