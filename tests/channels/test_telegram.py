"""A gate posted to Telegram by a real ``piw host``, answered by a button press read back by long polling
(``docs/channels.md``, "Telegram"). The Bot API is a loopback stand-in the test drives."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from piw.store.bundle import load_state, open_bundle
from piw.store.db.run_database import open_run_database
from tests.support.channel_setup import BOT_ENV, GATE, telegram_table, write_channels
from tests.support.channel_stubs import TelegramStandIn, serving
from tests.support.cli import Cli
from tests.support.hosts import HostProcess, wait_for
from tests.support.runs import WorkflowMaker

ALICE = {"id": 4242, "is_bot": False, "first_name": "Alice", "username": "alice"}


def _completed(home: Path, run_id: str) -> bool:
    try:
        return load_state(open_bundle(home, run_id)).status == "completed"
    except Exception:
        return False


@pytest.mark.timeout(120)
def test_a_button_press_continues_the_run_and_records_the_channel_user(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    with serving(TelegramStandIn()) as bot:
        assert isinstance(bot, TelegramStandIn)
        write_channels(cli.home, telegram_table(bot.url))
        env = {BOT_ENV: bot.token}
        host = HostProcess("h1", cli.home, env=env).start()
        try:
            done = cli("run", str(make_workflow("gate", GATE)), "--detach", "--json")
            assert done.returncode == 0, done.stderr
            run_id = json.loads(done.stdout)["runId"]
            wait_for(lambda: bot.messages, what="the gate's message")
            (message,) = bot.messages
            assert message["chat_id"] == "-1001" and message["parse_mode"] == "HTML"
            assert "Ship &lt;b&gt;1.2&lt;/b&gt; &amp; tag it?" in message["text"]  # neutralised for HTML
            labels = [b["text"] for row in message["reply_markup"]["inline_keyboard"] for b in row]
            assert labels == ["ship", "hold"]

            bot.press(1, "ship", ALICE)
            decisions = open_run_database(cli.home).decisions
            (decision,) = wait_for(
                lambda: [d for d in decisions.decisions_of(run_id) if d.status == "resolved"],
                what="the press to resolve the gate",
            )
            assert decision.provenance == "human"
            assert decision.answered_by == "telegram tg: @alice (id 4242)"
            assert decision.response is not None and decision.response["choice"] == "ship"
            continuation = str(decision.continuation_run_id)
            wait_for(lambda: _completed(cli.home, continuation), what="the continuation to complete")
            final = load_state(open_bundle(cli.home, continuation)).final_output
            assert final == {"got": "ship"}
            wait_for(lambda: bot.answered() == ["Recorded: ship"], what="the press to be acknowledged")

            bot.press(1, "hold", ALICE)  # the wait is over: the other button is refused
            wait_for(lambda: len(bot.answered()) == 2, what="the second press's answer")
            assert bot.answered()[1] == "This button was already used or has expired."
        finally:
            host.signal(signal.SIGTERM)
            code, out, err = host.finish()
        assert code == 0, err
        assert "answered ship by telegram tg: @alice" in out

    tokens = [b["callback_data"] for row in message["reply_markup"]["inline_keyboard"] for b in row]
    runs = cli.home / "runs"
    recorded = "".join(path.read_text(errors="replace") for path in runs.rglob("*") if path.is_file())
    for secret in (bot.token, *tokens):
        assert secret not in recorded and secret not in out and secret not in err


def test_a_press_by_someone_not_allowed_is_refused_and_an_allowed_one_counts(
    cli: Cli, make_workflow: WorkflowMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from piw.channels.duty import ChannelDuty

    with serving(TelegramStandIn()) as bot:
        assert isinstance(bot, TelegramStandIn)
        write_channels(cli.home, telegram_table(bot.url, extra='allowed_users = ["@alice"]'))
        monkeypatch.setenv(BOT_ENV, bot.token)
        done = cli("run", str(make_workflow("gate", GATE)), "--json")  # the foreground posts it
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["runId"]
        assert len(bot.messages) == 1
        duty = ChannelDuty(cli.home)
        try:
            duty.tick()  # starts the poller (nothing more to send)
            bot.press(1, "hold", {"id": 7, "username": "mallory\x1b[2J"})
            wait_for(lambda: bot.answered() == ["You may not answer this."], what="the refusal")
            bot.press(1, "ship", ALICE)
            wait_for(lambda: len(bot.answered()) == 2, what="the allowed press")
        finally:
            duty.close()
    assert bot.answered()[1] == "Recorded: ship"
    (decision,) = open_run_database(cli.home).decisions.decisions_of(run_id)
    assert decision.response is not None and decision.response["choice"] == "ship"
    assert decision.answered_by == "telegram tg: @alice (id 4242)"
