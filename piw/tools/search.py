"""The ``find`` and ``grep`` tools: locate files by glob and lines by regex inside the working directory.

Both walk the tree in sorted order so results are stable between runs (a replayed conversation sees the same
text), stop at a cap with a marker, skip symlinks that leave the working directory, and honour cancellation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from piw.tools.base import ToolContext, ToolRefused, ToolResult, guarded_tool, listing, object_schema
from piw.tools.files import bounded_lines
from piw.tools.paths import Glob, Scope, is_binary, refuse_binary, show, walk

FIND_MAX_RESULTS = 1_000
"""Most paths one ``find`` returns."""

GREP_MAX_MATCHES = 200
"""Most matching lines one ``grep`` returns."""

GREP_MAX_LINE_CHARS = 500
"""A matching line longer than this is shown cut, so one minified file cannot fill the output."""

_FIND_SCHEMA = object_schema(
    {
        "pattern": {
            "type": "string",
            "minLength": 1,
            "description": "Glob. Without '/' it matches file names at any depth ('*.py'); with '/' it "
            "matches the path below 'path' ('src/**/test_*.py'). '**' crosses folders.",
        },
        "path": {"type": "string", "minLength": 1, "description": "Folder to search, relative. Default '.'."},
    },
    required=("pattern",),
)


def _find(call_id: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    scope = Scope.of(ctx)
    pattern = Glob.compile(args["pattern"])
    base = scope.resolve(args.get("path", "."))
    if not base.is_dir():
        raise ToolRefused(f"{scope.display(base)!r} is not a folder.")
    found: list[str] = []
    truncated = False
    for entry in walk(scope, base):
        if pattern.matches(entry.seen, base):
            if len(found) == FIND_MAX_RESULTS:
                truncated = True
                break
            found.append(show(scope, entry))
    cut = f"[stopped at {FIND_MAX_RESULTS:,} results; use a narrower pattern or path.]" if truncated else None
    return listing(found, "No files found.", cut, pattern=pattern.pattern, count=len(found))


FIND = guarded_tool(
    "find",
    (
        "Find files and folders inside the working directory by glob, in sorted order; folders end with '/'. "
        f"At most {FIND_MAX_RESULTS:,} results."
    ),
    _FIND_SCHEMA,
    _find,
    effect="retry",  # read-only: a call that did not finish may simply be made again
)


_GREP_SCHEMA = object_schema(
    {
        "pattern": {"type": "string", "minLength": 1, "description": "Python regular expression, per line."},
        "path": {"type": "string", "minLength": 1, "description": "File or folder to search. Default '.'."},
        "glob": {
            "type": "string",
            "minLength": 1,
            "description": "Only files matching this glob, e.g. '*.py'.",
        },
        "ignore_case": {"type": "boolean", "description": "Match case-insensitively. Default false."},
    },
    required=("pattern",),
)


def _grep(call_id: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    scope = Scope.of(ctx)
    try:
        regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
    except re.error as exc:
        raise ToolRefused(f"invalid regular expression {args['pattern']!r}: {exc}.") from exc
    glob = Glob.compile(args["glob"]) if "glob" in args else None
    target = scope.resolve(args.get("path", "."))
    lines: list[str] = []
    truncated = False
    if not target.is_dir():
        refuse_binary(scope, target)  # named explicitly, so say why nothing is searched
        truncated = _grep_file(scope.display(target), target, regex, lines)
    for entry in walk(scope, target) if target.is_dir() else ():
        if entry.is_dir or (glob is not None and not glob.matches(entry.seen, target)):
            continue
        try:
            if not entry.real.is_file() or is_binary(entry.real):
                continue  # met while walking a folder: skipped quietly, like grep -I
            truncated = _grep_file(show(scope, entry), entry.real, regex, lines)
        except OSError:
            continue  # one unreadable file should not hide the matches in the others
        if truncated:
            break
    cut = f"[stopped at {GREP_MAX_MATCHES:,} matches; use a narrower pattern, path or glob.]"
    return listing(
        lines, "No matches.", cut if truncated else None, pattern=regex.pattern, matches=len(lines)
    )


def _grep_file(name: str, path: Path, regex: re.Pattern[str], lines: list[str]) -> bool:
    """Append ``name:line: text`` for each match in ``path``; ``True`` when the cap stopped the search."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, (line, _) in enumerate(bounded_lines(handle, 64 * 1024), start=1):
            text = line.rstrip("\r\n")
            if not regex.search(text):
                continue
            if len(lines) == GREP_MAX_MATCHES:
                return True
            if len(text) > GREP_MAX_LINE_CHARS:
                text = text[:GREP_MAX_LINE_CHARS] + " [line cut]"
            lines.append(f"{name}:{number}: {text}")
    return False


GREP = guarded_tool(
    "grep",
    (
        "Search files inside the working directory for a regular expression, line by line. Returns "
        f"'file:line: text' for each match, at most {GREP_MAX_MATCHES:,}. Binary files are skipped."
    ),
    _GREP_SCHEMA,
    _grep,
    effect="retry",  # read-only: a call that did not finish may simply be made again
)
