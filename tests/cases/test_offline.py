"""``piw test record`` and ``piw test``: a real run of the triage example as a case, replayed offline and graded."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from piw.testing import OpenAIStub
from tests.support.cases import edit, recorded_triage, triage_project
from tests.support.cli import Cli
from tests.support.paths import REPO


def _configure(home: Path, stub: OpenAIStub) -> None:
    """The stub as the default provider: a case that asked any model would reach it."""
    (home / "config.toml").write_text(
        f'default = "stub/stub-model"\n[providers.stub]\nbase_url = "{stub.base_url}"\nmodels = ["stub-model"]\n',
        encoding="utf-8",
    )


def test_a_recorded_triage_run_passes_offline_with_no_model_request(
    cli: Cli, openai_stub: OpenAIStub
) -> None:
    _configure(cli.home, openai_stub)
    case = recorded_triage(cli)

    done = cli("test")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS   bug" in done.stdout
    assert "1 case: 1 passed, 0 failed, 0 broken" in done.stdout
    assert openai_stub.request_count == 0
    files = sorted(path.name for path in case.iterdir())
    assert files == ["case.json", "expected.json", "replies.ndjson"]
    for path in case.iterdir():  # plain files, no absolute path of this machine
        text = path.read_text(encoding="utf-8")
        assert str(cli.cwd) not in text and str(cli.home) not in text
    described = json.loads((case / "case.json").read_text())
    assert described["workflow"] == {"path": "workflows/triage.workflow.py"}
    expected = json.loads((case / "expected.json").read_text())
    assert expected["route"] == ["classify", "bug"]
    assert expected["nodes"]["classify"]["output"] == {"route": "bug", "reason": "Saving crashes the app."}
    steps = [json.loads(line) for line in (case / "replies.ndjson").read_text().splitlines()]
    assert [step["node"] for step in steps] == ["classify", "bug"]
    assert "<attemptId>" in steps[0]["prompt"]


def test_an_edited_prompt_fails_the_case_with_a_prompt_diff_naming_the_step(cli: Cli) -> None:
    recorded_triage(cli)
    edit(cli.cwd / "workflows" / "triage.workflow.py", "Write a short reply", "Write a friendly reply")

    done = cli("test")

    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL   bug" in done.stdout
    assert "prompt drift of bug:" in done.stdout
    assert "-Write a short reply for the reporter." in done.stdout
    assert "+Write a friendly reply for the reporter." in done.stdout
    assert "prompt drift of classify" not in done.stdout


def test_a_changed_node_definition_is_reported_by_name(cli: Cli) -> None:
    recorded_triage(cli)
    edit(cli.cwd / "workflows" / "triage.workflow.py", "Drafting a reply", "Writing the answer")

    done = cli("test")

    assert done.returncode == 1
    assert "definition drift:" in done.stdout and "changed: bug" in done.stdout


def _reword(case: Path) -> None:
    """The model's replies say the same thing in other words (fields still valid)."""
    edit(case / "replies.ndjson", "Saving crashes the app.", "The app dies on save.")
    edit(case / "replies.ndjson", "Thanks for the report!", "Thank you for writing in!")


def test_a_schema_expectation_passes_when_the_wording_changes(cli: Cli) -> None:
    case = recorded_triage(cli)
    _reword(case)
    expected = json.loads((case / "expected.json").read_text())
    for node in ("classify", "bug"):
        expected["nodes"][node]["expect"] = "schema"
    (case / "expected.json").write_text(json.dumps(expected, indent=2))

    assert cli("test").returncode == 0


def test_an_exact_expectation_fails_on_the_same_wording_with_a_structural_diff(cli: Cli) -> None:
    case = recorded_triage(cli)
    _reword(case)

    done = cli("test")

    assert done.returncode == 1
    assert "output of classify:" in done.stdout
    assert '$.reason: expected "Saving crashes the app.", got "The app dies on save."' in done.stdout
    assert "final output:" in done.stdout


def test_a_check_function_in_the_workflow_folder_grades_a_node(cli: Cli) -> None:
    case = recorded_triage(cli)
    (cli.cwd / "workflows" / "checks.py").write_text(
        "def polite(output, expected):\n    return None if 'Thank' in output else 'the reply does not thank'\n"
    )
    expected = json.loads((case / "expected.json").read_text())
    expected["nodes"]["bug"] = {"expect": "check", "check": "checks.py:polite"}
    (case / "expected.json").write_text(json.dumps(expected, indent=2))
    assert cli("test").returncode == 0

    edit(case / "replies.ndjson", "Thanks for the report!", "Noted.")
    done = cli("test")
    assert done.returncode == 1
    assert "checks.py:polite: the reply does not thank" in done.stdout


