"""The tool registry and the shipped tools (agent-steps.md §4 and §11)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piw import tools
from piw.errors import DefinitionError
from piw.tools import Tool, ToolContext, ToolResult
from piw.tools.bash import BASH_MAX_OUTPUT_BYTES
from piw.tools.files import LS_MAX_ENTRIES, READ_MAX_CHARS
from piw.tools.search import FIND_MAX_RESULTS, GREP_MAX_LINE_CHARS, GREP_MAX_MATCHES


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A working directory with a sibling folder holding a secret, the target of every escape attempt."""
    root = tmp_path / "work"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret\n")
    return root


def context(cwd: Path, timeout_s: float | None = 10.0, cancel: threading.Event | None = None) -> ToolContext:
    return ToolContext(cwd=cwd, timeout_s=timeout_s, cancel=cancel or threading.Event())


def call(name: str, args: dict[str, Any], cwd: Path, **kwargs: Any) -> ToolResult:
    result = tools.get(name).execute("call-1", args, context(cwd, **kwargs))
    assert isinstance(result, ToolResult)
    assert result.terminate is False  # no shipped tool can complete a step
    return result


def ok(name: str, args: dict[str, Any], cwd: Path, **kwargs: Any) -> str:
    result = call(name, args, cwd, **kwargs)
    assert not result.is_error, result.content
    return result.content


def refused(name: str, args: dict[str, Any], cwd: Path) -> str:
    result = call(name, args, cwd)
    assert result.is_error, result.content
    return result.content


# --- registry ---------------------------------------------------------------------------------------------


@pytest.fixture
def scratch_tool() -> Iterator[Tool]:
    tool = Tool("echo", "Echo the args.", {"type": "object"}, lambda _id, args, _ctx: ToolResult(str(args)))
    yield tool
    tools.unregister("echo")


def test_shipped_tools_are_registered_with_strict_object_schemas() -> None:
    assert {"read", "ls", "find", "grep", "bash"} <= set(tools.registered_names())
    for name in ("read", "ls", "find", "grep", "bash"):
        tool = tools.get(name)
        assert tool.name == name and tool.description
        assert tool.parameters["type"] == "object"
        assert tool.parameters["additionalProperties"] is False
        assert not {"anyOf", "oneOf", "allOf"} & set(tool.parameters)


@pytest.mark.parametrize("name", ["workflow", "Workflow"])
def test_workflow_is_reserved(name: str) -> None:
    tool = Tool(name, "", {"type": "object"}, lambda _id, _args, _ctx: ToolResult(""))
    with pytest.raises(DefinitionError, match="reserved"):
        tools.register(name, tool)
    assert name not in tools.registered_names()


def test_register_get_and_unregister(scratch_tool: Tool, work: Path) -> None:
    tools.register("echo", scratch_tool)
    assert tools.get("echo") is scratch_tool
    assert "echo" in tools.registered_names()
    assert tools.get("echo").execute("c", {"a": 1}, context(work)).content == "{'a': 1}"
    tools.unregister("echo")
    with pytest.raises(DefinitionError, match="No tool named 'echo'"):
        tools.get("echo")


@pytest.mark.parametrize(
    ("name", "parameters", "message"),
    [
        ("other", {"type": "object"}, "must be equal"),
        ("echo", {"type": "array"}, "object root"),
        ("echo", {"type": "object", "anyOf": []}, "union"),
        ("has space", {"type": "object"}, "invalid"),
    ],
)
def test_register_refuses_malformed_tools(name: str, parameters: dict[str, Any], message: str) -> None:
    tool = Tool("echo" if name == "other" else name, "", parameters, lambda _id, _a, _c: ToolResult(""))
    with pytest.raises(DefinitionError, match=message):
        tools.register(name, tool)


# --- argument validation (shared by every shipped tool) ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("read", {"path": "a.txt", "ofset": 2}, "unknown argument(s) ofset"),
        ("read", {}, "missing required argument(s) path"),
        ("read", {"path": 3}, "'path' must be a string"),
        ("read", {"path": ""}, "'path' must not be empty"),
        ("read", {"path": "a.txt", "offset": 0}, "'offset' must be at least 1"),
        ("read", {"path": "a.txt", "limit": True}, "'limit' must be an integer"),
        ("ls", {"path": ".", "all": True}, "unknown argument(s) all"),
        ("find", {"pattern": "*", "regex": "x"}, "unknown argument(s) regex"),
        ("grep", {"pattern": "x", "ignore_case": "yes"}, "'ignore_case' must be true or false"),
        ("bash", {"command": "true", "timeout": 5}, "unknown argument(s) timeout"),
        ("bash", {}, "missing required argument(s) command"),
    ],
)
def test_bad_arguments_are_error_results(work: Path, name: str, args: dict[str, Any], message: str) -> None:
    (work / "a.txt").write_text("a\n")
    assert message in refused(name, args, work)


