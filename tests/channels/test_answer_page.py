"""The answer page of a real ``piw serve`` in a real headless Chromium: an answer link opens the request, its
digest and one button per choice; pressing one continues the run; the link then refuses (``docs/channels.md``,
"The answer page")."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from piw.store.bundle import load_state, open_bundle
from piw.store.db.run_database import open_run_database
from tests.support.browser import Browser, Tab, chromium
from tests.support.channel_setup import GATE, SECRET, SECRET_ENV, webhook_table, write_channels
from tests.support.channel_stubs import Receiver, serving
from tests.support.cli import Cli
from tests.support.page_server import page_server
from tests.support.runs import WorkflowMaker

CHROMIUM = chromium()
if CHROMIUM is None and os.environ.get("PIW_REQUIRE_CHROMIUM") == "1":
    raise RuntimeError("PIW_REQUIRE_CHROMIUM=1 and no chromium on PATH: apt-get install -y chromium")


@pytest.mark.timeout(180)
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_pressing_a_button_on_the_answer_page_continues_the_run(
    cli: Cli, make_workflow: WorkflowMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CHROMIUM is not None
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with serving(Receiver()) as hook, page_server(cli.home) as site:
        write_channels(cli.home, webhook_table(hook.url, extra=f'answer_url = "{site}"'))
        done = cli("run", str(make_workflow("gate", GATE)), "--json")
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["runId"]
        (post,) = hook.received
        link = post.json()["answerPage"]
        digest = post.json()["requestSha256"]
        assert link.startswith(f"{site}/answer/")

        with urllib.request.urlopen(link, timeout=30) as response:  # looking does not use the link
            assert "default-src 'none'" in response.headers["Content-Security-Policy"]  # no script may run
            assert "<script" not in response.read().decode()

        browser = Browser(CHROMIUM)
        try:

            async def answer(tab: Tab) -> tuple[str, str, int, str]:
                await tab.goto(link)
                shown = await tab.text()
                await tab.click('button[value="ship"]')
                recorded = await tab.text()
                await tab.goto(link)  # the same link again
                return shown, recorded, await tab.status(), await tab.text()

            shown, recorded, again_status, again = browser.run(answer)
        finally:
            browser.close()

    assert "Ship <b>1.2</b> & tag it?" in shown  # escaped: shown as text, not markup
    assert "All green." in shown and digest in shown and run_id in shown
    assert "ship" in shown and "hold" in shown
    assert "Answer recorded" in recorded and "Recorded ship" in recorded
    assert again_status == 410 and "already used" in again

    (decision,) = open_run_database(cli.home).decisions.decisions_of(run_id)
    assert decision.status == "resolved" and decision.provenance == "human"
    assert decision.answered_by == "hook answer page (127.0.0.1)"
    continuation = str(decision.continuation_run_id)
    assert continuation in recorded
    assert cli("host", "--once").returncode == 0  # a host runs the continuation the page started
    state = load_state(open_bundle(cli.home, continuation))
    assert state.status == "completed" and state.final_output == {"got": "ship"}
    stored = "".join(p.read_text(errors="replace") for p in Path(cli.home / "runs").rglob("*") if p.is_file())
    assert link.rsplit("/", 1)[1] not in stored
