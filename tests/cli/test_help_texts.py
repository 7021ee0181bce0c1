"""--help texts and error hints stand on their own: a pip-installed user has no docs/ folder, so they point to
`perfsleuth docs TOPIC` (the guides, shipped inside the package: tests/e2e/test_wheel.py) or `perfsleuth rules SLUG`."""

import re
from pathlib import Path

from click.testing import CliRunner
from perfsleuth.cli.main import main
from perfsleuth.cli.guides import topics

ROOT = Path(__file__).resolve().parents[2]


def help_text(*command) -> str:
    result = CliRunner().invoke(main, [*command, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def every_help() -> dict:
    texts = {"perfsleuth": help_text()}
    for name in main.list_commands(None):  # `run` too, loaded when asked for (cli.LazyGroup)
        texts[name] = help_text(name)
    return texts


def test_no_help_text_points_at_a_file_the_user_does_not_have():
    texts = every_help()
    assert set(texts) == {"perfsleuth", "analyze", "run", "rules", "diff", "docs"}
    for name, text in texts.items():
        # summary.md and diff.md are outputs it writes, not documents to read
        assert not re.search(r"docs/|\b(?!summary\.md|diff\.md)\w+\.md\b", text), (name, text)
    # what they point at exists
    named = {t for text in texts.values() for t in re.findall(r"perfsleuth docs ([a-z]+)", text)}
    assert named and named <= set(topics()), named
    assert "`perfsleuth docs run`" in texts["run"] and "`perfsleuth docs ci`" in texts["diff"]
    assert "perfsleuth rules SLUG" in texts["perfsleuth"]


def test_docs_lists_and_prints_the_guides():
    result = CliRunner().invoke(main, ["docs"], catch_exceptions=False)
    assert result.exit_code == 0
    users, developers = result.output.split(
        "\n\nFor perfsleuth's developers (design, measurements, tests):\n")
    # user guides first, apart from the developer docs (issue 37)
    assert [line.split(None, 1)[0] for line in users.splitlines()] == [
        "Guides:", "attribution", "ci", "compile", "efficiency", "forecast", "hta", "ranks",
        "reports", "rules", "run", "schema"]
    run = "  run           `perfsleuth run`: profile a training script without changing it"
    assert run in users.splitlines()
    assert developers.splitlines() == [
        "  accuracy      Accuracy", "  architecture  Architecture",
        "  perf          Performance on large traces",
        "  robustness    Robustness: what perfsleuth promises about bad input, and how that is "
        "kept",
        "  synth         Synthetic GPU traces (`fixtures/synth`)", "",
        "`perfsleuth docs TOPIC` prints one (Markdown); `perfsleuth rules SLUG` a rule's docs."]
    result = CliRunner().invoke(main, ["docs", "run"], catch_exceptions=False)
    assert result.exit_code == 0 and result.output == (ROOT / "docs" / "run.md").read_text(encoding="utf-8") + "\n"
    result = CliRunner().invoke(main, ["docs", "rnu"])
    assert result.exit_code == 2
    assert result.output.startswith("perfsleuth: error: no guide named 'rnu'; did you mean run? guides: accuracy, ")


def test_rule_docs_name_commands_not_files():
    """`perfsleuth rules SLUG` is where a finding's hint leads: no rule's docs send the user to a file."""
    from perfsleuth.engine.catalog import load_catalog

    slugs = [r.slug for r in load_catalog(())]
    assert len(slugs) >= 10
    for slug in slugs:
        result = CliRunner().invoke(main, ["rules", slug], catch_exceptions=False)
        assert result.exit_code == 0 and not re.search(r"docs/\w+\.md", result.output), slug


def test_every_command_line_of_the_help_is_whole():
    """`perfsleuth --help` lists each command with a description that is a whole sentence: click
    cuts a docstring's first sentence at about 45 characters ("... report (perfsleuth..."), so
    every command sets its own short help, which click prints whole (issue 37)."""
    commands = {name: main.get_command(None, name) for name in main.list_commands(None)}
    for name, command in commands.items():
        short = command.short_help
        assert short and short.endswith("."), (name, short)
        assert short.count("(") == short.count(")"), (name, short)
        assert command.get_short_help_str(limit=10) == short, name  # never cut, however narrow
    for width in (80, 60):
        listing = CliRunner().invoke(main, ["--help"], terminal_width=width,
                                     catch_exceptions=False).output
        rows = listing.split("Commands:\n", 1)[1]
        assert "..." not in rows
        joined = " ".join(rows.split())  # rows wrapped at a narrow width read as one text
        for name, command in commands.items():
            assert f"{name} {command.short_help}" in joined, (width, name, rows)
    assert set(commands) == {"analyze", "diff", "docs", "rules", "run"}
