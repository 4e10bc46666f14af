"""A choice's answer URL answers with a bare ``POST`` (what an ntfy action button or a webhook receiver sends) to a
real ``piw serve``; the same URL then refuses (``docs/channels.md``, "Answer tokens")."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from piw.store.db.run_database import open_run_database
from tests.support.channel_setup import GATE, SECRET, SECRET_ENV, webhook_table, write_channels
from tests.support.channel_stubs import Receiver, serving
from tests.support.cli import Cli
from tests.support.page_server import page_server
from tests.support.runs import WorkflowMaker


def _post(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.timeout(120)
def test_a_bare_post_to_a_choice_url_answers_once(
    cli: Cli, make_workflow: WorkflowMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with serving(Receiver()) as hook, page_server(cli.home) as site:
        write_channels(cli.home, webhook_table(hook.url, extra=f'answer_url = "{site}"'))
        done = cli("run", str(make_workflow("gate", GATE)), "--json")
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["runId"]
        urls = {item["choice"]: item["url"] for item in hook.received[0].json()["answers"]}
        status, page = _post(urls["hold"])
        assert status == 200 and "Recorded hold" in page, page
        assert _post(urls["hold"])[0] == 410  # used
        assert _post(urls["ship"])[0] == 410  # its wait is over
    (decision,) = open_run_database(cli.home).decisions.decisions_of(run_id)
    assert decision.response is not None and decision.response["choice"] == "hold"
    assert decision.answered_by == "hook answer page (127.0.0.1)"
