"""A command stopped (SIGTERM, Ctrl-C) before it recorded anything says so in one line and exits 130.

``piw run`` stopped while it imports the workflow file: nothing has been recorded yet, so there is no run to park;
stderr holds ``Error: interrupted.`` (``docs/cli.md``, exit codes) and no bundle exists.
"""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

from tests.support.cli import Cli
from tests.support.hosts import wait_for

SLOW_TO_LOAD = """
import os, time
from pathlib import Path
from piw import compute, define_workflow

Path(os.environ["PIW_TEST_LOADING_MARK"]).write_text("loading")
time.sleep(20)  # the command is stopped while this file is being imported

workflow = define_workflow(name="slow", start_at="one", nodes={"one": compute(lambda ctx: {})})
"""


def test_run_stopped_while_importing_its_workflow_says_interrupted(cli: Cli, tmp_path: Path) -> None:
    flow = tmp_path / "slow.workflow.py"
    flow.write_text(textwrap.dedent(SLOW_TO_LOAD).lstrip())
    mark = tmp_path / "loading"
    process = cli.popen("run", str(flow), env={"PIW_TEST_LOADING_MARK": str(mark)})
    try:
        wait_for(mark.exists, what="piw run to import the workflow file")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert (process.returncode, err) == (130, "Error: interrupted.\n"), out
    assert not (cli.home / "runs").exists() or not any((cli.home / "runs").iterdir())
