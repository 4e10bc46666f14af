"""Keeping file tools inside the working directory: path scoping, binary detection, walking and globs.

The threat is the model, not other local processes: a path argument may climb out with ``..``, be absolute,
or go through a symlink that points elsewhere. Every path is therefore resolved the way the OS would (symlinks
before ``..``) and the real location must lie under the real working directory.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from piw.tools.base import ToolContext, ToolRefused

BINARY_SNIFF_BYTES = 8 * 1024
"""A NUL byte in this much of a file's start marks it binary, the same heuristic git and grep use."""


@dataclass(frozen=True)
class Scope:
    """The real working directory, plus the deadline and cancel event long walks must honour."""

    root: Path
    ctx: ToolContext
    deadline: float | None
    protected: tuple[Path, ...] = ()
    """Real paths refused even inside the working directory (``PIW_HOME``, the config file)."""

    @classmethod
    def of(cls, ctx: ToolContext) -> Scope:
        """The scope of one tool call; fails when the working directory itself is missing."""
        try:
            root = ctx.cwd.resolve(strict=True)
        except OSError as exc:
            raise ToolRefused(f"the working directory {str(ctx.cwd)!r} is not available.") from exc
        deadline = None if ctx.timeout_s is None else time.monotonic() + ctx.timeout_s
        protected = tuple(Path(os.path.realpath(path)) for path in ctx.protected)
        return cls(root=root, ctx=ctx, deadline=deadline, protected=protected)

    def is_protected(self, real: Path) -> bool:
        """Whether ``real`` is, or lies inside, a protected path (run bundles and secrets live there)."""
        return any(real == path or real.is_relative_to(path) for path in self.protected)

    def resolve(self, path: str) -> Path:
        """The real, existing location of ``path`` (relative or absolute) inside the working directory."""
        if "\x00" in path:
            raise ToolRefused("refused: the path contains a NUL character.")
        cwd = self.ctx.cwd.absolute()
        joined = os.path.join(cwd, path)
        lexical = Path(os.path.normpath(joined))
        if not (lexical.is_relative_to(os.path.normpath(cwd)) or lexical.is_relative_to(self.root)):
            raise ToolRefused(f"refused: {path!r} is outside the working directory.")
        real = Path(os.path.realpath(joined))
        if not real.is_relative_to(self.root):
            raise ToolRefused(f"refused: {path!r} leads outside the working directory through a symlink.")
        if self.is_protected(real):
            raise ToolRefused(f"refused: {path!r} is piw's own data (PIW_HOME or its config file).")
        if not real.exists():
            raise ToolRefused(f"{path!r} does not exist.")
        return real

    def display(self, real: Path) -> str:
        """``real`` as the model should name it: relative to the working directory, with forward slashes."""
        relative = real.relative_to(self.root).as_posix()
        return relative or "."

    def check_time(self) -> None:
        """Stop a long walk when the call is cancelled or out of time."""
        if self.ctx.cancel.is_set():
            raise ToolRefused("cancelled.")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ToolRefused(f"timed out after {self.ctx.timeout_s:g} s; narrow the path or pattern.")

    def inside(self, path: Path) -> Path | None:
        """The real location of an entry met while walking, or ``None`` when a symlink takes it outside."""
        real = Path(os.path.realpath(path))
        return real if real.is_relative_to(self.root) and not self.is_protected(real) else None


@dataclass(frozen=True)
class Entry:
    """An entry met while walking: its path as seen (for display), its real path, whether it is a folder."""

    seen: Path
    real: Path
    is_dir: bool


def walk(scope: Scope, top: Path) -> Iterator[Entry]:
    """Every entry under ``top``, depth first in name order (so results read like a sorted listing).

    A symlink is followed only to check where it lands: one leaving the working directory is skipped, and a
    symlinked folder is listed but never entered, which rules out loops and double counting. Unreadable
    folders are skipped rather than failing the whole walk.
    """
    pending: list[Iterator[Path]] = [_children(top)]
    while pending:
        seen = next(pending[-1], None)
        if seen is None:
            pending.pop()
            continue
        scope.check_time()
        real = scope.inside(seen)
        if real is None:
            continue
        entry = Entry(seen=seen, real=real, is_dir=real.is_dir())
        yield entry
        if entry.is_dir and not seen.is_symlink():
            pending.append(_children(seen))


def _children(folder: Path) -> Iterator[Path]:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    return (folder / name for name in names)


def show(scope: Scope, entry: Entry) -> str:
    """An entry as the model should name it: relative to the working folder, folders with a trailing ``/``."""
    relative = entry.seen.relative_to(scope.root).as_posix()
    return relative + "/" if entry.is_dir else relative


def is_binary(path: Path) -> bool:
    """Whether ``path`` looks binary: a NUL byte in its first 8 KiB."""
    with path.open("rb") as handle:
        return b"\x00" in handle.read(BINARY_SNIFF_BYTES)


def refuse_binary(scope: Scope, path: Path) -> None:
    """Binary files are refused outright: their bytes would waste context and can hide control sequences.

    So are devices, FIFOs and sockets, whose reads could block the step forever.
    """
    if not path.is_file():
        raise ToolRefused(f"refused: {scope.display(path)!r} is not a regular file.")
    if is_binary(path):
        raise ToolRefused(f"refused: {scope.display(path)!r} is a binary file.")


@dataclass(frozen=True)
class Glob:
    """A glob: ``*`` and ``?`` stay within one folder, ``**`` crosses folders, ``[...]`` is a class.

    A pattern without ``/`` matches a file name at any depth (like ``find -name``); one with ``/`` matches the
    path relative to the search folder. That is what models expect from ``*.py`` versus ``src/**/*.py``.
    """

    pattern: str
    regex: re.Pattern[str]

    @classmethod
    def compile(cls, pattern: str) -> Glob:
        """Translate ``pattern``; an empty or malformed one is refused."""
        if not pattern.strip():
            raise ToolRefused("the glob pattern is empty.")
        pattern = pattern.removeprefix("./")
        try:
            return cls(pattern=pattern, regex=re.compile(_glob_regex(pattern) + r"\Z"))
        except re.error as exc:
            raise ToolRefused(f"invalid glob pattern {pattern!r}: {exc}.") from exc

    def matches(self, seen: Path, base: Path) -> bool:
        """Whether ``seen``, met while searching ``base``, matches."""
        subject = seen.relative_to(base).as_posix() if "/" in self.pattern else seen.name
        return self.regex.match(subject) is not None


def _glob_regex(pattern: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
            continue
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := pattern.find("]", index + 2)) != -1:
            body = pattern[index + 1 : close]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            index = close + 1
            continue
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)
