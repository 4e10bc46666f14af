"""A repeatable option reads ``--text <str>`` and says it repeats, not ``--text <list[str]>`` (issue 26, confusing):
the option takes one value each time it is given, never a list literal."""

from __future__ import annotations

from tests.support.cli import Cli


def test_decide_help_shows_a_repeatable_text_option(cli: Cli) -> None:
    shown = cli("decide", "--help")
    assert shown.returncode == 0
    assert "list[" not in shown.stdout
    options = " ".join(shown.stdout.split("Options:", 1)[1].split())
    entry = options.split("--text", 1)[1].split("--request-sha256", 1)[0]
    assert entry.split()[0] == "<str>" and "(repeatable)" in entry
