"""Help that reads well: whole first sentences, ``WORKFLOW`` in usage, ``--version``, the environment.

Before, the command list cut sentences ("…until it ends, waits, or is..."), usage lines read ``{workflow}``, there
was no ``--version`` and the help never named ``PIW_HOME`` or ``PIW_PROVIDER``.
"""

from __future__ import annotations

import re
from importlib.metadata import version

from tests.support.cli import Cli

COMMAND_ROW = re.compile(r"^  ([a-z]+)\s{2,}(\S.*)$")


def _commands(help_text: str) -> dict[str, str]:
    """The command list of ``piw --help``: name → its (re-joined) description."""
    rows: dict[str, str] = {}
    current = None
    section = help_text.split("Commands:\n", 1)[1]
    for line in section.splitlines():
        if not line.strip():
            break
        match = COMMAND_ROW.match(line)
        if match:
            current = match.group(1)
            rows[current] = match.group(2)
        elif current is not None:
            rows[current] += " " + line.strip()
    return rows


def test_the_top_level_help_shows_whole_first_sentences(cli: Cli) -> None:
    done = cli("--help", env={"COLUMNS": "80"})
    assert done.returncode == 0
    rows = _commands(done.stdout)
    assert rows["run"] == "Start a run and follow it until it ends, waits, or is interrupted."
    for name, text in rows.items():
        assert not text.endswith("..."), (name, text)
        assert text.endswith((".", ")")), (name, text)
    assert all(len(line) <= 80 for line in done.stdout.splitlines())


def test_the_help_names_the_environment_and_a_first_command(cli: Cli) -> None:
    text = " ".join(cli("--help").stdout.split())
    assert "PIW_HOME" in text and "PIW_PROVIDER" in text and "~/.local/share/piw" in text
    assert "'piw run hello'" in text


def test_usage_lines_name_arguments_in_capitals(cli: Cli) -> None:
    for command, usage in [
        ("run", "Usage: piw run [OPTIONS] WORKFLOW"),
        ("inspect", "Usage: piw inspect [OPTIONS] [RUN_ID]"),
        ("watch", "Usage: piw watch [OPTIONS] [RUN_ID]"),
        ("validate", "Usage: piw validate [OPTIONS] FILE"),
    ]:
        shown = cli(command, "--help").stdout
        assert shown.splitlines()[0] == usage
        assert "{" not in shown.splitlines()[0]
    missing = cli("validate")  # (inspect without a run id shows the newest run since issue 26)
    assert missing.returncode == 2 and missing.stderr == "Error: Missing argument 'FILE'.\n"


def test_version(cli: Cli) -> None:
    done = cli("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"piw {version('piw')}\n", "")


def test_help_advertises_only_commands_that_exist(cli: Cli) -> None:
    top = cli("--help").stdout
    existing = set(_commands(top))
    texts = [top] + [cli(name, "--help").stdout for name in sorted(existing)]
    for text in texts:
        for named in re.findall(r"'piw ([a-z]+)", text):
            assert named in existing, f"help mentions 'piw {named}', which is not a command"
