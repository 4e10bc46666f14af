"""Resume after a crash: torn tails, corruption, changed sources, abandoned attempts and the step limit."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from piw.store.bundle import Bundle, WriterLock
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

LINEAR = """
from piw import action, checkpoint, compute, define_workflow, edge, notify

def effect(ctx):
    with open(ctx.input["log"], "a") as handle:
        handle.write(ctx.node_id + " " + ctx.attempt_id + "\\n")
    return {"did": ctx.node_id}

workflow = define_workflow(
    name="linear", start_at="a", max_steps=MAX_STEPS,
    nodes={"a": compute(lambda c: {"a": 1}), "b": action(effect),
           "c": compute(lambda c: {"c": c.outputs["b"]}),
           "d": action(effect)},
    edges=[edge("a", "b"), edge("b", "c"), edge("c", "d")],
)
"""
# trace of an uninterrupted run: 1 run_started, 2/3 a, 4/5 b, 6/7 c, 8/9 d, 10 run_completed


@pytest.fixture
def linear(make_workflow: WorkflowMaker, tmp_path: Path) -> tuple[Path, str]:
    path = make_workflow("linear", LINEAR.replace("MAX_STEPS", "100"))
    return path, json.dumps({"log": str(tmp_path / "effects.log")})


def crash(cli: Cli, path: Path, raw: str, after: int) -> str:
    """Start a run that SIGKILLs itself right after trace line ``after`` is written; return its run id."""
    done = cli.process("run", str(path), "--input", raw, env={"PIW_TEST_KILL_AFTER_APPEND": str(after)})
    assert done.returncode == -9, done.stderr
    runs = sorted((cli.home / "runs").iterdir())
    return runs[-1].name


def resume_json(cli: Cli, run_id: str) -> tuple[int, Any, str]:
    done = cli("resume", run_id, "--json")
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr


def snapshot_bundle(home: Path, run_id: str) -> dict[str, bytes]:
    root = home / "runs" / run_id
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_interrupted_node_reruns_with_a_fresh_attempt(
    cli: Cli, linear: tuple[Path, str], tmp_path: Path
) -> None:
    path, raw = linear
    run_id = crash(cli, path, raw, after=8)  # node_started(d): d had not run yet
    events = trace_lines(cli.home, run_id)
    abandoned = events[-1]["attemptId"]
    code, payload, stderr = resume_json(cli, run_id)
    assert code == 0, stderr
    assert payload["status"] == "completed" and payload["finalOutput"] == {"did": "d"}
    after = trace_lines(cli.home, run_id)
    resumed = after[8]
    assert resumed["type"] == "run_resumed"
    assert resumed["payload"] == {"replayedSteps": 3, "resumeAt": "d", "abandonedAttemptId": abandoned}
    assert (
        after[9]["type"] == "node_started"
        and after[9]["nodeId"] == "d"
        and after[9]["attemptId"] != abandoned
    )
    log = (tmp_path / "effects.log").read_text().splitlines()
    assert [line.split()[0] for line in log] == ["b", "d"]  # b never ran again
    assert [e["seq"] for e in after] == list(range(1, len(after) + 1))
    state = json.loads((cli.home / "runs" / run_id / "state.json").read_text())
    assert state["steps"][-1]["attemptId"] == after[9]["attemptId"] and state["status"] == "completed"


@pytest.mark.parametrize(
    ("after", "expected_tail"),
    [
        (9, ["node_finished", "run_completed"]),  # the last node finished: only the terminal event is written
        (3, ["node_finished", "run_resumed", "node_started"]),  # between nodes: resume at the next one
    ],
)
def test_resume_after_a_finished_attempt(
    cli: Cli, linear: tuple[Path, str], after: int, expected_tail: list[str]
) -> None:
    path, raw = linear
    run_id = crash(cli, path, raw, after=after)
    code, payload, stderr = resume_json(cli, run_id)
    assert code == 0 and payload["status"] == "completed", stderr
    types = [e["type"] for e in trace_lines(cli.home, run_id)]
    assert types[after - 1 : after - 1 + len(expected_tail)] == expected_tail
    assert types.count("run_resumed") == (0 if after == 9 else 1)
    if after == 3:
        resumed = trace_lines(cli.home, run_id)[3]["payload"]
        assert resumed == {"replayedSteps": 1, "resumeAt": "b"}


def test_crash_after_a_checkpoint_writes_only_run_waiting(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "cp",
        """
        from piw import checkpoint, compute, define_workflow, edge
        workflow = define_workflow(name="cp", start_at="a",
                                   nodes={"a": compute(1), "ask": checkpoint({"q": 1}),
                                   "never": compute(2)}, edges=[edge("a", "ask"), edge("ask", "never")])
        """,
    )
    run_id = crash(cli, path, "{}", after=5)  # node_finished(ask)
    code, payload, _ = resume_json(cli, run_id)
    assert code == 0 and payload["status"] == "waiting" and payload["finalOutput"] == {"q": 1}
    types = [e["type"] for e in trace_lines(cli.home, run_id)]
    assert types[-2:] == ["node_finished", "run_waiting"] and "run_resumed" not in types
    done = cli("resume", run_id)
    assert done.returncode == 2 and done.stderr.startswith(f"Error: Run {run_id} already ended (waiting)")


def test_crash_after_an_unrouted_failure_writes_only_run_failed(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow(
        "f",
        """
        from piw import compute, define_workflow, edge
        workflow = define_workflow(name="f", start_at="a",
                                   nodes={"a": compute(lambda c: 1 / 0), "b": compute(2)},
                                   edges=[edge("a", "b")])
        """,
    )
    run_id = crash(cli, path, "{}", after=3)
    code, payload, _ = resume_json(cli, run_id)
    assert (
        code == 1
        and payload["status"] == "failed"
        and payload["error"] == "ZeroDivisionError: division by zero"
    )
    assert [e["type"] for e in trace_lines(cli.home, run_id)][-2:] == ["node_failed", "run_failed"]


def test_replayed_steps_count_toward_max_steps(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    path = make_workflow("limited", LINEAR.replace("MAX_STEPS", "3"))
    raw = json.dumps({"log": str(tmp_path / "effects.log")})
    run_id = crash(cli, path, raw, after=6)  # a, b done; c started
    code, payload, _ = resume_json(cli, run_id)
    assert code == 1 and payload["status"] == "failed"
    assert payload["error"].startswith("Run stopped before d: it reached max_steps (3).")
    events = trace_lines(cli.home, run_id)
    assert [e["type"] for e in events if e["type"] in ("node_finished", "node_failed")] == [
        "node_finished"
    ] * 3


def test_torn_tail_is_ignored_by_readers_and_repaired_by_resume(cli: Cli, linear: tuple[Path, str]) -> None:
    path, raw = linear
    run_id = crash(cli, path, raw, after=5)
    trace = cli.home / "runs" / run_id / "trace.ndjson"
    torn = b'{"seq":6,"at":"2026-01-01T00:00:00.000Z","scope":"node","ty'
    with trace.open("ab") as handle:
        handle.write(torn)
    (row,) = cli.json("runs")
    assert row["status"] == "running" and row["currentNode"] is None
    inspect = cli("inspect", run_id, "--json")
    assert inspect.returncode == 0 and json.loads(inspect.stdout)["traceSeq"] == 5
    code, payload, stderr = resume_json(cli, run_id)
    assert code == 0 and payload["status"] == "completed", stderr
    events = trace_lines(cli.home, run_id)  # parses: the torn bytes are gone
    resumed = events[5]
    assert resumed["type"] == "run_resumed" and resumed["payload"]["truncatedBytes"] == len(torn)
    assert resumed["payload"]["resumeAt"] == "c"


def test_torn_terminated_line_is_repaired_too(cli: Cli, linear: tuple[Path, str]) -> None:
    path, raw = linear
    run_id = crash(cli, path, raw, after=4)
    trace = cli.home / "runs" / run_id / "trace.ndjson"
    with trace.open("ab") as handle:
        handle.write(b"\x00\x00\x00\x00\n")
    code, payload, _ = resume_json(cli, run_id)
    assert code == 0 and payload["status"] == "completed"
    assert trace_lines(cli.home, run_id)[4]["payload"]["truncatedBytes"] == 5


def test_a_damaged_middle_line_refuses_resume_and_touches_nothing(cli: Cli, linear: tuple[Path, str]) -> None:
    path, raw = linear
    run_id = crash(cli, path, raw, after=6)
    trace = cli.home / "runs" / run_id / "trace.ndjson"
    lines = trace.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"scope":"node"', b'"scope":"n0de"')
    trace.write_bytes(b"".join(lines))
    before = snapshot_bundle(cli.home, run_id)
    done = cli("resume", run_id)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("Error: ") and "line 3 is damaged" in done.stderr
    assert snapshot_bundle(cli.home, run_id) == before
    assert "Traceback" not in cli("inspect", run_id).stderr  # readers report it; they never crash
    assert snapshot_bundle(cli.home, run_id) == before


def test_changed_source_is_refused_with_guidance_and_nothing_written(
    cli: Cli, linear: tuple[Path, str]
) -> None:
    path, raw = linear
    run_id = crash(cli, path, raw, after=6)
    before = snapshot_bundle(cli.home, run_id)
    path.write_text(path.read_text() + "\n# a harmless edit still changes the source\n", encoding="utf-8")
    done = cli("resume", run_id)
    assert done.returncode == 2
    assert done.stderr == (
        f"Error: Workflow source changed since run {run_id} started ({path}). "
        "Completed steps cannot be replayed against a different definition. To keep them, fork the run onto the "
        f"changed workflow: 'piw fork {run_id} --from c --workflow {path}'. Or cancel it with "
        f"'piw cancel {run_id}' and start again with 'piw run {path}'.\n"
    )
    assert snapshot_bundle(cli.home, run_id) == before


def test_changed_included_child_is_refused(cli: Cli, make_workflow: WorkflowMaker) -> None:
    child = make_workflow(
        "kid",
        "from piw import compute, define_workflow\n"
        'workflow = define_workflow(name="kid", start_at="k", nodes={"k": compute(1)})\n',
    )
    parent = make_workflow(
        "mom",
        f"""
        import importlib.util
        from piw import compute, define_workflow, edge, include
        spec = importlib.util.spec_from_file_location("kid_module", {str(child)!r})
        kid = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(kid)
        workflow = define_workflow(name="mom", start_at="a", nodes={{"a": compute(1), "z": compute(2)}},
                                   includes={{"m": include(kid.workflow)}},
                                   edges=[edge("a", "m"), edge("m", "z")])
        """,
    )
    run_id = crash(cli, parent, "{}", after=2)
    before = snapshot_bundle(cli.home, run_id)
    child.write_text(child.read_text() + "# edited\n", encoding="utf-8")
    done = cli("resume", run_id)
    assert done.returncode == 2 and "Workflow source changed since run" in done.stderr
    assert snapshot_bundle(cli.home, run_id) == before


def test_resume_refuses_a_run_another_process_is_writing(cli: Cli, linear: tuple[Path, str]) -> None:
    path, raw = linear
    run_id = crash(cli, path, raw, after=4)
    bundle_path = cli.home / "runs" / run_id
    lock = WriterLock(Bundle(run_id, bundle_path)).acquire()
    try:
        done = cli("resume", run_id)
    finally:
        lock.release()
    assert done.returncode == 2 and "being written by another piw process" in done.stderr


def test_session_torn_tail_is_repaired_before_new_entries(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    path = make_workflow(
        "talk",
        """
        from piw import compute, define_workflow, edge, notify
        workflow = define_workflow(name="talk", start_at="one",
                                   nodes={"one": notify("first"), "mid": compute(1),
                                   "two": notify("second")}, edges=[edge("one", "mid"), edge("mid", "two")])
        """,
    )
    run_id = crash(cli, path, "{}", after=6)  # node_started(mid)
    session = piw_home / "runs" / run_id / "session" / "entries.ndjson"
    with session.open("ab") as handle:
        handle.write(b'{"seq":2,"at":"x","entry":{"ty')
    code, payload, stderr = resume_json(cli, run_id)
    assert code == 0 and payload["status"] == "completed", stderr
    entries = [json.loads(line)["entry"]["message"]["content"] for line in session.read_text().splitlines()]
    assert entries == ["first", "second"]
    digest = hashlib.sha256(b"second").hexdigest()
    queued = [e for e in trace_lines(piw_home, run_id) if e["type"] == "notification_queued"]
    assert queued[-1]["payload"]["contentSha256"] == f"sha256:{digest}"


def test_resume_after_an_include_exit_routes_on_the_committed_output(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow(
        "exits",
        """
        from piw import compute, define_workflow, include, switch
        child = define_workflow(name="child", start_at="c", nodes={"c": compute(
            lambda c: {"route": "go", "$artifact": {"path": "../x"}, "big": "z" * 5000})})
        workflow = define_workflow(name="exits", start_at="m",
                                   nodes={"go": compute(lambda c: c.outputs["m"]["$artifact"])},
                                   includes={"m": include(child)},
                                   edges=[switch("m", on="$.route", cases={"go": "go"})])
        """,
    )
    run_id = crash(cli, path, "{}", after=5)  # include_exited(m)
    assert trace_lines(cli.home, run_id)[-1]["type"] == "include_exited"
    code, payload, stderr = resume_json(cli, run_id)
    assert code == 0, stderr
    assert payload["finalOutput"] == {"path": "../x"}