def test_non_object_arguments_are_an_error_result(work: Path) -> None:
    result = tools.get("read").execute("c", ["a.txt"], context(work))  # type: ignore[arg-type]
    assert result.is_error and "JSON object" in result.content


# --- scoping: every file tool refuses to leave the working directory --------------------------------------

PATH_TOOLS = [("read", {}), ("ls", {}), ("find", {"pattern": "*"}), ("grep", {"pattern": "secret"})]


@pytest.mark.parametrize(("name", "extra"), PATH_TOOLS, ids=[name for name, _ in PATH_TOOLS])
def test_dot_dot_escape_is_refused(work: Path, name: str, extra: dict[str, Any]) -> None:
    target = "../outside/secret.txt" if name == "read" else "../outside"
    message = refused(name, {"path": target, **extra}, work)
    assert "outside the working directory" in message and "top secret" not in message


@pytest.mark.parametrize(("name", "extra"), PATH_TOOLS, ids=[name for name, _ in PATH_TOOLS])
def test_absolute_path_outside_is_refused(work: Path, name: str, extra: dict[str, Any]) -> None:
    target = work.parent / "outside" / ("secret.txt" if name == "read" else "")
    assert "outside the working directory" in refused(name, {"path": str(target), **extra}, work)


@pytest.mark.parametrize(("name", "extra"), PATH_TOOLS, ids=[name for name, _ in PATH_TOOLS])
def test_symlink_leaving_the_directory_is_refused(work: Path, name: str, extra: dict[str, Any]) -> None:
    (work / "link").symlink_to(work.parent / "outside")
    (work / "secret-link.txt").symlink_to(work.parent / "outside" / "secret.txt")
    target = "secret-link.txt" if name == "read" else "link"
    message = refused(name, {"path": target, **extra}, work)
    assert "through a symlink" in message and "top secret" not in message


def test_symlink_then_dot_dot_is_resolved_like_the_os(work: Path) -> None:
    (work / "sub").mkdir()
    (work / "sub" / "inner").symlink_to(work.parent / "outside")
    # Lexically "sub/inner/../x" is inside, but the OS resolves the link first and lands beside the secret.
    assert "through a symlink" in refused("read", {"path": "sub/inner/../secret.txt"}, work)


def test_symlinks_inside_the_directory_are_fine(work: Path) -> None:
    (work / "real.txt").write_text("hello\n")
    (work / "alias.txt").symlink_to(work / "real.txt")
    assert ok("read", {"path": "alias.txt"}, work) == "hello\n"


def test_absolute_path_inside_is_allowed(work: Path) -> None:
    (work / "a.txt").write_text("inside\n")
    assert ok("read", {"path": str(work / "a.txt")}, work) == "inside\n"


def test_walks_skip_symlinks_that_leave(work: Path) -> None:
    (work / "link").symlink_to(work.parent / "outside")
    (work / "secret-link.txt").symlink_to(work.parent / "outside" / "secret.txt")
    (work / "mine.txt").write_text("no secret here\n")
    assert ok("find", {"pattern": "*secret*"}, work) == "No files found."
    assert ok("grep", {"pattern": "secret"}, work) == "mine.txt:1: no secret here"


@pytest.mark.parametrize("name", ["read", "grep"])
def test_binary_files_are_refused(work: Path, name: str) -> None:
    (work / "blob.bin").write_bytes(b"text" + b"\x00" + b"secret\n")
    args = {"path": "blob.bin"} if name == "read" else {"pattern": "secret", "path": "blob.bin"}
    assert "binary file" in refused(name, args, work)


def test_nul_after_the_first_8_kib_is_not_binary(work: Path) -> None:
    (work / "late.txt").write_bytes(b"a" * 9000 + b"\n\x00\n")
    assert not call("read", {"path": "late.txt"}, work).is_error


def test_fifos_are_refused_and_skipped_instead_of_blocking(work: Path) -> None:
    os.mkfifo(work / "pipe")
    (work / "text.txt").write_text("needle\n")
    assert "not a regular file" in refused("read", {"path": "pipe"}, work)
    assert ok("grep", {"pattern": "needle"}, work) == "text.txt:1: needle"


def test_a_missing_working_directory_is_an_error_result(tmp_path: Path) -> None:
    for name, args in [("read", {"path": "a"}), ("ls", {}), ("bash", {"command": "true"})]:
        result = call(name, args, tmp_path / "gone")
        assert result.is_error and "working directory" in result.content


def test_missing_paths_are_error_results(work: Path) -> None:
    assert "does not exist" in refused("read", {"path": "nope.txt"}, work)
    assert "does not exist" in refused("ls", {"path": "nope"}, work)


