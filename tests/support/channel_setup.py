"""Set-up the channel tests share: a gate workflow and ``[channels.NAME]`` tables pointing at stand-ins."""

from __future__ import annotations

from pathlib import Path

GATE = """
from piw import compute, define_workflow, edge, human_decision

workflow = define_workflow(
    name="gate",
    start_at="approve",
    nodes={
        "approve": human_decision(
            "ops", ["ship", "hold"], {"title": "Ship <b>1.2</b> & tag it?", "summary": "All green."}
        ),
        "after": compute(lambda ctx: {"got": ctx.outputs["approve"]["choice"]}),
    },
    edges=[edge("approve", "after")],
)
"""

SECRET_ENV = "PIW_TEST_WEBHOOK_SECRET"
SECRET = "whsec-0123456789abcdef"
BOT_ENV = "PIW_TEST_BOT_TOKEN"


def write_channels(home: Path, tables: str) -> None:
    """``home/config.toml`` with ``tables`` (TOML text of ``[channels.NAME]`` tables)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(tables, encoding="utf-8")


def webhook_table(url: str, name: str = "hook", extra: str = "") -> str:
    return (
        f'[channels.{name}]\nkind = "webhook"\nurl = "{url}/hook"\nsecret = "${SECRET_ENV}"\n'
        f'audiences = ["ops"]\n{extra}\n'
    )


def telegram_table(base_url: str, name: str = "tg", extra: str = "") -> str:
    return (
        f'[channels.{name}]\nkind = "telegram"\nbot_token = "${BOT_ENV}"\nchat_id = "-1001"\n'
        f'base_url = "{base_url}"\npoll_timeout_s = 1\naudiences = ["ops"]\n{extra}\n'
    )


def ntfy_table(url: str, name: str = "phone", extra: str = "") -> str:
    return f'[channels.{name}]\nkind = "ntfy"\nserver = "{url}"\ntopic = "piw-test"\naudiences = ["ops"]\n{extra}\n'
