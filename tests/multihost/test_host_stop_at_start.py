"""A ``piw host --database`` stopped while it is still starting (loading the workflows it serves) ends cleanly.

SIGTERM at any point after the host's banner parks what runs, which at start-up is nothing: exit 0, the closing
"stopped" line, no error, and no ``hosts`` row left behind (``docs/detached.md``, "Ctrl-C (or SIGTERM) stops it").
"""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest

from tests.support.hosts import HostProcess, database_url, wait_for
from tests.support.pg import PgServer

pytestmark = pytest.mark.timeout(120)

SLOW_TO_LOAD = """
import os, time
from pathlib import Path
from piw import compute, define_workflow

Path(os.environ["PIW_TEST_LOADING_MARK"]).write_text("loading")
time.sleep(20)  # the host is stopped while this file is being imported

workflow = define_workflow(name="slow", start_at="one", nodes={"one": compute(lambda ctx: {})})
"""


def test_host_stopped_while_loading_its_workflows_exits_cleanly(
    pg_server: PgServer, pg_setting: object, tmp_path: Path
) -> None:
    schema = str(pg_setting.schema)  # type: ignore[attr-defined]
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "slow.workflow.py").write_text(textwrap.dedent(SLOW_TO_LOAD).lstrip())
    mark = tmp_path / "loading"
    host = HostProcess(
        "starting",
        tmp_path / "h",
        ("--database", database_url(pg_server, schema), "--workflows", str(flows)),
        env={"PIW_TEST_LOADING_MARK": str(mark)},
    ).start()
    try:
        wait_for(mark.exists, what="the host to import its workflow file")
        host.signal(signal.SIGTERM)
        code, out, err = host.finish()
    finally:
        host.kill()
    assert (code, err) == (0, ""), f"stdout {out!r}"
    assert out.splitlines()[-1] == "piw host: 0 runs claimed; stopped."
    assert pg_server.execute(f'SELECT count(*) FROM "{schema}".hosts') == [(0,)]
