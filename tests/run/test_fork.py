"""``piw fork``: adopt the steps a run finished before a fork point, continue live, or answer from the recording.

Every test drives the real ``piw`` command against the loopback model stub and asserts on the requests the stub
received, the traces on disk and the parent bundle, which must never change.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from piw.testing import OpenAIStub, openai_stub
from tests.support.agent_harness import submit_reply, write_stub_config

__all__ = ["openai_stub"]

FIVE = """
from piw import action, agent, compute, define_workflow, edge

def publish(ctx):
    ctx.publish_update("note", "first", {"seen": ctx.outputs["s1"]["word"]})
    return {"published": True}

workflow = define_workflow(
    name="five",
    start_at="s1",
    nodes={
        "s1": agent(prompt="Step one: {PROMPT1}", expected_output="a JSON object with a word"),
        "mark": action(run=publish),
        "s2": agent(prompt="Step two: give a word", expected_output="a JSON object with a word"),
        "s3": agent(prompt="Step three: {PROMPT3}", expected_output="a JSON object with a word"),
        "s4": agent(prompt="Step four: give a word", expected_output="a JSON object with a word"),
        "s5": agent(prompt="Step five: give a word", expected_output="a JSON object with a word"),
        "done": compute(run=lambda ctx: [ctx.outputs[k]["word"] for k in ("s1", "s2", "s3", "s4", "s5")]),
    },
    edges=[edge("s1", "mark"), edge("mark", "s2"), edge("s2", "s3"), edge("s3", "s4"), edge("s4", "s5"),
           edge("s5", "done")],
)
"""


def write_five(path: Path, prompt1: str = "give a word", prompt3: str = "give a word") -> Path:
    path.write_text(FIVE.replace("{PROMPT1}", prompt1).replace("{PROMPT3}", prompt3), encoding="utf-8")
    return path


def words(stub: OpenAIStub) -> None:
    """Each request is answered with a submit of the next word, so outputs show which request served which step."""
    counter = iter(range(1, 1000))

    def respond(body: dict[str, Any]) -> Any:
        return submit_reply({"word": f"w{next(counter)}"})(body)

    stub.respond = respond


def trace(home: Path, run_id: str) -> list[dict[str, Any]]:
    text = (home / "runs" / run_id / "trace.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def bundle_digest(home: Path, run_id: str) -> dict[str, str]:
    folder = home / "runs" / run_id
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def step_prompts(stub: OpenAIStub) -> list[str]:
    """The step line of the newest step message in each request (``Step three: …``)."""
    found = []
    for body in stub.requests:
        texts = [m.get("content") or "" for m in body["messages"] if m["role"] == "user"]
        found.append(next(t for t in reversed(texts) if t.startswith("Step ")).splitlines()[0])
    return found


@pytest.fixture
def parent(cli: Any, piw_home: Path, openai_stub: OpenAIStub, tmp_path: Path) -> dict[str, Any]:
    write_stub_config(piw_home, openai_stub)
    words(openai_stub)
    flow = write_five(tmp_path / "five.workflow.py")
    done = cli("run", str(flow), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["finalOutput"] == ["w1", "w2", "w3", "w4", "w5"]
    assert openai_stub.request_count == 5
    run_id = result["runId"]
    return {"run_id": run_id, "flow": flow, "digest": bundle_digest(piw_home, run_id)}


def seq_of(lines: list[dict[str, Any]], kind: str, node: str) -> int:
    return next(line["seq"] for line in lines if line["type"] == kind and line.get("nodeId") == node)


def test_forking_after_step_three_makes_two_requests_and_adopts_the_rest(
    cli: Any, piw_home: Path, openai_stub: OpenAIStub, parent: dict[str, Any]
) -> None:
    at = seq_of(trace(piw_home, parent["run_id"]), "node_finished", "s3")
    done = cli("fork", parent["run_id"], "--at", str(at), "--json")
    assert done.returncode == 0, done.stderr
    forked = json.loads(done.stdout)
    assert openai_stub.request_count == 5 + 2
    assert forked["finalOutput"] == ["w1", "w2", "w3", "w6", "w7"]
    lines = trace(piw_home, forked["runId"])
    assert lines[0]["type"] == "run_started"
    assert lines[0]["payload"]["forkedFrom"] == {"runId": parent["run_id"], "seq": at}
    # Adopted steps keep their recorded attempt ids and outputs; the update published before the fork is there.
    parent_lines = trace(piw_home, parent["run_id"])
    adopted = [line["attemptId"] for line in lines if line["type"] == "node_finished"][:4]
    assert adopted == [line["attemptId"] for line in parent_lines if line["type"] == "node_finished"][:4]
    assert any(line["type"] == "update_published" and line["payload"]["key"] == "first" for line in lines)
    state = cli.json("inspect", forked["runId"])
    assert [step["nodeId"] for step in state["steps"]] == ["s1", "mark", "s2", "s3", "s4", "s5", "done"]
    assert state["forkedFrom"] == {"runId": parent["run_id"], "seq": at}
    assert [u["key"] for u in state["updates"]] == ["first"]
    # The conversation the next step saw holds the adopted steps' prompts and replies.
    first_live = openai_stub.requests[5]
    assert sum("Step three" in (m.get("content") or "") for m in first_live["messages"]) == 1
    assert bundle_digest(piw_home, parent["run_id"]) == parent["digest"]


def test_fork_from_an_edited_step_sends_the_new_prompt_and_reuses_the_steps_before_it(
    cli: Any, piw_home: Path, openai_stub: OpenAIStub, parent: dict[str, Any], tmp_path: Path
) -> None:
    edited = write_five(tmp_path / "edited.workflow.py", prompt3="give a LONGER word")
    done = cli("fork", parent["run_id"], "--from", "s3", "--workflow", str(edited), "--json")
    assert done.returncode == 0, done.stderr
    assert openai_stub.request_count == 5 + 3
    assert step_prompts(openai_stub)[5:] == [
        "Step three: give a LONGER word",
        "Step four: give a word",
        "Step five: give a word",
    ]
    forked = json.loads(done.stdout)
    assert forked["finalOutput"] == ["w1", "w2", "w6", "w7", "w8"]
    assert bundle_digest(piw_home, parent["run_id"]) == parent["digest"]


def test_replay_makes_no_request_when_nothing_changed(
    cli: Any, piw_home: Path, openai_stub: OpenAIStub, parent: dict[str, Any]
) -> None:
    at = seq_of(trace(piw_home, parent["run_id"]), "node_finished", "s1")
    done = cli("fork", parent["run_id"], "--at", str(at), "--provider", "replay", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == ["w1", "w2", "w3", "w4", "w5"]
    assert openai_stub.request_count == 5


def test_replay_fails_at_the_first_changed_prompt(
    cli: Any, piw_home: Path, openai_stub: OpenAIStub, parent: dict[str, Any], tmp_path: Path
) -> None:
    edited = write_five(tmp_path / "edited.workflow.py", prompt3="give a LONGER word")
    done = cli("fork", parent["run_id"], "--from", "s2", "--workflow", str(edited), "--provider", "replay",
               "--json")  # fmt: skip
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["status"] == "failed"
    assert "Replay stopped at step s3" in result["error"]
    assert "give a LONGER word" in result["error"]
    assert openai_stub.request_count == 5
    state = cli.json("inspect", result["runId"])
    assert [(s["nodeId"], s["outcome"]) for s in state["steps"]][-2:] == [("s2", "ok"), ("s3", "failed")]


def test_lineage_is_shown_both_ways(cli: Any, piw_home: Path, parent: dict[str, Any]) -> None:
    done = cli("fork", parent["run_id"], "--from", "s5", "--provider", "replay", "--json")
    forked = json.loads(done.stdout)["runId"]
    child_view = cli("inspect", forked)
    assert f"forked from {parent['run_id']}" in child_view.stdout
    parent_view = cli("inspect", parent["run_id"])
    assert f"forks: {forked}" in parent_view.stdout
    assert cli.json("inspect", parent["run_id"]).get("forkedFrom") is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--from", "nope"], "Node 'nope' never started"),
        (["--at", "9999"], "has no trace line 9999"),
        (["--at", "0"], "1 or more"),
        ([], "exactly one fork point"),
        (["--from", "s2", "--at", "3"], "exactly one fork point"),
    ],
)
def test_a_fork_point_that_does_not_exist_is_one_clear_line(
    cli: Any, piw_home: Path, parent: dict[str, Any], args: list[str], needle: str
) -> None:
    before = sorted(p.name for p in (piw_home / "runs").iterdir())
    done = cli("fork", parent["run_id"], *args)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and needle in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in (piw_home / "runs").iterdir()) == before


def test_a_workflow_that_cannot_reach_the_fork_point_names_the_node(
    cli: Any, piw_home: Path, parent: dict[str, Any], tmp_path: Path
) -> None:
    changed = tmp_path / "changed.workflow.py"
    reordered = 'edge("mark", "s3"), edge("s3", "s2"), edge("s2", "s4")'
    changed.write_text(FIVE.replace('edge("mark", "s2"), edge("s2", "s3"), edge("s3", "s4")', reordered)
                       .replace("{PROMPT1}", "give a word").replace("{PROMPT3}", "give a word"))  # fmt: skip
    before = sorted(p.name for p in (piw_home / "runs").iterdir())
    done = cli("fork", parent["run_id"], "--from", "s4", "--workflow", str(changed))
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "ran 's2' where its routing goes to 's3'" in done.stderr
        and "cannot reach the fork point" in done.stderr
    )
    removed = tmp_path / "removed.workflow.py"
    removed.write_text(FIVE.replace('"mark": action(run=publish),', "")
                       .replace('edge("s1", "mark"), edge("mark", "s2")', 'edge("s1", "s2")')
                       .replace("{PROMPT1}", "give a word").replace("{PROMPT3}", "give a word"))  # fmt: skip
    done = cli("fork", parent["run_id"], "--from", "s3", "--workflow", str(removed))
    assert done.returncode == 2
    assert "has no node 'mark'" in done.stderr
    assert sorted(p.name for p in (piw_home / "runs").iterdir()) == before


def test_a_fork_of_a_bundle_damaged_past_the_fork_point_works_from_the_intact_prefix(
    cli: Any, piw_home: Path, openai_stub: OpenAIStub, parent: dict[str, Any]
) -> None:
    path = piw_home / "runs" / parent["run_id"] / "trace.ndjson"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    damaged_at = seq_of(trace(piw_home, parent["run_id"]), "node_started", "s5")
    lines[damaged_at - 1] = "{ this line is damaged\n"
    path.write_text("".join(lines), encoding="utf-8")
    at = seq_of([json.loads(line) for line in lines[: damaged_at - 1]], "node_finished", "s3")
    done = cli("fork", parent["run_id"], "--at", str(at), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == ["w1", "w2", "w3", "w6", "w7"]
    past = cli("fork", parent["run_id"], "--at", str(damaged_at + 1))
    assert past.returncode == 2 and f"damaged at line {damaged_at}" in past.stderr


def test_replay_outside_a_fork_is_refused(cli: Any, tmp_path: Path) -> None:
    flow = write_five(tmp_path / "five.workflow.py")
    done = cli("run", str(flow), "--provider", "replay")
    assert done.returncode == 2
    assert "piw fork RUN --at SEQ --provider replay" in done.stderr
