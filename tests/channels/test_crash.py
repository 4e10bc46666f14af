"""A host killed (SIGKILL) after a gate queued its channel post and before its ``notification_queued`` was
written: the next host reruns the gate, adopts the post, and the person is told once (``docs/channels.md``)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from piw.store.db.channels import open_channel_store
from tests.support.channel_setup import GATE, SECRET, SECRET_ENV, webhook_table, write_channels
from tests.support.channel_stubs import Receiver, serving
from tests.support.cli import Cli
from tests.support.hosts import HostProcess
from tests.support.runs import WorkflowMaker, trace_lines


def _queue(cli: Cli, path: Path) -> str:
    done = cli("run", str(path), "--detach", "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["runId"])


@pytest.mark.timeout(120)
def test_a_crash_between_the_post_row_and_notification_queued_posts_once(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    env = {SECRET_ENV: SECRET}
    with serving(Receiver()) as hook:
        write_channels(cli.home, webhook_table(hook.url))
        gate = make_workflow("gate", GATE)

        reference = _queue(cli, gate)  # where notification_queued falls in a detached run of this gate
        code, _, err = HostProcess("ref", cli.home, ("--once",), env=env).start().finish()
        assert code == 0, err
        (queued_at,) = [
            e["seq"] for e in trace_lines(cli.home, reference) if e["type"] == "notification_queued"
        ]

        run_id = _queue(cli, gate)
        kill = {**env, "PIW_TEST_KILL_BEFORE_APPEND": str(queued_at)}
        code, _, err = HostProcess("box", cli.home, ("--max-runs", "1"), env=kill).start().finish()
        assert code == -signal.SIGKILL, err
        (post,) = open_channel_store(cli.home).posts_of(run_id)  # the row is there; the event is not
        assert post.sends == 0
        assert not [e for e in trace_lines(cli.home, run_id) if e["type"] == "notification_queued"]

        for _ in range(
            2
        ):  # the rerun (same machine: the dead holder's claim is taken over at once), one more pass
            code, _, err = HostProcess("box", cli.home, ("--once",), env=env).start().finish()
            assert code == 0, err

        mine = [r for r in hook.received if r.json()["runId"] == run_id]
        assert len(mine) == 1
        events = [e for e in trace_lines(cli.home, run_id) if e["type"] == "notification_queued"]
        assert [e["payload"]["notificationId"] for e in events] == [post.post_id]
        (after,) = open_channel_store(cli.home).posts_of(run_id)
        assert after.status == "sent" and after.sends == 1
