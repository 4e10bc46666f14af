"""How much disk a run bundle takes (``piw runs --size``, ``piw gc``'s space freed; ``docs/cli.md``)."""

from __future__ import annotations

import os
from pathlib import Path


def tree_bytes(path: Path | str) -> int:
    """The bytes of every regular file under ``path`` (symlinks are not followed; a missing tree is 0)."""
    total = 0
    stack = [os.fspath(path)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def human_bytes(count: int) -> str:
    """``512 B``, ``3.4 KB``, ``12.0 MB``, ``1.2 GB`` (powers of 1024)."""
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"  # pragma: no cover
