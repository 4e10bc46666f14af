"""ntfy posts with one action button per choice; a failing channel is retried with backoff, shown by
``piw inspect``, and never fails the run; reminders follow ``remind_every``/``remind_max`` (``docs/channels.md``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piw.channels.duty import ChannelDuty
from piw.store.db.channels import open_channel_store
from tests.support.channel_setup import GATE, SECRET, SECRET_ENV, ntfy_table, webhook_table, write_channels
from tests.support.channel_stubs import Receiver, serving
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker


def _waiting(cli: Cli, path: Path, env: dict[str, str] | None = None) -> str:
    done = cli("run", str(path), "--json", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "waiting"
    return str(result["runId"])


def test_ntfy_gets_a_plain_message_with_one_answer_button_per_choice(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    with serving(Receiver()) as ntfy:
        write_channels(cli.home, ntfy_table(ntfy.url, extra='answer_url = "http://127.0.0.1:9/piw"'))
        run_id = _waiting(cli, make_workflow("gate", GATE))
    (post,) = ntfy.received
    body = post.json()
    assert body["topic"] == "piw-test" and "authorization" not in post.headers
    assert body["title"] == "gate waits for ops"
    assert (
        "Ship <b>1.2</b> & tag it?" in body["message"] and run_id in body["message"]
    )  # plain text, no markup
    assert [(a["action"], a["label"], a["method"]) for a in body["actions"]] == [
        ("http", "ship", "POST"),
        ("http", "hold", "POST"),
    ]
    assert all(a["url"].startswith("http://127.0.0.1:9/piw/answer/") for a in body["actions"])
    assert body["click"].startswith("http://127.0.0.1:9/piw/answer/")


def test_a_failing_channel_is_retried_with_backoff_and_shown_by_inspect(
    cli: Cli, make_workflow: WorkflowMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with serving(Receiver(status=500)) as hook:
        write_channels(cli.home, webhook_table(hook.url))
        run_id = _waiting(cli, make_workflow("gate", GATE))  # the run waits: the failed post does not fail it
        assert len(hook.received) == 1

        shown = cli("inspect", run_id)
        assert shown.returncode == 0
        assert "Channel hook: failing: HTTP 500 (attempt 1, next try in" in shown.stdout
        (post,) = cli.json("inspect", run_id)["decision"]["channels"]
        assert post["status"] == "pending" and post["attempts"] == 1 and post["lastError"] == "HTTP 500"

        clock = [post["dueAt"] - 1]
        duty = ChannelDuty(cli.home)
        store = open_channel_store(cli.home, clock=lambda: clock[0])
        assert store.lease_due() == []  # not due before its backoff
        clock[0] = post["dueAt"] + 1
        hook.status = 200
        (due,) = store.lease_due()
        assert duty.deliver(store, due, duty.channels())
        duty.close()
    assert len(hook.received) == 2
    assert hook.received[0].headers["x-piw-delivery"] == hook.received[1].headers["x-piw-delivery"]
    assert "Channel hook: sent" in cli("inspect", run_id).stdout


def test_reminders_follow_remind_every_up_to_remind_max(
    cli: Cli, make_workflow: WorkflowMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with serving(Receiver()) as hook:
        write_channels(cli.home, webhook_table(hook.url, extra='remind_every = "30m"\nremind_max = 2'))
        run_id = _waiting(cli, make_workflow("gate", GATE))
        clock = [0]
        store = open_channel_store(cli.home, clock=lambda: clock[0])
        duty = ChannelDuty(cli.home)
        for _ in range(4):
            (post,) = store.posts_of(run_id)
            if post.due_at is None:
                break
            clock[0] = post.due_at + 1
            (due,) = store.lease_due()
            assert duty.deliver(store, due, duty.channels())
        duty.close()
        (post,) = store.posts_of(run_id)
    assert [r.json()["reminder"] for r in hook.received] == [0, 1, 2]
    assert post.due_at is None and post.sends == 3
    assert "Channel hook: sent (2 reminders)" in cli("inspect", run_id).stdout
