"""Content-addressed artifacts: large strings leave trace lines and live in ``artifacts/sha256-<hex>.txt``.

Keeping every trace line small keeps replay fast and bounded; an artifact is written (and fsync'd) before the line
that names it, so a committed line never points at a missing file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from piw.errors import ArtifactDamaged, StoreError
from piw.wire import SAFE_FLOAT_MAX, SAFE_FLOAT_MIN, sha256_hex

ARTIFACT_THRESHOLD_BYTES = 4096
_SENTINELS = ("$artifact", "$escaped")


def externalize(value: Any, store: Callable[[str], dict[str, Any]]) -> Any:
    """Replace string leaves over 4096 UTF-8 bytes by artifact refs and escape user objects using sentinel keys."""
    if isinstance(value, str):
        encoded = value.encode("utf-8")
        if len(encoded) > ARTIFACT_THRESHOLD_BYTES:
            return {"$artifact": store(value)}
        return value
    if isinstance(value, dict):
        converted = {key: externalize(item, store) for key, item in value.items()}
        if any(key in value for key in _SENTINELS):
            return {"$escaped": converted}
        return converted
    if isinstance(value, list | tuple):
        return [externalize(item, store) for item in value]
    return value


def externalize_plain(value: Any, store: Callable[[str], dict[str, Any]]) -> tuple[Any, bool]:
    """:func:`externalize` in the same single walk that tells whether the result is plain JSON data.

    Plain means only exact ``dict`` (``str`` keys), ``list``, ``str``, ``int``, ``bool``, ``None`` and floats
    that orjson spells as ``json`` does (:func:`piw.wire.encode_line`), so the writer can encode the line fast
    and fold the value as it is, without parsing its own line back. Anything else (a tuple, a non-string key,
    a subclass, NaN) makes the walk say "not plain": the caller then takes the exact ``json`` path.
    """
    plain = [True]

    def walk(item: Any) -> Any:
        kind = type(item)
        if kind is str:
            # at most 4 UTF-8 bytes per character: short strings never need the encode
            if (
                len(item) * 4 > ARTIFACT_THRESHOLD_BYTES
                and len(item.encode("utf-8")) > ARTIFACT_THRESHOLD_BYTES
            ):
                return {"$artifact": store(item)}
            return item
        if kind is dict:
            converted = {}
            for key, inner in item.items():
                if type(key) is not str:
                    plain[0] = False
                converted[key] = walk(inner)
            if "$artifact" in item or "$escaped" in item:
                return {"$escaped": converted}
            return converted
        if kind is list:
            return [walk(inner) for inner in item]
        if kind is int or kind is bool or item is None:
            return item
        if kind is float:
            magnitude = abs(item)
            if not (magnitude == 0.0 or SAFE_FLOAT_MIN <= magnitude < SAFE_FLOAT_MAX):
                plain[0] = False
            return item
        plain[0] = False
        return externalize(item, store)

    result = walk(value)
    return result, plain[0]


def resolve(value: Any, load: Callable[[dict[str, Any]], str]) -> Any:
    """Inverse of :func:`externalize`: load artifact refs and unwrap one level of ``$escaped``."""
    if isinstance(value, dict):
        if len(value) == 1 and "$artifact" in value:
            return load(value["$artifact"])
        if len(value) == 1 and "$escaped" in value and isinstance(value["$escaped"], dict):
            return {key: resolve(item, load) for key, item in value["$escaped"].items()}
        return {key: resolve(item, load) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, load) for item in value]
    return value


class ArtifactStore:
    """Writes and reads the artifacts of one bundle, refusing any path that leaves the bundle."""

    def __init__(self, bundle_dir: Path, fsync: Callable[[int], None] = os.fsync) -> None:
        self.bundle_dir = bundle_dir
        self.directory = bundle_dir / "artifacts"
        self._fsync = fsync

    def write(self, text: str) -> dict[str, Any]:
        """Store ``text`` (deduplicated) and return its ref body; file and name are durable on return."""
        data = text.encode("utf-8")
        hex_digest = sha256_hex(data)
        name = f"sha256-{hex_digest}.txt"
        target = self.directory / name
        # Deduplicate only onto an intact file: a damaged one is replaced, never silently referenced again.
        if not _holds(target, data):
            created = not self.directory.is_dir()
            if created:
                self.directory.mkdir(mode=0o700)
            fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                self._fsync(fd)
            except BaseException:
                os.close(fd)
                os.unlink(temp)
                raise
            os.close(fd)
            os.replace(temp, target)
            # The rename (and a new artifacts/ folder) must survive power loss before a line names the file.
            self._fsync_dir(self.directory)
            if created:
                self._fsync_dir(self.bundle_dir)
        return {
            "path": f"artifacts/{name}",
            "mediaType": "text/plain",
            "bytes": len(data),
            "sha256": hex_digest,
        }

    def _fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    def read(self, ref: dict[str, Any]) -> str:
        """Load an artifact named by a ref: its path must stay inside the bundle and its bytes match its sha256.

        A missing or changed artifact raises ``ArtifactDamaged`` naming it; its content is never used.
        """
        relative = str(ref.get("path", ""))
        data, problem = self._load(ref)
        if data is None or problem is not None:
            raise ArtifactDamaged(
                f"Run {self.bundle_dir.name} is damaged: artifact {relative} {problem}. Restore the file from a "
                "backup (nothing was written), or start the run again.",
                relative,
            )
        return data.decode("utf-8", errors="replace")

    def problem(self, ref: dict[str, Any]) -> str | None:
        """What is wrong with the artifact of ``ref`` (``"is missing"``, ``"does not match its sha256"``, …), or
        ``None`` when it is intact."""
        return self._load(ref)[1]

    def _load(self, ref: dict[str, Any]) -> tuple[bytes | None, str | None]:
        try:
            path = safe_bundle_path(self.bundle_dir, str(ref.get("path", "")))
        except StoreError:
            return None, "resolves outside the run bundle"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None, "is missing"
        except OSError as exc:
            return None, f"cannot be read ({exc.strerror})"
        return data, artifact_problem(ref, data)


def artifact_problem(ref: dict[str, Any], data: bytes) -> str | None:
    """How ``data`` differs from what its ref promises (size, then sha256), or ``None``."""
    size = ref.get("bytes")
    if isinstance(size, int) and size != len(data):
        return f"has {len(data)} bytes, its ref says {size}"
    expected = ref.get("sha256")
    if isinstance(expected, str) and sha256_hex(data) != expected:
        return "does not match its sha256"
    return None


def _holds(path: Path, data: bytes) -> bool:
    """True when ``path`` exists with exactly ``data`` (size first, so a mismatch rarely reads the file)."""
    try:
        if path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return False


def artifact_refs(value: Any) -> Iterator[dict[str, Any]]:
    """Every artifact ref body inside a persisted (wire-form) value, ``$escaped`` user objects looked into."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if len(item) == 1 and "$artifact" in item and isinstance(item["$artifact"], dict):
                yield item["$artifact"]
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def safe_bundle_path(bundle_dir: Path, relative: str) -> Path:
    """Resolve a bundle-relative path, rejecting anything (symlinks included) that escapes the bundle."""
    root = bundle_dir.resolve()
    candidate = (root / relative).resolve()
    if not candidate.is_relative_to(root) or candidate == root:
        raise StoreError(f"Refusing path {relative!r}: it resolves outside the run bundle.")
    return candidate
