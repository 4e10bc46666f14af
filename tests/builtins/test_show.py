"""``piw show WORKFLOW``: description, input fields, graph, identity and an example command that works."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.support.builtin_harness import BUILTINS

IDS = sorted(p.name.removesuffix(".workflow.py") for p in BUILTINS.glob("*.workflow.py"))


def test_show_prints_description_fields_graph_identity_and_example(cli: Any) -> None:
    done = cli("show", "orchestrate")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("orchestrate — A planner splits work; named workers do the parts.\n")
    assert "builtin orchestrate revision 1 · contract piw.orchestrate.v1 · digest sha256:" in out
    lines = out.splitlines()
    # each field: name, type with its limits, required or default, then its description
    assert any(line.split() == ["maxTasks", "integer", "1–32;", "default", "8"] for line in lines)
    assert any("workers[].name" in line and "required" in line for line in lines)
    assert "Most tasks running at once." in out
    assert any(line.split()[:3] == ["fan_out", "action", "→"] for line in lines)
    assert "$result.outcome = failed → failed" in out
    assert any(line.split()[-2:] == ["exit", "completed"] for line in lines)
    assert f"piw run orchestrate --input @{BUILTINS / 'orchestrate.input.json'} --provider scripted" in out


def test_show_json_carries_the_input_json_schema(cli: Any) -> None:
    data = cli.json("show", "monitor")
    assert data["id"] == "monitor" and data["revision"] == 1 and data["contractId"] == "piw.monitor.v1"
    assert data["source"] == {"kind": "builtin", "id": "monitor", "revision": 1}
    schema = data["input"]["schema"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["everyMinutes"] == {
        "default": 30,
        "description": "Minutes between checks.",
        "maximum": 1440,
        "minimum": 1,
        "title": "Everyminutes",
        "type": "integer",
    }
    fields = {field["name"]: field for field in data["input"]["fields"]}
    assert fields["task"]["required"] is True and fields["maxChecks"]["default"] == 1000
    nodes = {node["id"]: node for node in data["graph"]["nodes"]}
    assert nodes["decide"]["switch"] == {"on": "$.route", "cases": {"continue": "schedule", "stop": "finish"}}
    assert nodes["finish"]["exit"] == "finished"
    assert data["example"]["repliesFile"] == str(BUILTINS / "monitor.replies.json")


@pytest.mark.parametrize("builtin_id", ["plain-summary", "autoplan", "orchestrate"])
def test_the_example_command_works_as_printed(cli: Any, builtin_id: str) -> None:
    command = cli.json("show", builtin_id)["example"]["command"]
    argv = shlex.split(command)
    assert argv[:3] == ["piw", "run", builtin_id]
    done = cli(*argv[1:], "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"


def test_show_a_file_without_an_example_builds_an_input_the_model_accepts(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "greet.workflow.py"
    path.write_text(
        "from pydantic import BaseModel, Field\n"
        "from piw import compute, define_workflow\n"
        "class In(BaseModel):\n"
        "    name: str = Field(min_length=2, description='Who to greet.')\n"
        "    times: int = Field(default=1, ge=1)\n"
        "workflow = define_workflow(name='greet', description='Say hello.', start_at='hi', input=In,\n"
        "    nodes={'hi': compute(lambda ctx: 'hi ' + ctx.input['name'])})\n",
        encoding="utf-8",
    )
    data = cli.json("show", str(path))
    assert data["source"]["kind"] == "file" and data["source"]["path"] == str(path.resolve())
    assert data["example"]["input"] == {"name": "example"}
    argv = shlex.split(data["example"]["command"])
    done = cli(*argv[1:], "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == "hi example"
    text = cli("show", str(path)).stdout
    assert "name   string ≥ 2 chars; required" in text and "Who to greet." in text


def test_show_an_unknown_workflow_is_one_error_line(cli: Any) -> None:
    done = cli("show", "no-such-flow")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: No workflow named 'no-such-flow'")
    assert len(done.stderr.strip().splitlines()) == 1


def test_every_builtin_has_an_offline_example(piw_home: Path) -> None:
    from piw.workflow.describe import describe
    from piw.workflow.loader import load_workflow

    for builtin_id in IDS:
        info = describe(builtin_id, load_workflow(builtin_id, piw_home))
        assert info.example_input_file == BUILTINS / f"{builtin_id}.input.json", builtin_id
        if not info.needs_model:  # plan-approval makes no model request: it runs offline as it is
            assert builtin_id == "plan-approval" and "--provider" not in info.command()
            continue
        assert info.replies_file == BUILTINS / f"{builtin_id}.replies.json", builtin_id
        assert info.command().endswith("--provider scripted")