def test_junit_output_parses_as_junit_xml(cli: Cli) -> None:
    recorded_triage(cli, "bug")
    failing = recorded_triage(cli, "reworded")
    _reword(failing)

    done = cli("test", "--junit", "out/junit.xml", "-j", "2")

    assert done.returncode == 1, done.stdout + done.stderr
    root = ElementTree.parse(cli.cwd / "out" / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    cases = {element.get("name"): element for element in suite.iter("testcase")}
    assert set(cases) == {"bug", "reworded"}
    assert cases["bug"].find("failure") is None
    failure = cases["reworded"].find("failure")
    assert failure is not None and "output of classify" in (failure.get("message") or "")


def test_broken_cases_exit_2_while_the_others_still_run(cli: Cli) -> None:
    recorded_triage(cli, "bug")
    bad_field = recorded_triage(cli, "bad-field")
    expected = json.loads((bad_field / "expected.json").read_text())
    expected["nodes"]["bug"]["expect"] = "roughly"
    (bad_field / "expected.json").write_text(json.dumps(expected))
    missing = recorded_triage(cli, "missing-workflow")
    edit(missing / "case.json", "workflows/triage.workflow.py", "workflows/gone.workflow.py")
    short = recorded_triage(cli, "short")
    (short / "replies.ndjson").write_text((short / "replies.ndjson").read_text().splitlines()[0] + "\n")

    done = cli("test", "--json")

    assert done.returncode == 2, done.stderr
    report = json.loads(done.stdout)
    verdicts = {case["name"]: (case["verdict"], case["broken"]) for case in report["cases"]}
    assert verdicts["bug"] == ("pass", None)
    assert verdicts["bad-field"][0] == "broken"
    assert verdicts["bad-field"][1].startswith("piw-tests/bad-field/expected.json: nodes.bug.expect: ")
    assert verdicts["missing-workflow"][1].startswith("piw-tests/missing-workflow/case.json: workflow.path: ")
    assert verdicts["short"][1].startswith("piw-tests/short/replies.ndjson: node bug: ")
    assert all("\n" not in (broken or "") for _, broken in verdicts.values())
    assert (report["passed"], report["failed"], report["broken"]) == (1, 0, 3)


def test_accept_rerecords_a_failing_case_after_showing_the_diff(cli: Cli) -> None:
    recorded_triage(cli)
    edit(cli.cwd / "workflows" / "triage.workflow.py", "Write a short reply", "Write a friendly reply")

    accepted = cli("test", "--accept")

    assert accepted.returncode == 1
    assert "+Write a friendly reply" in accepted.stdout
    assert "Accepted: re-recorded the expectations of bug" in accepted.stdout
    again = cli("test")
    assert again.returncode == 0, again.stdout


def test_record_refuses_an_unknown_run_and_test_an_empty_folder(cli: Cli) -> None:
    unknown = cli("test", "record", "nope")
    assert unknown.returncode == 2 and unknown.stderr.startswith("Error: ")
    (cli.cwd / "piw-tests").mkdir()
    empty = cli("test")
    assert empty.returncode == 2 and "No test cases" in empty.stderr
    for wrong, says in (
        (("--provider", "x"), "apply to 'piw test --live'"),
        (("--name", "x"), "options of 'piw test record RUN'"),
        (("--live", "--provider", "x", "-j", "2"), "leave out -j"),
    ):
        misused = cli("test", *wrong)
        assert misused.returncode == 2 and says in misused.stderr, wrong


def test_a_built_in_workflow_is_recorded_by_id_and_revision_and_replays(cli: Cli) -> None:
    source = REPO / "workflows" / "builtins" / "plain-summary.input.json"
    ran = cli("run", "plain-summary", "--provider", "scripted", "--input", f"@{source}", "--json")
    assert ran.returncode == 0, ran.stderr
    assert cli("test", "record", "latest", "--name", "summary").returncode == 0
    case = json.loads((cli.cwd / "piw-tests" / "summary" / "case.json").read_text())
    assert case["workflow"]["builtin"] == "plain-summary" and case["workflow"]["revision"]

    edit(
        cli.cwd / "piw-tests" / "summary" / "case.json",
        f'"revision": "{case["workflow"]["revision"]}"',
        '"revision": "0"',
    )
    done = cli("test")
    assert done.returncode == 1
    assert "built-in plain-summary is at revision" in done.stdout and "recorded at revision 0" in done.stdout


def test_a_configured_secret_in_the_run_never_enters_the_case(cli: Cli) -> None:
    secret = "sk-live-7f3a9c2e4b1d8f6a"
    (cli.home / "config.toml").write_text(
        '[providers.paid]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "$PAID_KEY"\nmodels = ["m"]\n'
    )
    env = {"PAID_KEY": secret}
    triage_project(cli)
    ran = cli(
        "run",
        "workflows/triage.workflow.py",
        "--provider",
        "scripted",
        "--input",
        json.dumps({"text": f"It crashes; my key is {secret}"}),
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    recorded = cli("test", "record", "latest", "--name", "secret", env=env)

    assert recorded.returncode == 0, recorded.stderr
    for path in (cli.cwd / "piw-tests" / "secret").iterdir():
        assert secret not in path.read_text(encoding="utf-8")
    assert cli("test", env=env).returncode == 0


def test_a_changed_reply_text_is_shown_as_a_line_diff(cli: Cli) -> None:
    case = recorded_triage(cli)
    edit(
        case / "replies.ndjson",
        "Thanks for the report! We can reproduce",
        "Thanks for the report!\\nWe are sorry about the crash, it is a known problem.\\nWe can reproduce",
    )

    done = cli("test")

    assert done.returncode == 1
    assert "output of bug:" in done.stdout and "$: the text differs:" in done.stdout
    assert "+We are sorry about the crash, it is a known problem." in done.stdout


def test_a_nested_test_folder_finds_the_project_by_its_pyproject(cli: Cli) -> None:
    triage_project(cli)
    (cli.cwd / "pyproject.toml").write_text('[project]\nname = "mine"\n')
    assert cli("run", "workflows/triage.workflow.py", "--provider", "scripted").returncode == 0

    recorded = cli("test", "record", "latest", "--name", "bug", "--dir", "tests/piw")

    assert recorded.returncode == 0, recorded.stderr
    case = json.loads((cli.cwd / "tests" / "piw" / "bug" / "case.json").read_text())
    assert case["workflow"] == {"path": "workflows/triage.workflow.py"}
    assert cli("test", "tests/piw").returncode == 0


LOOP = """
from piw import agent, compute, define_workflow, edge, switch

workflow = define_workflow(
    name="loop",
    start_at="draft",
    nodes={
        "draft": agent(prompt=lambda ctx: f"Draft {len(ctx.results)}", expected_output="a word"),
        "count": compute(lambda ctx: {"again": ctx.outputs["draft"] == "first"}),
        "done": compute(lambda ctx: {"last": ctx.outputs["draft"]}),
    },
    edges=[edge("draft", "count"), switch("count", on="$.again", cases={"true": "draft", "false": "done"})],
)
"""


def test_a_step_visited_twice_replays_its_visits_in_order(cli: Cli) -> None:
    folder = cli.cwd / "workflows"
    folder.mkdir(parents=True)
    (folder / "loop.workflow.py").write_text(LOOP)
    (folder / "loop.replies.json").write_text(
        json.dumps({"draft": [{"submit": "first"}, {"submit": "second"}]})
    )
    assert cli("run", "workflows/loop.workflow.py", "--provider", "scripted").returncode == 0
    assert cli("test", "record", "latest", "--name", "loop").returncode == 0
    case = cli.cwd / "piw-tests" / "loop"
    lines = (case / "replies.ndjson").read_text().splitlines()
    assert [json.loads(line)["node"] for line in lines] == ["draft", "draft"]
    assert json.loads((case / "expected.json").read_text())["route"] == [
        "draft",
        "count",
        "draft",
        "count",
        "done",
    ]
    assert cli("test").returncode == 0

    (case / "replies.ndjson").write_text(lines[0] + "\n")
    done = cli("test")
    assert done.returncode == 2
    assert (
        "piw-tests/loop/replies.ndjson: node draft: no recorded reply left for visit 2 of this step"
        in done.stdout
    )


def test_replays_copy_an_empty_run_database_kept_in_the_home_and_remake_a_bad_one(cli: Cli) -> None:
    recorded_triage(cli)
    assert cli("test").returncode == 0
    (template,) = (cli.home / "cache").glob("piw-test-home-*.sqlite")

    template.write_bytes(b"not a database")  # damaged (or left by another piw): ignored and made again
    again = cli.process("test")  # a new process looks the template up again
    assert again.returncode == 0, again.stdout + again.stderr
    assert template.read_bytes().startswith(b"SQLite format 3")


MODULES_AFTER = (
    "import contextlib, io, json, sys\n"
    "from piw.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
    "    main(sys.argv[1:])\n"
    "print(json.dumps(sorted(sys.modules)))\n"
)


def test_an_offline_replay_does_not_import_the_config_layer(cli: Cli) -> None:
    """An offline case asks no provider, so ``piw test`` never reads ``config.toml``: the config models (every
    table of ``PiwConfig``) are not imported (``docs/testing.md``; the time is ``bench/bench_piw_test.py``'s)."""
    recorded_triage(cli)
    done = subprocess.run(
        [sys.executable, "-c", MODULES_AFTER, "test"],
        cwd=cli.cwd,
        env=cli.environment(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    modules = set(json.loads(done.stdout.splitlines()[-1]))
    assert "piw.cases.suite" in modules and "piw.run.engine" in modules  # the case ran
    assert not {"piw.config.settings", "piw.providers.selection", "piw.config.channels"} & modules