# --- read -------------------------------------------------------------------------------------------------


def test_read_whole_file_offset_and_limit(work: Path) -> None:
    (work / "f.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    assert ok("read", {"path": "f.txt"}, work).startswith("line 1\nline 2\n")
    paged = ok("read", {"path": "f.txt", "offset": 3, "limit": 2}, work)
    assert paged == "line 3\nline 4\n[showing lines 3-4; more follow. Use offset=5 to continue.]"
    assert ok("read", {"path": "f.txt", "offset": 9, "limit": 5}, work) == "line 9\nline 10\n"
    assert "past the end" in refused("read", {"path": "f.txt", "offset": 11}, work)


def test_read_caps_output_at_whole_lines(work: Path) -> None:
    line = "x" * 99 + "\n"
    (work / "big.txt").write_text(line * 1_000)  # 100,000 characters
    result = call("read", {"path": "big.txt"}, work)
    body, marker = result.content.rsplit("\n", 1)
    assert len(body) <= READ_MAX_CHARS
    assert marker == "[showing lines 1-500; more follow. Use offset=501 to continue.]"
    assert result.details is not None and result.details["truncated"] is True
    assert ok("read", {"path": "big.txt", "offset": 501}, work).count("\n") == 500


def test_read_cuts_a_single_huge_line(work: Path) -> None:
    (work / "min.js").write_text("y" * (READ_MAX_CHARS * 3) + "\nnext\n")
    content = ok("read", {"path": "min.js"}, work)
    assert content.startswith("y" * READ_MAX_CHARS + "\n[line 1 is longer than")
    assert "offset=2" in content
    assert ok("read", {"path": "min.js", "offset": 2}, work) == "next\n"


def test_read_empty_file_and_folder(work: Path) -> None:
    (work / "empty.txt").write_text("")
    (work / "dir").mkdir()
    assert ok("read", {"path": "empty.txt"}, work) == "(empty file)"
    assert "is a folder" in refused("read", {"path": "dir"}, work)


# --- ls ---------------------------------------------------------------------------------------------------


def test_ls_marks_folders_and_symlinks(work: Path) -> None:
    (work / "b.txt").write_text("")
    (work / "a").mkdir()
    (work / ".hidden").write_text("")
    (work / "link").symlink_to(work.parent / "outside")
    assert ok("ls", {}, work) == ".hidden\na/\nb.txt\nlink@"
    assert ok("ls", {"path": "a"}, work) == "(empty folder)"
    assert "not a folder" in refused("ls", {"path": "b.txt"}, work)


def test_ls_caps_entries(work: Path) -> None:
    for n in range(LS_MAX_ENTRIES + 5):
        (work / f"f{n:05d}").write_text("")
    content = ok("ls", {}, work)
    assert content.count("\n") == LS_MAX_ENTRIES
    assert content.endswith(
        f"[showing {LS_MAX_ENTRIES:,} of {LS_MAX_ENTRIES + 5:,} entries; use find to narrow down.]"
    )


# --- find -------------------------------------------------------------------------------------------------


@pytest.fixture
def tree(work: Path) -> Path:
    for rel in ["a.py", "src/b.py", "src/pkg/c.py", "src/pkg/d.txt", "docs/e.md", "test_x.py"]:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(f"content of {rel}\nTODO: fix {rel}\n")
    return work


def test_find_by_name_and_by_path(tree: Path) -> None:
    assert ok("find", {"pattern": "*.py"}, tree).splitlines() == [
        "a.py",
        "src/b.py",
        "src/pkg/c.py",
        "test_x.py",
    ]
    assert ok("find", {"pattern": "src/**/*.py"}, tree).splitlines() == ["src/b.py", "src/pkg/c.py"]
    assert ok("find", {"pattern": "*/*.py"}, tree).splitlines() == ["src/b.py"]
    assert ok("find", {"pattern": "*.py", "path": "src/pkg"}, tree) == "src/pkg/c.py"
    assert ok("find", {"pattern": "pkg"}, tree) == "src/pkg/"
    assert ok("find", {"pattern": "[!a]*.py"}, tree).splitlines() == ["src/b.py", "src/pkg/c.py", "test_x.py"]
    assert ok("find", {"pattern": "*.rs"}, tree) == "No files found."


def test_find_caps_results(work: Path) -> None:
    for n in range(FIND_MAX_RESULTS + 1):
        (work / f"f{n:05d}.txt").write_text("")
    content = ok("find", {"pattern": "*.txt"}, work)
    assert content.count("\n") == FIND_MAX_RESULTS
    assert content.endswith("[stopped at 1,000 results; use a narrower pattern or path.]")


def test_find_honours_cancellation(tree: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    result = call("find", {"pattern": "*"}, tree, cancel=cancel)
    assert result.is_error and "cancelled" in result.content


# --- grep -------------------------------------------------------------------------------------------------


def test_grep_format_glob_path_and_case(tree: Path) -> None:
    assert ok("grep", {"pattern": r"TODO: fix \w+/b"}, tree) == "src/b.py:2: TODO: fix src/b.py"
    by_glob = ok("grep", {"pattern": "TODO", "glob": "*.py", "path": "src"}, tree)
    assert by_glob.splitlines() == [
        "src/b.py:2: TODO: fix src/b.py",
        "src/pkg/c.py:2: TODO: fix src/pkg/c.py",
    ]
    assert ok("grep", {"pattern": "todo", "path": "docs/e.md"}, tree) == "No matches."
    assert ok("grep", {"pattern": "todo", "path": "docs/e.md", "ignore_case": True}, tree).startswith(
        "docs/e.md:2:"
    )


def test_grep_regex_error_is_an_error_result(tree: Path) -> None:
    assert "invalid regular expression" in refused("grep", {"pattern": "(unclosed"}, tree)


def test_grep_skips_binary_files_while_walking(work: Path) -> None:
    (work / "blob.bin").write_bytes(b"needle\x00")
    (work / "text.txt").write_text("needle\n")
    assert ok("grep", {"pattern": "needle"}, work) == "text.txt:1: needle"


def test_grep_caps_matches_and_long_lines(work: Path) -> None:
    (work / "many.txt").write_text("hit\n" * (GREP_MAX_MATCHES + 10))
    content = ok("grep", {"pattern": "hit"}, work)
    assert content.count("many.txt:") == GREP_MAX_MATCHES
    assert content.endswith(f"[stopped at {GREP_MAX_MATCHES} matches; use a narrower pattern, path or glob.]")
    (work / "many.txt").unlink()
    (work / "long.txt").write_text("hit" + "z" * 5_000 + "\n")
    assert (
        ok("grep", {"pattern": "hit"}, work)
        == "long.txt:1: hit" + "z" * (GREP_MAX_LINE_CHARS - 3) + " [line cut]"
    )


# --- bash -------------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie awaiting its reaper counts as gone."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _gone_soon(pid: int, within_s: float = 3.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _pid_from(path: Path) -> int:
    for _ in range(100):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError("the command never wrote its pid")


def test_bash_runs_in_the_working_directory(work: Path) -> None:
    assert ok("bash", {"command": "pwd; echo err >&2"}, work) == f"{work.resolve()}\nerr"


def test_bash_nonzero_exit_is_an_error_result(work: Path) -> None:
    result = call("bash", {"command": "echo oops; exit 3"}, work)
    assert result.is_error and result.content == "oops\n[exit code 3]"
    assert result.details is not None and result.details["exitCode"] == 3


def test_bash_keeps_the_tail_of_long_output(work: Path) -> None:
    result = call("bash", {"command": "head -c 200000 /dev/zero | tr '\\0' a; echo; echo END"}, work)
    assert not result.is_error
    assert result.content.startswith("a" * 100)
    assert "END\n[output cut: showing the last 50,000 of 200,005 bytes]" in result.content
    assert len(result.content) < BASH_MAX_OUTPUT_BYTES + 200


def test_bash_timeout_kills_the_whole_process_group(work: Path) -> None:
    command = "(sleep 60 & echo $! > grandchild.pid; wait); echo never"
    started = time.monotonic()
    result = call("bash", {"command": command}, work, timeout_s=0.5)
    assert time.monotonic() - started < 3
    assert result.is_error and "timed out after 0.5 s" in result.content and "never" not in result.content
    assert result.details is not None and result.details["stopped"] == "timed_out"
    assert _gone_soon(_pid_from(work / "grandchild.pid"))


def test_bash_sigkills_a_group_that_ignores_sigterm(work: Path) -> None:
    command = "trap '' TERM; sleep 60 & echo $! > stubborn.pid; wait"
    started = time.monotonic()
    result = call("bash", {"command": command}, work, timeout_s=0.3)
    elapsed = time.monotonic() - started
    assert result.is_error and 1.2 <= elapsed < 4
    assert _gone_soon(_pid_from(work / "stubborn.pid"))


def test_bash_cancellation_kills_the_group(work: Path) -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    result = call(
        "bash", {"command": "sleep 60 & echo $! > c.pid; wait"}, work, timeout_s=None, cancel=cancel
    )
    assert result.is_error and "cancelled" in result.content
    assert _gone_soon(_pid_from(work / "c.pid"))


def test_bash_does_not_wait_for_a_detached_background_job(work: Path) -> None:
    started = time.monotonic()
    content = ok("bash", {"command": "sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; echo started"}, work)
    assert content == "started" and time.monotonic() - started < 3
    os.kill(_pid_from(work / "bg.pid"), 9)
