"""``piw mcp list``, ``[mcp.NAME]`` config errors and ``piw show`` of a step with MCP tools (``docs/cli.md``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.agent_harness import home, piw_cli, write_workflow

__all__ = ["home"]

SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"

FLOW = """
from piw import agent, define_workflow, mcp

workflow = define_workflow(
    name="notes",
    start_at="look",
    nodes={"look": agent(prompt="Find it.", tools=(mcp("notes", only=["search"]), mcp("web")))},
)
"""


def write_config(home: Path, text: str) -> None:
    (home / "config.toml").write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.mark.long
def test_mcp_list_starts_each_server_lists_its_tools_and_says_why_one_failed(
    home: Path, tmp_path: Path
) -> None:
    write_config(
        home,
        f"""
        [mcp.notes]
        command = ["{sys.executable}", "{SERVER}", "stdio"]
        env = {{ MCP_CALLS_FILE = "{tmp_path / "calls"}", API_KEY = "literal-key-0a9b8c" }}
        [mcp.gone]
        command = ["{sys.executable}", "{SERVER}", "stdio"]
        env = {{ MCP_FAIL_AT_START = "1" }}
        """,
    )
    shown = piw_cli(home, "mcp", "list")
    assert shown.returncode == 1, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("gone  stdio  ")
    assert "  failed: MCP server 'gone'" in lines[1]
    assert "  | cannot open the notes database" in shown.stdout
    notes = lines.index(next(line for line in lines if line.startswith("notes  stdio  ")))
    assert lines[notes + 1].split() == ["notes__search", "Search", "the", "notes", "for", "a", "query."]
    assert "literal-key-0a9b8c" not in shown.stdout
    as_json = json.loads(piw_cli(home, "mcp", "list", "--json").stdout)
    assert [server["name"] for server in as_json] == ["gone", "notes"]
    assert [tool["offeredAs"] for tool in as_json[1]["tools"]] == [
        "notes__search",
        "notes__crash",
        "notes__locked",
        "notes__whoami",
        "notes__slow",
    ]
    assert not (tmp_path / "calls").exists()  # listing calls no tool


def test_mcp_list_without_servers_says_how_to_add_one(home: Path) -> None:
    shown = piw_cli(home, "mcp", "list")
    assert shown.returncode == 0
    assert "No MCP servers configured" in shown.stdout and "[mcp.NAME]" in shown.stdout


def test_a_bad_mcp_table_is_one_line_naming_the_key_and_exit_2(home: Path) -> None:
    for table, key in (
        ('[mcp.notes]\ncommand = ["x"]\nurl = "http://127.0.0.1:1/mcp"\n', "mcp.notes"),
        ('[mcp.notes]\ncomand = ["x"]\n', "mcp.notes.comand"),
        ('[mcp.notes]\nurl = "ftp://example"\n', "mcp.notes.url"),
        ('[mcp.notes]\ncommand = ["x"]\nenv = { "not a name" = "1" }\n', "mcp.notes.env"),
    ):
        write_config(home, table)
        shown = piw_cli(home, "mcp", "list")
        assert shown.returncode == 2, (table, shown.stdout)
        [line] = shown.stderr.strip().splitlines()
        assert line.startswith("Error: Invalid ") and key in line, line


def test_show_lists_a_steps_mcp_servers_and_run_refuses_an_unconfigured_one(
    home: Path, tmp_path: Path
) -> None:
    workflow = write_workflow(tmp_path / "wf", "notes", FLOW)
    shown = piw_cli(home, "show", str(workflow))
    assert shown.returncode == 0, shown.stderr
    assert "look  agent · mcp notes(search) · mcp web" in shown.stdout
    node = json.loads(piw_cli(home, "show", str(workflow), "--json").stdout)["graph"]["nodes"][0]
    assert node["mcp"] == [{"server": "notes", "only": ["search"]}, {"server": "web"}]
    write_config(home, '[mcp.notes]\nurl = "http://127.0.0.1:9/mcp"\n')
    refused = piw_cli(home, "run", str(workflow), "--provider", "scripted")
    assert refused.returncode == 2
    assert "Step look uses mcp('web') but config.toml has no [mcp.web] table" in refused.stderr
    write_config(
        home,
        '[agent]\nbackend = "pi-rpc"\n[mcp.notes]\nurl = "http://127.0.0.1:9/mcp"\n[mcp.web]\nurl = "http://127.0.0.1:9/w"\n',
    )
    refused = piw_cli(home, "run", str(workflow), "--provider", "scripted")
    assert refused.returncode == 2 and "MCP tools need the piw agent backend" in refused.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_server_that_never_answers_is_reported_and_stopped_after_its_start_timeout(home: Path) -> None:
    write_config(home, '[mcp.mute]\ncommand = ["sleep", "97.31"]\nstart_timeout_s = 1\n')
    shown = piw_cli(home, "mcp", "list")
    assert shown.returncode == 1
    assert "failed: MCP server 'mute' did not start within 1 s." in shown.stdout
    left = subprocess.run(["pgrep", "-f", "sleep 97.31"], capture_output=True, text=True)
    assert left.stdout == ""  # its process group was stopped, not left behind
