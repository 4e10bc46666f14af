"""``$NAME`` references: how a config value names an environment variable instead of holding a secret.

Provider keys and headers, MCP servers' ``env`` and ``headers``, and the ``[database]`` password may be written
as ``"$NAME"`` (``docs/providers.md``, "`[providers.NAME]`"); the value is read from the environment when it
is used, so the secret never sits in ``config.toml``. Every part that reads such a value, and the redactor that
hides it, uses this one pattern.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from piw.errors import NeedsKey

ENV_REFERENCE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
"""A whole value that is ``$`` and a variable name."""


def env_reference(value: str) -> str | None:
    """The variable name when ``value`` is a ``$NAME`` reference, else ``None`` (a literal)."""
    match = ENV_REFERENCE.match(value)
    return match.group(1) if match else None


def resolve_value(value: str, env: Mapping[str, str] | None = None) -> str:
    """Resolve ``$NAME`` from the environment (``NeedsKey`` when unset); return a literal unchanged."""
    name = env_reference(value)
    if name is None:
        return value
    resolved = (os.environ if env is None else env).get(name)
    if resolved is None:
        raise NeedsKey(name)
    return resolved
