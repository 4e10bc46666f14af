"""Channel secrets are redacted like provider keys: a step that prints a bot token stores ``[redacted]``
(``docs/channels.md``, ``docs/guarantees.md``)."""

from __future__ import annotations

from tests.support.channel_setup import BOT_ENV, telegram_table, write_channels
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

LEAKY = f"""
import os
from piw import compute, define_workflow

workflow = define_workflow(
    name="leaky", start_at="leak", nodes={{"leak": compute(lambda ctx: {{"token": os.environ["{BOT_ENV}"]}})}}
)
"""


def test_a_bot_token_a_step_prints_is_stored_redacted(cli: Cli, make_workflow: WorkflowMaker) -> None:
    token = "987654:leaked-bot-token-abcdef"
    write_channels(cli.home, telegram_table("http://127.0.0.1:9"))
    done = cli("run", str(make_workflow("leaky", LEAKY)), "--json", env={BOT_ENV: token})
    assert done.returncode == 0, done.stderr
    assert token not in done.stdout and "[redacted]" in done.stdout
    stored = "".join(p.read_text(errors="replace") for p in (cli.home / "runs").rglob("*") if p.is_file())
    assert token not in stored
