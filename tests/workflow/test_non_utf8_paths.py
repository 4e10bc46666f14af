"""A workflow path holding bytes that are not UTF-8 is one clear line, not a traceback (issue 27 item 5).

The CLI gets its arguments as bytes; Python keeps ``b"\\xff"`` as a lone surrogate, which failed deep inside
(hashing the path for the module name) with a ``UnicodeEncodeError`` traceback in ``run``, ``validate``, ``graph``
and ``show``. Real subprocesses with bytes in ``argv``, as a shell passes them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import PIW_COMMAND, Cli

GOOD = """from piw import compute, define_workflow

workflow = define_workflow(name="good", start_at="go", nodes={"go": compute(lambda ctx: {"ok": True})})
"""


def _piw(cli: Cli, *args: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*(os.fsencode(part) for part in PIW_COMMAND), *args],
        cwd=cli.cwd,
        env=cli.environment(),
        capture_output=True,
        timeout=60,
        check=False,
    )


def _bad_file(folder: bytes) -> bytes:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, b"sp\xffin.workflow.py")
    with open(path, "wb") as file:
        file.write(GOOD.encode())
    return path


@pytest.mark.parametrize("command", [b"validate", b"run", b"graph", b"show"])
@pytest.mark.parametrize("where", ["file", "folder", "missing"])
def test_a_non_utf8_workflow_path_is_one_clear_line(
    cli: Cli, tmp_path: Path, command: bytes, where: str
) -> None:
    base = os.fsencode(tmp_path)
    if where == "file":
        path = _bad_file(os.path.join(base, b"flows"))
    elif where == "folder":
        path = os.path.join(base, b"fl\xfeows", b"good.workflow.py")
        os.makedirs(os.path.dirname(path))
        Path(os.fsdecode(path)).write_text(GOOD, encoding="utf-8")
    else:
        path = os.path.join(base, b"no\xff.workflow.py")
    done = _piw(cli, command, path)
    stderr = done.stderr.decode("utf-8")  # what piw prints is UTF-8 whatever the path held
    assert done.returncode != 0
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "not valid UTF-8" in lines[0] and "\\x" in lines[0]
    assert not (cli.home / "runs").exists() or not any((cli.home / "runs").iterdir())


def test_list_names_a_non_utf8_file_and_lists_the_rest(cli: Cli) -> None:
    folder = os.fsencode(cli.home / "workflows")
    _bad_file(folder)
    Path(os.fsdecode(folder), "good.workflow.py").write_text(GOOD, encoding="utf-8")
    done = _piw(cli, b"list", b"--json")
    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row for row in json.loads(done.stdout)}
    assert rows["good"]["description"] is None
    assert "not valid UTF-8" in rows["sp\\xffin"]["description"]
    table = _piw(cli, b"list")
    assert table.returncode == 0 and b"Traceback" not in table.stderr
