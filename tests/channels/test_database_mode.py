"""Channels in database mode (``docs/many-machines.md``): the posts and tokens live in PostgreSQL (migration
0005), a wait is posted once, and its token answers it through the shared decision transaction."""

from __future__ import annotations

import json

import pytest

from piw.channels.answer import answer_with_token
from piw.errors import AnswerTokenRefused
from piw.store.pg.setting import DatabaseSetting
from tests.support.channel_setup import GATE, SECRET, SECRET_ENV, webhook_table, write_channels
from tests.support.channel_stubs import Receiver, serving
from tests.support.cli import Cli
from tests.support.pg import PgServer
from tests.support.runs import WorkflowMaker


def test_a_gate_in_database_mode_posts_once_and_its_token_answers_it(
    cli: Cli,
    make_workflow: WorkflowMaker,
    pg_server: PgServer,
    pg_setting: DatabaseSetting,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"{pg_setting.url}?schema={pg_setting.schema}"
    env = {"PIW_DATABASE": url, SECRET_ENV: SECRET}
    with serving(Receiver()) as hook:
        write_channels(cli.home, webhook_table(hook.url))
        done = cli("run", str(make_workflow("gate", GATE)), "--json", env=env)
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["runId"]
        assert cli("host", "--once", env=env).returncode == 0
    (post,) = hook.received
    tokens = {item["choice"]: item["token"] for item in post.json()["answers"]}
    schema = pg_setting.schema
    assert pg_server.execute(
        f'SELECT channel, sends FROM "{schema}".channel_posts WHERE run_id = %s', (run_id,)
    ) == [("hook", 1)]
    stored = pg_server.execute(f'SELECT token_sha256 FROM "{schema}".answer_tokens')
    assert stored and all(tokens["ship"] not in str(row) for row in stored)  # hashes only

    from piw.store.pg.place import forget, use

    monkeypatch.setenv(SECRET_ENV, SECRET)
    use(cli.home, url)
    try:
        receipt = answer_with_token(cli.home, tokens["ship"], None, {}, "webhook hook: alice")
        with pytest.raises(AnswerTokenRefused):
            answer_with_token(cli.home, tokens["ship"], None, {}, "webhook hook: alice")
    finally:
        forget(cli.home)
    rows = pg_server.execute(
        f'SELECT status, provenance, answered_by, continuation_run_id FROM "{schema}".human_decisions'
    )
    assert rows == [("resolved", "human", "webhook hook: alice", receipt.continuation_run_id)]
