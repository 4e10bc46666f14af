"""Which database a command uses: ``--database`` > ``PIW_DATABASE`` > ``config.toml [database]`` > SQLite, and the
password never shown (``docs/many-machines.md``, "Choosing the database")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from piw.errors import NeedsKey, UsageError
from piw.store.pg.setting import DatabaseSetting, resolve_database

SECRET = "s3cr%t/pw"


def _config(home: Path, text: str) -> None:
    (home / "config.toml").write_text(text, encoding="utf-8")


def test_the_option_wins_over_the_environment_and_the_config(piw_home: Path) -> None:
    _config(piw_home, '[database]\nurl = "postgresql://cfg@db.example/piw"\n')
    env = {"PIW_DATABASE": "postgresql://env@db.example/piw"}
    chosen = resolve_database("postgresql://cli@db.example/piw", home=piw_home, env=env)
    assert chosen is not None and chosen.url == "postgresql://cli@db.example/piw"
    from_env = resolve_database(None, home=piw_home, env=env)
    assert from_env is not None and from_env.url == "postgresql://env@db.example/piw"
    from_config = resolve_database(None, home=piw_home, env={})
    assert from_config is not None and from_config.url == "postgresql://cfg@db.example/piw"
    assert from_config.schema == "piw"


def test_no_database_anywhere_means_sqlite(piw_home: Path) -> None:
    assert resolve_database(None, home=piw_home, env={}) is None
    _config(piw_home, 'default = "scripted"\n')
    assert resolve_database(None, home=piw_home, env={"PIW_DATABASE": ""}) is None


def test_the_config_password_is_read_from_the_named_variable_and_never_shown(piw_home: Path) -> None:
    _config(
        piw_home,
        '[database]\nurl = "postgresql://piw@db.example:5433/runs?sslmode=require"\n'
        'password = "$PIW_DB_PASSWORD"\nschema = "team"\n',
    )
    setting = resolve_database(None, home=piw_home, env={"PIW_DB_PASSWORD": SECRET})
    assert setting is not None and setting.schema == "team" and setting.password == SECRET
    shown = [setting.redacted(), repr(setting), str(setting), f"{setting}"]
    assert all(SECRET not in text and "s3cr" not in text for text in shown)
    assert setting.redacted() == "postgresql://piw:***@db.example:5433/runs?sslmode=require&schema=team"
    with pytest.raises(NeedsKey) as missing:
        resolve_database(None, home=piw_home, env={})
    assert "PIW_DB_PASSWORD" in str(missing.value)


def test_a_password_in_the_url_is_accepted_with_a_warning_and_redacted(piw_home: Path) -> None:
    warnings: list[str] = []
    setting = resolve_database(
        "postgresql://ada:hunter22@db.example/piw?schema=s1&password=hunter22", home=piw_home, env={},
        warn=warnings.append,
    )  # fmt: skip
    assert setting is not None and setting.schema == "s1" and "schema" not in setting.url
    assert setting.redacted() == "postgresql://ada:***@db.example/piw?password=***&schema=s1"
    assert len(warnings) == 1 and "hunter22" not in warnings[0] and "***" in warnings[0]
    assert setting.scrub("auth failed for hunter22") == "auth failed for ***"


def test_bad_settings_are_one_line_errors_without_the_password(piw_home: Path) -> None:
    with pytest.raises(UsageError, match="not a PostgreSQL URL") as bad:
        resolve_database("mysql://ada:hunter22@db/piw", home=piw_home, env={})
    assert "hunter22" not in str(bad.value)
    with pytest.raises(UsageError, match="schema"):
        resolve_database("postgresql://ada@db/piw?schema=Bad-Name", home=piw_home, env={})
    _config(piw_home, '[database]\nurl = "postgresql://ada@db/piw"\npasword = "$X"\n')
    with pytest.raises(UsageError, match=r"database\.pasword"):
        resolve_database(None, home=piw_home, env={})


def test_the_provider_config_accepts_the_database_table(piw_home: Path) -> None:
    from piw.config.settings import load_config

    _config(piw_home, '[database]\nurl = "postgresql://ada@db/piw"\npassword = "$PW"\nschema = "x"\n')
    assert load_config(piw_home).database is not None


def test_importing_piw_and_resolving_sqlite_loads_no_driver(tmp_path: Path) -> None:
    code = (
        "import sys, pathlib; import piw.cli.main; from piw.store.pg.setting import resolve_database; "
        "assert resolve_database(None, home=pathlib.Path(sys.argv[1]), env={}) is None; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_setting_compares_and_hashes_by_value() -> None:
    assert DatabaseSetting("postgresql://a@h/d", "s") == DatabaseSetting("postgresql://a@h/d", "s")
