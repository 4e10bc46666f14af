"""§5 test 13 with real hosts: two ``piw host --database`` processes deliver every untargeted notification once.

Detached runs have no origin session, so their notifications wait in the database's outbox for any host: each host
takes a delivery lease on what it shows. Across both hosts' output every notification appears exactly once, and
every row ends delivered.
"""

from __future__ import annotations

import signal
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.support.hosts import FULL, HostProcess, database_url, queue_in, wait_for
from tests.support.pg import PgServer

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not FULL, reason="runs in the .ci/run multi-host phase (PIW_MULTIHOST_FULL=1)"),
]

FLOW = """
from piw import define_workflow, edge, notify

workflow = define_workflow(name="tell", start_at="a", nodes={
    "a": notify(lambda ctx: f"note {ctx.input['n']}-a"),
    "b": notify(lambda ctx: f"note {ctx.input['n']}-b"),
    "c": notify(lambda ctx: f"note {ctx.input['n']}-c", kind="final"),
}, edges=[edge("a", "b"), edge("b", "c")])
"""


def test_13_two_hosts_show_each_untargeted_notification_once(
    pg_server: PgServer, pg_setting: object, tmp_path: Path
) -> None:
    schema = str(pg_setting.schema)  # type: ignore[attr-defined]
    url = database_url(pg_server, schema)
    flows = tmp_path / "flows"
    flows.mkdir()
    flow = flows / "tell.workflow.py"
    flow.write_text(textwrap.dedent(FLOW).lstrip())
    runs = 4
    queue_in(tmp_path / "enqueuer", url, flow, [{"n": n} for n in range(runs)])
    args = ("--database", url, "--workflows", str(flows), "--concurrency", "2")
    hosts = [HostProcess(f"host-{i}", tmp_path / f"h{i}", args).start() for i in (0, 1)]
    delivered = f'SELECT count(*) FROM "{schema}".notifications WHERE delivered_at IS NOT NULL'
    try:
        wait_for(
            lambda: pg_server.execute(delivered)[0][0] == 3 * runs, timeout=90, what="every notification"
        )
    finally:
        outputs = []
        for host in hosts:
            host.signal(signal.SIGTERM)
            code, out, err = host.finish()
            assert code == 0, f"{err!r} OUT {out!r}"
            outputs.append(out)
    shown = Counter(line.split("✉ ", 1)[1] for out in outputs for line in out.splitlines() if "✉ " in line)
    assert shown == Counter(
        f"note {n}-{node}" for n in range(runs) for node in "abc"
    )  # each once, across hosts
