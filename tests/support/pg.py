"""A throwaway PostgreSQL for the tests: one server per test session (per xdist worker), one schema per test.

``pg_server`` (session scope) runs ``initdb --no-sync`` and ``pg_ctl start`` on a free 127.0.0.1 port, with its
socket and data directories in a temporary directory (as root, through ``runuser -u postgres --``, since initdb
refuses root), and ``pg_ctl stop -m immediate`` at the end. The test server trades durability for start-up time
(``fsync=off``, small ``shared_buffers``): what it tests is the SQL, the locks and the clock, not the disk.
``pg_setting`` is a :class:`~piw.store.pg.setting.DatabaseSetting` on a fresh schema, dropped after the test.

Without the binaries (or psycopg) the tests that take these fixtures skip, unless ``PIW_REQUIRE_POSTGRES=1``
(``.ci/run`` sets it), where they fail instead. Registered in ``tests/conftest.py``; any test module takes them
by name. ``pg_server.secret_url()`` connects as a role that must give its password (scram), for the secrets tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from piw.store.pg.dev import find_bindir, free_port
from piw.store.pg.setting import DatabaseSetting

REQUIRE_ENV = "PIW_REQUIRE_POSTGRES"
SECRET_USER = "piw_secret"


def unavailable(why: str) -> NoReturn:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"PostgreSQL is required ({REQUIRE_ENV}=1) but {why}")
    pytest.skip(f"PostgreSQL tests need a server: {why}")


@dataclass
class PgServer:
    """One running throwaway server."""

    bindir: Path
    root: Path
    port: int = 0
    run_as: list[str] = field(default_factory=list)
    secret_password: str = field(default_factory=lambda: "pw-" + secrets.token_hex(12))

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    def url(self, user: str = "piw", password: str | None = None, database: str = "postgres") -> str:
        auth = f"{user}:{password}" if password is not None else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def secret_url(self) -> str:
        """A URL with a password in it, for a role that needs one (scram over TCP)."""
        return self.url(SECRET_USER, self.secret_password)

    def setting(self, schema: str) -> DatabaseSetting:
        return DatabaseSetting(self.url(), schema)

    def tool(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a server tool (``pg_ctl``, ``initdb``, …) as the server's owner."""
        command = [*self.run_as, str(self.bindir / name), *args]
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=60)

    def pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.tool("pg_ctl", "-D", str(self.data), *args, check=check)

    def start(self) -> None:
        self.pg_ctl("-l", str(self.root / "server.log"), "-w", "-t", "30", "start")

    def stop(self, mode: str = "immediate") -> None:
        self.pg_ctl("-m", mode, "-w", "stop", check=False)

    def durable(self) -> None:
        """Turn the test server's shortcuts off (``fsync``, ``full_page_writes``), for benchmarks whose commits
        must reach the disk."""
        self.execute("ALTER SYSTEM SET fsync = on")
        self.execute("ALTER SYSTEM SET full_page_writes = on")
        self.execute("SELECT pg_reload_conf()")

    def restart(self, mode: str = "immediate") -> None:
        """``pg_ctl restart -m MODE`` (chaos tests): every connection drops, committed rows stay."""
        self.pg_ctl("-l", str(self.root / "server.log"), "-m", mode, "-w", "-t", "30", "restart")

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One autocommit statement as the superuser (set-up and checks outside piw)."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []


def _configure(server: PgServer) -> None:
    conf = server.data / "postgresql.conf"
    with conf.open("a", encoding="utf-8") as handle:
        handle.write(
            "\n# tests/support/pg.py: a throwaway test server\n"
            "listen_addresses = '127.0.0.1'\n"
            f"port = {server.port}\n"
            f"unix_socket_directories = '{server.socket_dir}'\n"
            "fsync = off\nfull_page_writes = off\nshared_buffers = 16MB\nmax_connections = 200\n"
            "max_wal_size = 256MB\nlog_min_messages = warning\n"
        )
    hba = server.data / "pg_hba.conf"
    hba.write_text(
        f"local all all trust\nhost all {SECRET_USER} 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 trust\n",
        encoding="utf-8",
    )


