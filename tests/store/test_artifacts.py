"""Artifacts: large strings leave the trace, deduplicated and escaped, and are never read outside a bundle."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from piw.errors import StoreError
from piw.store.artifacts import (
    ARTIFACT_THRESHOLD_BYTES,
    ArtifactStore,
    externalize,
    resolve,
    safe_bundle_path,
)
from piw.store.trace import FileLayer
from tests.support.cli import Cli
from tests.support.runs import RunWorkflow, WorkflowMaker


def roundtrip(store: ArtifactStore, value: Any) -> tuple[Any, Any]:
    encoded = externalize(value, store.write)
    wire = json.loads(json.dumps(encoded))
    return encoded, resolve(wire, store.read)


def test_threshold_counts_utf8_bytes(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    at_limit = "é" * (ARTIFACT_THRESHOLD_BYTES // 2)  # 2048 characters, 4096 bytes
    over = at_limit + "x"  # 2049 characters, 4097 bytes
    assert len(at_limit.encode()) == 4096 and len(over.encode()) == 4097
    assert externalize(at_limit, store.write) == at_limit
    ref = externalize(over, store.write)
    body = ref["$artifact"]
    assert set(ref) == {"$artifact"} and body["bytes"] == 4097 and body["mediaType"] == "text/plain"
    assert body["path"] == f"artifacts/sha256-{body['sha256']}.txt"
    assert (tmp_path / body["path"]).read_bytes() == over.encode()
    assert resolve(ref, store.read) == over
    mixed = "✓" * 1365 + "a"  # 3-byte characters: 4096 bytes in 1366 characters stay inline
    assert len(mixed.encode()) == 4096 and externalize(mixed, store.write) == mixed
    assert externalize(mixed + "b", store.write)["$artifact"]["bytes"] == 4097


def test_deduplication_and_nesting(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    big = "z" * 5000
    value = {"a": big, "list": [big, {"deep": big}], "small": "s", "n": 1, "none": None}
    encoded, decoded = roundtrip(store, value)
    assert decoded == value
    assert len(list((tmp_path / "artifacts").iterdir())) == 1
    assert encoded["a"] == encoded["list"][0] == encoded["list"][1]["deep"]
    assert encoded["small"] == "s"


@pytest.mark.parametrize(
    "value",
    [
        {"$artifact": {"path": "../../etc/passwd"}},
        {"$escaped": {"x": 1}},
        {"$escaped": 5},
        {"$artifact": "x", "other": 1},
        {"$escaped": {"$artifact": {"path": "artifacts/x"}}},
        {"$escaped": {"$escaped": {"$escaped": "deep"}}},
        [{"$artifact": 1}, {"keep": {"$escaped": None}}],
        {"x": {"$artifact": {"sneaky": "y" * 5000}}},
    ],
)
def test_user_objects_with_sentinel_keys_round_trip(tmp_path: Path, value: Any) -> None:
    _, decoded = roundtrip(ArtifactStore(tmp_path), value)
    assert decoded == value  # user data comes back as written: never mistaken for a ref


def test_escaping_paths_are_rejected(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "artifacts").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", bundle / "artifacts" / "link.txt")
    store = ArtifactStore(bundle)
    for path in ("../secret.txt", "/etc/passwd", "artifacts/../../secret.txt", "artifacts/link.txt", ".", ""):
        with pytest.raises(StoreError, match="outside the run bundle"):
            store.read({"path": path})
    with pytest.raises(StoreError):
        resolve({"$artifact": {"path": "../secret.txt"}}, store.read)
    assert safe_bundle_path(bundle, "artifacts/x.txt") == (bundle / "artifacts" / "x.txt").resolve()


class Recorder(FileLayer):
    """Records every write and fsync with the path behind the file descriptor."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str, bytes]] = []

    def fsync(self, fd: int) -> None:
        self.ops.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), b""))

    def write_all(self, fd: int, data: bytes) -> None:
        self.ops.append(("write", os.readlink(f"/proc/self/fd/{fd}"), data))
        super().write_all(fd, data)


def test_a_run_writes_the_artifact_durably_before_the_line_naming_it(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    path = make_workflow(
        "big",
        """
        from piw import action, compute, define_workflow, edge
        workflow = define_workflow(name="big", start_at="make", nodes={
            "make": action(lambda c: {"text": "ü" * 4000}),
            "size": compute(lambda c: {"chars": len(c.outputs["make"]["text"])}),
        }, edges=[edge("make", "size")])
        """,
    )
    files = Recorder()
    state = run_workflow(path, {"blob": "i" * 4097}, files=files)
    assert state.final_output == {"chars": 4000}  # ctx.outputs resolves artifacts for the next node
    bundle = piw_home / "runs" / state.run_id
    trace = (bundle / "trace.ndjson").read_text(encoding="utf-8")
    assert "üüü" not in trace and "iiii" not in trace
    assert state.input["blob"]["$artifact"]["bytes"] == 4097
    artifact_dir = str(bundle / "artifacts")
    names = sorted(p.name for p in (bundle / "artifacts").iterdir())
    assert len(names) == 2
    for name in names:
        named_at = next(
            i
            for i, (op, where, data) in enumerate(files.ops)
            if op == "write" and where.endswith("trace.ndjson") and name.encode() in data
        )
        before = files.ops[:named_at]
        dir_synced = max(
            i for i, (op, where, _) in enumerate(before) if op == "fsync" and where == artifact_dir
        )
        assert any(
            op == "fsync" and where.startswith(artifact_dir + "/.tmp-")
            for op, where, _ in before[:dir_synced]
        )


def test_the_steps_view_shows_an_artifact_as_its_size_never_its_text(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    """A table cell names an output's large string by its size: the text stays in its artifact (``--json`` has it).

    A user value that merely holds a dollar is printed as it is."""
    path = make_workflow(
        "big",
        """
        from piw import compute, define_workflow, edge
        workflow = define_workflow(name="big", start_at="make", nodes={
            "make": compute(lambda c: {"text": "ü" * 4000, "n": 1}),
            "cost": compute(lambda c: {"price": "$5"}),
        }, edges=[edge("make", "cost")])
        """,
    )
    done = cli("run", str(path), "--json")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["runId"]
    steps = cli("inspect", run_id, "--view", "steps")
    assert steps.returncode == 0, steps.stderr
    assert '{"text":"‹artifact 8000 bytes›","n":1}' in steps.stdout
    assert "üü" not in steps.stdout
    assert '{"price":"$5"}' in steps.stdout
