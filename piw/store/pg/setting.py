"""Which PostgreSQL database a command uses, if any (``docs/many-machines.md``, "Choosing the database").

The precedence, the same for every command that touches runs: ``--database URL`` > ``PIW_DATABASE`` >
``config.toml``'s ``[database]`` table (``url``, ``password = "$NAME"``, ``schema``) > none, which means SQLite in
``PIW_HOME`` (the default, unchanged). This module imports neither psycopg nor the provider layer: it runs on every
command, so it stays cheap (``tomllib`` only, and only when ``config.toml`` exists).

A password never leaves a :class:`DatabaseSetting` except to the driver: ``repr``/``str`` and :meth:`redacted` show
``***`` in its place, and :meth:`DatabaseSetting.scrub` removes it from any text (a driver's error message) before
that text is shown or logged. A ``schema`` query parameter in the URL (not a libpq parameter) chooses the schema
and is taken out of the URL the driver sees.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from piw.env_refs import ENV_REFERENCE
from piw.errors import NeedsKey, UsageError

DEFAULT_SCHEMA = "piw"
DATABASE_ENV = "PIW_DATABASE"
_SCHEMES = ("postgresql", "postgres")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TABLE_KEYS = ("url", "password", "schema")
REDACTED = "***"


@dataclass(frozen=True, repr=False)
class DatabaseSetting:
    """A PostgreSQL database and schema: ``url`` holds the password (if any) and is only ever given to the driver."""

    url: str
    schema: str = DEFAULT_SCHEMA

    @property
    def password(self) -> str | None:
        """The password in the URL (user info or a ``password`` query parameter), for scrubbing; never shown."""
        parts = urlsplit(self.url)
        if parts.password:
            return unquote(parts.password)
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key == "password" and value:
                return value
        return None

    def redacted(self) -> str:
        """The URL with ``***`` for its password (and ``schema=`` when it is not the default): safe to print."""
        parts = urlsplit(self.url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{REDACTED}@{host}" if ":" in userinfo else f"{user}@{host}"
        query = [
            (key, REDACTED if key == "password" else value)
            for key, value in parse_qsl(parts.query, keep_blank_values=True)
        ]
        if self.schema != DEFAULT_SCHEMA:
            query.append(("schema", self.schema))
        text = urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, safe="*/"), ""))
        return self.scrub(text)

    def scrub(self, text: str) -> str:
        """``text`` with the password (plain or URL-quoted) replaced by ``***``."""
        secret = self.password
        if not secret:
            return text
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            text = text.replace(form, REDACTED)
        return text

    def __repr__(self) -> str:
        return f"DatabaseSetting({self.redacted()!r}, schema={self.schema!r})"

    __str__ = redacted


def parse_url(value: str, *, schema: str | None = None, password: str | None = None) -> DatabaseSetting:
    """A setting from a ``postgresql://`` URL: its ``schema`` parameter taken out, ``password`` filled in when the
    URL has none. ``UsageError`` (the URL redacted) for anything else."""
    text = value.strip()
    parts = urlsplit(text)
    if parts.scheme not in _SCHEMES:
        shown = DatabaseSetting(text).redacted() if "://" in text else "(not a URL)"
        raise UsageError(
            f"The database {shown} is not a PostgreSQL URL; write postgresql://USER@HOST:PORT/DATABASE."
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    in_url = [v for k, v in query if k == "schema"]
    query = [(k, v) for k, v in query if k != "schema"]
    chosen = schema or (in_url[-1] if in_url else DEFAULT_SCHEMA)
    netloc = parts.netloc
    if password and not parts.password:
        userinfo, at, host = netloc.rpartition("@")
        if not at:
            raise UsageError(
                f"The database URL {DatabaseSetting(text).redacted()} names no user for its password; "
                "write postgresql://USER@HOST/DATABASE."
            )
        netloc = f"{userinfo}:{quote(password, safe='')}@{host}"
    url = urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, safe="/"), ""))
    setting = DatabaseSetting(url, chosen)
    if not _SCHEMA_NAME.match(chosen):
        raise UsageError(
            f"The schema {chosen!r} of database {setting.redacted()} is not a plain lower-case SQL name "
            "(letters, digits, '_')."
        )
    return setting


def resolve_database(
    cli_value: str | None,
    *,
    home: Path,
    env: Mapping[str, str] = os.environ,
    warn: Callable[[str], None] | None = None,
) -> DatabaseSetting | None:
    """``--database`` > ``PIW_DATABASE`` > ``config.toml [database]`` > ``None`` (SQLite in ``home``).

    ``warn`` hears (once) about a literal password in a URL, which is accepted but belongs in ``$NAME``.
    """
    if cli_value:
        return _with_warning(parse_url(cli_value), "--database", warn)
    from_env = env.get(DATABASE_ENV, "").strip()
    if from_env:
        return _with_warning(parse_url(from_env), DATABASE_ENV, warn)
    table = _config_table(home)
    if table is None:
        return None
    path = home / "config.toml"
    url = table.get("url")
    if not isinstance(url, str) or not url.strip():
        raise UsageError(f'The [database] table of {path} needs url = "postgresql://USER@HOST/DATABASE".')
    password = table.get("password")
    secret: str | None = None
    if password is not None:
        if not isinstance(password, str):
            raise UsageError(
                f'The [database] password in {path} must be a string such as "$PIW_DB_PASSWORD".'
            )
        match = ENV_REFERENCE.match(password)
        if match is None:
            secret = password
            if warn is not None:
                warn(f'The [database] password in {path} is written out; prefer password = "$NAME".')
        else:
            secret = env.get(match.group(1))
            if secret is None:
                raise NeedsKey(match.group(1))
    schema = table.get("schema")
    if schema is not None and not isinstance(schema, str):
        raise UsageError(f"The [database] schema in {path} must be a string.")
    setting = parse_url(url, schema=schema or None, password=secret)
    if password is None:
        _with_warning(setting, str(path), warn)
    return setting


def _with_warning(
    setting: DatabaseSetting, where: str, warn: Callable[[str], None] | None
) -> DatabaseSetting:
    if warn is not None and setting.password:
        warn(
            f"The database URL from {where} holds its password ({setting.redacted()}); prefer PGPASSWORD, a "
            'PGPASSFILE or config.toml\'s password = "$NAME".'
        )
    return setting


def _config_table(home: Path) -> dict[str, Any] | None:
    """``config.toml``'s ``[database]`` table, checked for unknown keys; ``None`` without one."""
    path = home / "config.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read {path}: {exc}") from exc
    if "database" not in text:  # (the cheap case: no table, no parse)
        return None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"Cannot parse {path}: {exc}") from exc
    table = raw.get("database")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise UsageError(f"'database' in {path} must be a table: [database] with url = \"postgresql://…\".")
    unknown = [key for key in table if key not in _TABLE_KEYS]
    if unknown:
        raise UsageError(
            f"Unknown key 'database.{unknown[0]}' in {path}; the [database] keys are {', '.join(_TABLE_KEYS)}."
        )
    return table
