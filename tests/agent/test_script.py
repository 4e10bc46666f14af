"""The ``script`` node (issue 35, ``docs/dynamic-workflows.md``) on the loopback stub: leaves are keyed child steps,
committed to the trace and never asked twice."""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path

from piw.testing import OpenAIStub
from tests.support.agent_harness import (
    home,
    only_run,
    piw_cli,
    piw_process,
    start,
    write_stub_config,
    write_workflow,
)
from tests.support.scripts import LeafStub, three_phase_workflow

__all__ = ["home"]

N = 4


def expected_final(n: int = N) -> dict[str, object]:
    checks = [{"answer": f"<Verify <Write from <Outline part {i}.>.>.>"} for i in range(n)]
    synthesis = "Synthesise: " + "; ".join(c["answer"] for c in checks)
    return {"final": {"answer": f"<{synthesis}>"}, "checks": checks}


def test_a_three_phase_script_runs_every_leaf_once_and_keys_them_by_structure(
    home: Path, tmp_path: Path
) -> None:
    workflow = three_phase_workflow(tmp_path / "wf")
    leaves = LeafStub()
    with OpenAIStub() as stub:
        stub.respond = leaves
        run = start(home, workflow, stub.provider(), run_input={"n": N})
    assert run.state.status == "completed", run.state.error
    assert run.state.final_output == expected_final()
    assert sum(leaves.asked.values()) == 3 * N + 1
    assert set(leaves.asked.values()) == {1}
    keys = sorted(e["payload"]["key"] for e in run.of_type("child_step_finished", "orchestrate"))
    assert keys == sorted(
        [f"draft/outline-write.{i}/1-outline/outline" for i in range(N)]
        + [f"draft/outline-write.{i}/2-write/write" for i in range(N)]
        + [f"verify/verify.{i}/verify" for i in range(N)]
        + ["synthesis/main"]
    )
    phases = {
        u["payload"]["key"]: u["payload"]["data"]
        for u in run.of_type("update_published", "orchestrate")
        if u["payload"]["type"] == "script.phase"
    }
    assert phases["draft"]["done"] == phases["draft"]["total"] == 2 * N
    synthesis = dict(phases["synthesis"])
    assert synthesis.pop("startedAt")
    assert synthesis == {
        "phase": "synthesis",
        "order": 3,
        "status": "completed",
        "done": 1,
        "total": 1,
        "running": 0,
    }
    frames = [
        u["payload"]["data"]
        for u in run.of_type("update_published", "orchestrate")
        if u["payload"]["type"] == "script.phase" and u["payload"]["key"] == "draft"
    ]
    assert frames[0]["total"] in (0, 2 * N) and all(f["total"] == 2 * N for f in frames[1:])
    logs = [
        u["payload"]["data"]["text"]
        for u in run.of_type("update_published", "orchestrate")
        if u["payload"]["type"] == "script.log"
    ]
    assert logs == [f"verified {N} drafts"]


def test_max_agents_stops_a_runaway_fan_out_before_its_first_request(home: Path, tmp_path: Path) -> None:
    workflow = three_phase_workflow(tmp_path / "wf", max_agents=5)
    leaves = LeafStub()
    with OpenAIStub() as stub:
        stub.respond = leaves
        write_stub_config(home, stub)
        result = piw_cli(home, "run", str(workflow), "--input", json.dumps({"n": N}), "--json")
    assert result.returncode != 0
    assert stub.request_count == 0
    error = json.loads(result.stdout)["error"]
    assert "max_agents=5" in error and "8 new leaves" in error
    assert only_run(home).of_type("child_step_finished") == []


def test_after_an_edit_resume_refuses_and_fork_adopts_every_finished_leaf(home: Path, tmp_path: Path) -> None:
    workflow = three_phase_workflow(tmp_path / "wf")
    leaves = LeafStub()
    with OpenAIStub() as stub:
        stub.respond = leaves
        write_stub_config(home, stub)
        crashed = piw_process(
            home,
            "run",
            str(workflow),
            "--input",
            json.dumps({"n": N}),
            env={"PIW_TEST_KILL_AFTER_APPEND": "14"},
        )
        assert crashed.returncode == -signal.SIGKILL
        parent = only_run(home)
        committed = {e["payload"]["key"] for e in parent.of_type("child_step_finished", "orchestrate")}
        assert 0 < len(committed) < 3 * N + 1
        asked_before = dict(leaves.asked)
        workflow.write_text(workflow.read_text().replace('"Synthesise: "', '"Summarise: "'), encoding="utf-8")
        refused = piw_cli(home, "resume", parent.run_id)
        assert refused.returncode != 0
        assert "changed" in (refused.stdout + refused.stderr).lower()
        last = parent.events[-1]["seq"]
        forked = piw_cli(
            home, "fork", parent.run_id, "--at", str(last), "--workflow", str(workflow), "--json"
        )
        assert forked.returncode == 0, forked.stdout + forked.stderr
    final = json.loads(forked.stdout)["finalOutput"]
    assert final["final"]["answer"].startswith("<Summarise: ")
    assert final["checks"] == expected_final()["checks"]
    adopted_prompts = {
        e["payload"]["output"]["answer"][1:-1] for e in parent.of_type("child_step_finished", "orchestrate")
    }
    for prompt in adopted_prompts:
        assert leaves.asked[prompt] == asked_before[prompt], f"{prompt!r} was asked again"
    assert sum(leaves.asked.values()) - sum(asked_before.values()) <= 3 * N + 1 - len(committed)


STABLE = """
    from pydantic import BaseModel
    from piw import define_workflow, script

    class Draft(BaseModel):
        text: str
        score: int

    def main(flow):
        def draft(topic):
            return flow.agent(f"Draft {topic}.", expected_output=Draft)

        with flow.phase("draft"):
            drafts = flow.parallel(ITEMS, draft)
        with flow.phase("synthesis"):
            return flow.agent("Join: " + " ".join(d["text"] for d in drafts), KEY)

    workflow = define_workflow(name="check", start_at="s", nodes={"s": script(main)})
"""


def validate(home: Path, tmp_path: Path, items: str, key: str) -> tuple[int, str]:
    body = STABLE.replace("ITEMS", items).replace("KEY", key)
    if "time." in key:
        body = "import time\n" + textwrap.dedent(body)
    workflow = write_workflow(tmp_path / "wf", "check", body)
    result = piw_cli(home, "validate", str(workflow))
    return result.returncode, result.stdout + result.stderr


def test_validate_runs_a_script_twice_without_a_model_and_counts_leaves_per_phase(
    home: Path, tmp_path: Path
) -> None:
    code, out = validate(home, tmp_path, "['a', 'b', 'c']", "key='join'")
    assert code == 0, out
    assert "Script s: keys stable over two dry runs; leaves per phase: draft 3, synthesis 1" in out


def test_validate_fails_a_script_whose_key_uses_the_time_naming_the_call_site(
    home: Path, tmp_path: Path
) -> None:
    code, out = validate(home, tmp_path, "['a', 'b']", "key=f'join-{time.time()}'")
    assert code != 0
    assert "check.workflow.py:" in out and "depends on time, randomness or set order" in out


def test_validate_fails_a_script_that_fans_out_over_a_set(home: Path, tmp_path: Path) -> None:
    code, out = validate(
        home, tmp_path, "list({'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta'})", "key='j'"
    )
    assert code != 0
    assert "asks a different prompt in each run" in out and "check.workflow.py:" in out
