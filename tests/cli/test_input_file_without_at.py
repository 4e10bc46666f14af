"""``--input nofile.json`` is JSON text that is not JSON; the error says how to read a file (issue 26, confusing)."""

from __future__ import annotations

import pytest

from tests.support.cli import Cli


@pytest.mark.parametrize("exists", [True, False])
def test_a_file_name_given_as_input_text_hints_at_the_at_form(cli: Cli, exists: bool) -> None:
    if exists:
        (cli.cwd / "input.json").write_text('{"name": "Ada"}', encoding="utf-8")
    done = cli("run", "hello", "--input", "input.json")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: --input is not valid JSON (")
    assert "to read the file, write --input @input.json" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    if exists:
        assert cli("run", "hello", "--input", "@input.json").returncode == 0


def test_plain_bad_json_gets_no_file_hint(cli: Cli) -> None:
    done = cli("run", "hello", "--input", "{bad")
    assert done.returncode == 2 and "@" not in done.stderr
