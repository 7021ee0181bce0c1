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
    lines = result.output.splitlines()
    assert lines[0].split(None, 1) == ["accuracy", "Accuracy"]
    assert any(line.split(None, 1) == ["run", "`perfsleuth run`: profile a training script without changing it"]
               for line in lines)
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
