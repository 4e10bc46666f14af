"""The ``read`` and ``ls`` tools: look at one file or one folder inside the working directory.

Output is capped so one call cannot flood the model's context; a marker says what was cut and how to get the
rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from piw.tools.base import ToolContext, ToolRefused, ToolResult, guarded_tool, listing, object_schema
from piw.tools.paths import Scope, refuse_binary

READ_MAX_CHARS = 50_000
"""Most characters one ``read`` returns; larger files are paged with ``offset``."""

LS_MAX_ENTRIES = 1_000
"""Most entries one ``ls`` lists."""

_READ_SCHEMA = object_schema(
    {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "File path, relative to the working directory.",
        },
        "offset": {
            "type": "integer",
            "minimum": 1,
            "description": "First line to return (1-based). Default 1.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "description": "Most lines to return. Default: until the cap.",
        },
    },
    required=("path",),
)


def _read(call_id: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    scope = Scope.of(ctx)
    path = scope.resolve(args["path"])
    name = scope.display(path)
    if path.is_dir():
        raise ToolRefused(f"{name!r} is a folder; use ls to list it.")
    refuse_binary(scope, path)
    offset: int = args.get("offset", 1)
    limit: int | None = args.get("limit")
    lines: list[str] = []
    size = 0
    cut_line = False
    last = 0
    more = False
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, (line, cut) in enumerate(bounded_lines(handle, READ_MAX_CHARS), start=1):
            if number < offset:
                last = number
                continue
            if (limit is not None and len(lines) >= limit) or (lines and size + len(line) > READ_MAX_CHARS):
                more = True  # keep whole lines; the model continues from the next offset
                break
            lines.append(line)
            size += len(line)
            last = number
            if cut:
                cut_line = True
                more = True
                break
    if not lines:
        if offset == 1:
            return ToolResult(content="(empty file)", details={"path": name, "lines": 0})
        raise ToolRefused(f"offset {offset} is past the end of {name!r}, which has {last} line(s).")
    content = "".join(lines)
    if cut_line:
        content += (
            f"\n[line {last} is longer than {READ_MAX_CHARS:,} characters; only its start is shown. "
            f"Use grep to search it, or offset={last + 1} to continue after it.]"
        )
    elif more:
        content = content.rstrip("\n") + (
            f"\n[showing lines {offset}-{last}; more follow. Use offset={last + 1} to continue.]"
        )
    details = {"path": name, "startLine": offset, "endLine": last, "truncated": more or cut_line}
    return ToolResult(content=content, details=details)


def bounded_lines(handle: TextIO, cap: int) -> Iterator[tuple[str, bool]]:
    """Lines of ``handle``, each cut to ``cap`` characters (flag ``True``): a huge line never fills memory."""
    while line := handle.readline(cap + 1):
        if len(line) <= cap or line.endswith("\n"):
            yield line, False
            continue
        rest = line
        while rest and not rest.endswith("\n"):
            rest = handle.readline(64 * 1024)
        yield line[:cap], True


READ = guarded_tool(
    "read",
    (
        "Read a text file inside the working directory. Returns its lines as text, at most "
        f"{READ_MAX_CHARS:,} characters per call; use offset (1-based line) and limit (lines) to page "
        "through larger files. Binary files and paths outside the working directory are refused."
    ),
    _READ_SCHEMA,
    _read,
    effect="retry",  # read-only: a call that did not finish may simply be made again
)


_LS_SCHEMA = object_schema(
    {"path": {"type": "string", "minLength": 1, "description": "Folder to list, relative. Default '.'."}},
)


def _ls(call_id: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    scope = Scope.of(ctx)
    path = scope.resolve(args.get("path", "."))
    name = scope.display(path)
    if not path.is_dir():
        raise ToolRefused(f"{name!r} is a file, not a folder; use read to see it.")
    with os.scandir(path) as found:
        # piw's own data (PIW_HOME, the config file) is not listed even when it sits in the working directory.
        entries = sorted(
            (entry for entry in found if entry.is_symlink() or not scope.is_protected(Path(entry.path))),
            key=lambda entry: entry.name,
        )
    shown: list[str] = []
    for entry in entries[:LS_MAX_ENTRIES]:
        if entry.is_symlink():
            # A link is named as a link, never followed: its target may lie outside the working directory.
            shown.append(entry.name + "@")
        else:
            shown.append(entry.name + "/" if entry.is_dir() else entry.name)
    cut = f"[showing {LS_MAX_ENTRIES:,} of {len(entries):,} entries; use find to narrow down.]"
    return listing(
        shown,
        "(empty folder)",
        cut if len(entries) > LS_MAX_ENTRIES else None,
        path=name,
        entries=len(entries),
    )


LS = guarded_tool(
    "ls",
    (
        "List a folder inside the working directory, sorted by name: folders end with '/', symlinks with "
        f"'@'. At most {LS_MAX_ENTRIES:,} entries."
    ),
    _LS_SCHEMA,
    _ls,
    effect="retry",  # read-only: a call that did not finish may simply be made again
)