def start_server() -> PgServer:
    """initdb + pg_ctl start on a free port (retried on a port taken meanwhile); the caller stops it."""
    bindir = find_bindir()
    if bindir is None:
        unavailable("initdb and pg_ctl were not found (install Debian's postgresql)")
    assert bindir is not None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[dev]')")
    root = Path(tempfile.mkdtemp(prefix="piw-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        import pwd

        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    server = PgServer(bindir, root, run_as=run_as)
    _initdb(server)
    _mkdir_owned(server.socket_dir, root)
    for attempt in range(5):
        server.port = free_port()
        _configure(server)
        try:
            server.start()
            break
        except subprocess.CalledProcessError:
            if attempt == 4:
                log = (root / "server.log").read_text(encoding="utf-8", errors="replace")[-2000:]
                shutil.rmtree(root, ignore_errors=True)
                raise RuntimeError(f"the test PostgreSQL did not start:\n{log}") from None
    server.execute(f"CREATE ROLE {SECRET_USER} LOGIN SUPERUSER PASSWORD '{server.secret_password}'")
    return server


INITDB_ARGS = ("-U", "piw", "--auth=trust", "--no-sync", "-E", "UTF8", "--no-instructions", "--wal-segsize=1")


def _initdb(server: PgServer) -> None:
    """The server's data directory: a copy of a cluster initdb made once per machine (and PostgreSQL, and these
    arguments), kept in the system temp dir; a copy costs ~0.1 s where initdb costs 1-2 s, once per xdist worker."""
    binary = server.bindir / "initdb"
    key = hashlib.sha256(f"{binary}:{binary.stat().st_mtime_ns}:{INITDB_ARGS}".encode()).hexdigest()[:12]
    template = Path(tempfile.gettempdir()) / f"piw-pg-template-{os.geteuid()}-{key}"
    owner = server.root.stat()
    with open(f"{template}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _trusted(template, owner.st_uid):
            shutil.rmtree(template, ignore_errors=True)
            template.mkdir(mode=0o700)
            os.chown(template, owner.st_uid, owner.st_gid)
            server.tool("initdb", "-D", str(template / "data"), *INITDB_ARGS)
            (template / "ready").write_text("", encoding="utf-8")
        shutil.copytree(template / "data", server.data, symlinks=True)
    for folder, _, files in os.walk(server.data):
        os.chown(folder, owner.st_uid, owner.st_gid)
        for name in files:
            os.chown(os.path.join(folder, name), owner.st_uid, owner.st_gid)


def _trusted(template: Path, uid: int) -> bool:
    """A finished template that only the server's owner could have written."""
    try:
        info = template.stat()
    except FileNotFoundError:
        return False
    return info.st_uid == uid and (info.st_mode & 0o077) == 0 and (template / "ready").is_file()


def _mkdir_owned(path: Path, like: Path) -> None:
    path.mkdir()
    info = like.stat()
    os.chown(path, info.st_uid, info.st_gid)


@contextlib.contextmanager
def throwaway_server() -> Iterator[PgServer]:
    """:func:`start_server`, stopped (``-m immediate``) and removed when the block ends (tests and ``bench/``)."""
    server = start_server()
    try:
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(server.root, ignore_errors=True)


@contextlib.contextmanager
def server_url(url: str | None = None) -> Iterator[tuple[str, PgServer | None]]:
    """``(url, None)`` for a server someone gave (``--url``), else a throwaway one's ``(url, server)``."""
    if url is not None:
        yield url, None
        return
    with throwaway_server() as server:
        yield server.url(), server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A throwaway PostgreSQL for this test session (worker): skips without binaries unless required."""
    with throwaway_server() as server:
        yield server


@pytest.fixture
def pg_setting(pg_server: PgServer) -> Iterator[DatabaseSetting]:
    """A fresh, empty schema on the test server (created by piw on first use, dropped after the test)."""
    schema = "t_" + secrets.token_hex(6)
    try:
        yield pg_server.setting(schema)
    finally:
        from piw.store.pg.connection import close_pg_databases

        close_pg_databases()
        try:  # a frozen host of a test (SIGSTOP) may still hold a lock: then the schema stays on the throwaway server
            pg_server.execute(f"SET lock_timeout = '3s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")
        except Exception as exc:
            import psycopg

            if not isinstance(exc, psycopg.errors.LockNotAvailable):
                raise
