"""``piw`` for a test: the console script's entry point in process, or the real script as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.inprocess import run_piw

_SCRIPT = Path(sys.executable).with_name("piw")
PIW_COMMAND = (
    [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-c", "from piw.cli.main import main; main()"]
)


@dataclass
class Cli:
    """Runs ``piw`` with the test's ``PIW_HOME``: in this process by default, as a real subprocess on request.

    ``cli(*args)`` calls the console script's entry point in process (``tests/support/inprocess.py``: same argv,
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
