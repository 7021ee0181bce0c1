"""The rule engine: schema validation at load time, unknown facts rejected, sandboxed expressions,
threshold overrides (--set, [tool.perfsleuth]), user rule files, ordering, the CLI and the docs."""

import importlib.resources
import json
import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main
from perfsleuth.config import Config
from perfsleuth.engine.catalog import DOC_SECTIONS, TABLES, RuleError, apply_overrides, load_catalog, parse_rule_file
from perfsleuth.engine.docs import GENERATED_BEGIN, GENERATED_END, catalog_markdown
from perfsleuth.engine.evaluate import evaluate
from perfsleuth.engine.settings import parse_sets, project_settings, rule_settings
from perfsleuth.errors import UsageError
from perfsleuth.facts.core import FACTS, Facts
from rule_files import RULE
from tracebuilder_rules import RuleTraceBuilder, analyze, fired

ROOT = Path(__file__).resolve().parents[2]
REQUIRED_SLUGS = {"num-workers", "dataloader-slow", "pin-memory", "non-blocking", "item-sync", "amp", "cuda-graphs",
                  "zero-grad", "cudnn-benchmark", "channels-last", "exposed-communication", "step-outliers",
                  "fused-optimizer"}


def load_text(text, source="user.toml"):
    return parse_rule_file(text, source)


def test_builtin_catalog_has_the_contract_slugs():
    slugs = [r.slug for r in load_catalog()]
    assert len(slugs) == len(set(slugs))
    assert REQUIRED_SLUGS <= set(slugs)


@pytest.mark.parametrize("rule", load_catalog(), ids=lambda r: r.slug)
def test_builtin_rule_docs_are_complete(rule):
    for section in DOC_SECTIONS:
        assert rule.docs[section], section
    assert all(ref.startswith("https://") for ref in rule.docs["references"])
    for name in rule.thresholds:  # every threshold is explained in the Thresholds section
        assert f"`{name}`" in rule.docs["thresholds"], name
    assert "```python" in rule.fix or "```python" in rule.compiled["fix"].render(
        **{**{k: 0 for k in FACTS}, **rule.thresholds, "optimizer_name": "SGD", "sync_sites": []})
    assert rule.source.startswith("rules/") and rule.source.endswith(".toml")


BUILTIN_RULE_FILES = sorted((p for p in importlib.resources.files("perfsleuth.rules").iterdir() if p.name.endswith(".toml")),
                            key=lambda p: p.name)


@pytest.mark.parametrize("path", BUILTIN_RULE_FILES, ids=lambda p: p.name)
def test_builtin_rule_files_pass_every_check_a_user_rule_file_gets(path):
    """The built-in catalog loads without parsing each expression for unknown names and forbidden
    constructs (engine/catalog.py: that cost 0.3 s of every analysis); this holds it to those checks,
    and to compiling every expression and template."""
    assert len(BUILTIN_RULE_FILES) >= 8
    checked = parse_rule_file(path.read_text(encoding="utf-8"), f"rules/{path.name}", check=True)
    lazy = {r.slug: r for r in parse_rule_file(path.read_text(encoding="utf-8"), f"rules/{path.name}", check=False)}
    assert checked and [r.slug for r in checked] == list(lazy)
    for rule in checked:
        assert set(rule.compiled) == {"condition", "saving_us", "applies", "severity_when", "message", "fix"}
        assert not lazy[rule.slug].compiled  # nothing compiled until used
        names = {**{k: 0 for k in FACTS}, **{t: [] for t in TABLES}, **rule.thresholds, "optimizer_name": "SGD"}
        assert lazy[rule.slug].compiled["message"].render(**names) == rule.compiled["message"].render(**names)


def test_valid_user_rule_loads():
    (rule,) = load_text(RULE)
    assert rule.slug == "my-rule" and rule.thresholds == {"max_kernels": 2}
    assert rule.severity_when == (("high", "kernels_per_step >= 10 * max_kernels"),)


@pytest.mark.parametrize("old, new, problem", [
    ("kernels_per_step >= max_kernels", "kernel_per_step >= max_kernels", "condition names unknown fact(s) kernel_per_step"),
    ("host_us_per_step / 2", "host_us / 2", "saving_us names unknown fact(s) host_us"),
    ('"{{ kernels_per_step | num }} kernels', '"{{ kernelz | num }} kernels', "message names unknown fact(s) kernelz"),
    ('evidence = ["kernels_per_step"]', 'evidence = ["kernelz"]', "evidence names unknown fact(s) kernelz"),
    ("10 * max_kernels", "10 * max_kernel", "severity_when.high names unknown fact(s) max_kernel"),
    ('severity = "low"', 'severity = "critical"', "severity 'critical' is not one of low, medium, high"),
    ('category = "host"', 'category = "gpu"', "category 'gpu' is not one of dataloader, kernel"),
    ('slug = "my-rule"', 'slug = "My_Rule"', "slug 'My_Rule' is not lowercase-with-dashes"),
    ('title = "Too many kernels"\n', 'title = "x"\ncolour = "red"\n', "unknown key(s) colour"),
    ('saving_basis = "half the host time"\n', "", "missing required key 'saving_basis'"),
    ('why = "y"\n', "", "docs lack section(s) why"),
    ('example = "e"\n', 'example = ""\n', "docs lack section(s) example"),
    ('references = ["https://example.org"]', 'references = "https://example.org"', "docs.references must be a list"),
    ("max_kernels = 2", 'max_kernels = "two"', "threshold 'max_kernels' must be a snake_case name with a number"),
    ("max_kernels = 2", "max_kernels = 2\nsteps = 3", "threshold 'steps' shadows a fact"),
    ("kernels_per_step >= max_kernels", "kernels_per_step >=", "condition does not compile"),
    ('evidence = ["kernels_per_step"]', 'evidence = ["kernels_per_step"]\nlocations = "where"',
     "locations names unknown evidence table 'where'"),
    ('severity_when = { high', 'severity_when = { urgent', "severity_when key 'urgent' is not one of"),
])
def test_schema_errors(old, new, problem):
    assert old in RULE
    with pytest.raises(RuleError) as err:
        load_text(RULE.replace(old, new))
    assert str(err.value).startswith("user.toml: rule 'my-rule': ") or "user.toml" in str(err.value)
    assert problem in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text, problem", [("[[rule]\n", "not valid TOML"), ("family = 'x'\n", "no [[rule]] tables"),
                                           ("rules = 1\n", "unknown top-level key(s) rules")])
def test_file_errors(text, problem):
    with pytest.raises(RuleError, match=re.escape(problem)):
        load_text(text)


def test_sandbox_refuses_python_internals(caplog):
    (rule,) = load_text(RULE.replace("kernels_per_step >= max_kernels",
                                     "steps.__class__.__mro__[1].__subclasses__() != []"))
    facts = Facts(values={k: 0 for k in FACTS})
    with caplog.at_level(logging.WARNING, logger="perfsleuth.engine.evaluate"):
        assert evaluate([rule], facts) == []
    assert "rule my-rule: condition could not be evaluated" in caplog.text


def test_a_rule_that_fails_on_one_trace_is_skipped_with_a_warning(caplog):
    (rule,) = load_text(RULE.replace("kernels_per_step >= max_kernels", "1 / steps > 0"))
    with caplog.at_level(logging.WARNING, logger="perfsleuth.engine.evaluate"):
        assert evaluate([rule], Facts(values={k: 0 for k in FACTS})) == []
    assert "ZeroDivisionError" in caplog.text


def test_evaluate_builds_findings_ordered_by_saving():
    """Without a replay neither finding has a number: both keep the rule's severity, at most medium
    (severity_when says high), and rank by their ceilings."""
    (a,) = load_text(RULE)
    (b,) = load_text(RULE.replace("my-rule", "other-rule").replace("host_us_per_step / 2", "host_us_per_step"))
    facts = Facts(values={**{k: 0 for k in FACTS}, "kernels_per_step": 25, "host_us_per_step": 400.0,
                          "step_us": 1000.0})
    first, second = evaluate([a, b], facts)
    assert (first["rule"], second["rule"]) == ("other-rule", "my-rule")
    assert second == {"rule": "my-rule", "title": "Too many kernels", "category": "host", "severity": "medium",
                      "severity_from": "rule",
                      "ceiling": {"saving_us": 200.0, "speedup": 1.25, "basis": "half the host time"},
                      "message": "25 kernels per step", "evidence": {"kernels_per_step": 25},
                      "thresholds": {"max_kernels": 2}, "fix": "Before:\n```python\na\n```", "locations": [],
                      "docs": "perfsleuth rules my-rule",
                      "forecast": {"kind": "none", "speedup": None, "saving_us": None, "low": None, "high": None,
                                   "model": None, "assumptions": {}, "reason": "evaluated without a replay"}}
    assert first["ceiling"]["speedup"] == round(1000 / 600, 3)
    for gone in ("estimated_saving_us", "estimated_speedup", "saving_basis", "bound"):
        assert gone not in first


def test_saving_is_capped_at_the_step():
    (rule,) = load_text(RULE.replace("host_us_per_step / 2", "step_us * 3"))
    (f,) = evaluate([rule], Facts(values={**{k: 0 for k in FACTS}, "kernels_per_step": 5, "step_us": 1000.0}))
    assert f["ceiling"]["saving_us"] == 1000.0 and f["ceiling"]["speedup"] is None


@pytest.mark.parametrize("expr", ["'lots'", "step_us * (0 - 1)", "none", "[1, 2]"])
def test_odd_savings_count_as_zero_or_are_clamped(expr):
    (rule,) = load_text(RULE.replace("host_us_per_step / 2", expr))
    (f,) = evaluate([rule], Facts(values={**{k: 0 for k in FACTS}, "kernels_per_step": 5, "step_us": 1000.0}))
    assert f["ceiling"]["saving_us"] == 0.0 and f["ceiling"]["speedup"] == 1.0


def test_overrides():
    rules = load_catalog(overrides={"num-workers.min_share": 0.2, "item-sync.min_calls_per_step": 3})
    by = {r.slug: r for r in rules}
    assert by["num-workers"].thresholds["min_share"] == 0.2
    assert by["item-sync"].thresholds["min_calls_per_step"] == 3
    assert {r.slug: r for r in load_catalog()}["num-workers"].thresholds["min_share"] == 0.05  # defaults untouched


@pytest.mark.parametrize("key, value, problem", [
    ("nope.min_share", 0.1, "no rule 'nope'"), ("num-workers.min_shar", 0.1, "rule 'num-workers' has high_share, min_share"),
    ("num-workers.min_share", "lots", "must be a number"), ("num-workers.min_share", True, "must be a number"),
    ("min_share", 0.1, "no rule ''")])
def test_bad_overrides(key, value, problem):
    with pytest.raises(UsageError, match=re.escape(problem)):
        apply_overrides(load_catalog(), {key: value})


def test_parse_sets():
    assert parse_sets(["num-workers.min_share=0.05", " amp.min_capability = 8 "]) == {
        "num-workers.min_share": 0.05, "amp.min_capability": 8}
    assert parse_sets(["num-workers.min_share=abc"]) == {"num-workers.min_share": "abc"}
    for bad in ("num-workers.min_share", "min_share=1", "num-workers.min_share="):
        with pytest.raises(UsageError, match="RULE.THRESHOLD=VALUE"):
            parse_sets([bad])


def test_pyproject_settings_dotted_and_nested(tmp_path):
    (tmp_path / "pyproject.toml").write_text('''
[tool.perfsleuth]
rules = ["perf_rules"]
[tool.perfsleuth.thresholds]
"num-workers.min_share" = 0.07
[tool.perfsleuth.thresholds.item-sync]
min_calls_per_step = 4
''')
    paths, thresholds = project_settings(tmp_path / "pyproject.toml")
    assert paths == [str(tmp_path / "perf_rules")]
    assert thresholds == {"num-workers.min_share": 0.07, "item-sync.min_calls_per_step": 4}


def test_rule_settings_merge_pyproject_rules_and_sets(tmp_path):
    (tmp_path / "extra.toml").write_text(RULE)
    (tmp_path / "pyproject.toml").write_text('[tool.perfsleuth]\nrules = "extra.toml"\n'
                                             '[tool.perfsleuth.thresholds]\n"my-rule.max_kernels" = 5\n'
                                             '"amp.min_gemm_share" = 0.2\n')
    s = rule_settings(sets=["my-rule.max_kernels=7"], pyproject=tmp_path / "pyproject.toml")
    assert s == {"rule_paths": (str(tmp_path / "extra.toml"),),
                 "thresholds": {"my-rule.max_kernels": 7, "amp.min_gemm_share": 0.2}}
    with pytest.raises(UsageError, match="unknown key"):
        (tmp_path / "pyproject.toml").write_text("[tool.perfsleuth]\nrule = 'x'\n")
        rule_settings(pyproject=tmp_path / "pyproject.toml")


def test_user_rule_files_and_folders(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.toml").write_text(RULE)
    assert "my-rule" in {r.slug for r in load_catalog([tmp_path / "mine"])}
    (tmp_path / "dup.toml").write_text(RULE.replace("my-rule", "amp"))
    with pytest.raises(RuleError, match="rule 'amp' is already defined in rules/kernel.toml"):
        load_catalog([tmp_path / "dup.toml"])
    with pytest.raises(RuleError, match="no such rule file or directory"):
        load_catalog([tmp_path / "missing.toml"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuleError, match="holds no"):
        load_catalog([tmp_path / "empty"])


def test_user_rule_fires_in_an_analysis(tmp_path):
    (tmp_path / "mine.toml").write_text(RULE)
    tb = RuleTraceBuilder()
    tb.step(1, 0, 1000)
    for k in range(3):
        tb.launch("k", host=(k * 10, 5), device=(100 + k * 100, 50))
    report, _ = analyze(tb, tmp_path, Config(rule_paths=(str(tmp_path / "mine.toml"),)))
    assert fired(report)["my-rule"]["message"] == "3 kernels per step"
    report, _ = analyze(tb, tmp_path, Config(rule_paths=(str(tmp_path / "mine.toml"),),
                                             thresholds={"my-rule.max_kernels": 4}), name="b.json")
    assert "my-rule" not in fired(report)


# --- CLI -------------------------------------------------------------------------------------------
def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_rules_lists_the_catalog():
    r = invoke("rules")
    assert r.exit_code == 0
    for slug in REQUIRED_SLUGS:
        assert re.search(rf"^{re.escape(slug)}\s", r.output, re.M), slug


def test_cli_rules_slug_prints_the_docs():
    r = invoke("rules", "item-sync")
    assert r.exit_code == 0
    for title in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Thresholds",
                  "## References", "## Condition"):
        assert title in r.output
    assert "--set item-sync.min_share=0.002" in r.output


def test_cli_errors_are_one_line_exit_2(tmp_path, real_traces):
    trace = str(real_traces / "a100_cuda_event_sync.json.gz")
    bad = tmp_path / "bad.toml"
    bad.write_text(RULE.replace("kernels_per_step >= max_kernels", "kernelz > 1"))
    for args, msg in [(("rules", "nope"), "no rule 'nope'"),
                      (("analyze", trace, "--set", "item-sync.nope=1"), "unknown threshold 'item-sync.nope'"),
                      (("analyze", trace, "--set", "oops"), "--set expects RULE.THRESHOLD=VALUE"),
                      (("analyze", trace, "--rules", str(bad)), "condition names unknown fact(s) kernelz")]:
        r = CliRunner().invoke(main, list(args))
        assert r.exit_code == 2, args
        assert r.output.count("\n") == 1 and msg in r.output and "Traceback" not in r.output


def _item_that_waits(path: Path) -> str:
    """One step whose `.item()` waits on a busy device and drains it: item-sync fires (high)."""
    tb = RuleTraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("k1", host=(0, 5), device=(10, 300))  # [10, 310)
    tb.op("aten::item", 100, 220)
    tb.op("aten::_local_scalar_dense", 101, 218)
    tb.copy("Memcpy DtoH (Device -> Pageable)", host=(102, 216), device=(311, 1), nbytes=4)
    tb.launch("k2", host=(500, 5), device=(510, 400))
    return str(tb.write(path))


def test_cli_set_and_pyproject_change_what_fires(tmp_path, monkeypatch):
    trace = _item_that_waits(tmp_path / "t.json.gz")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    assert invoke("analyze", trace, "--json", str(out)).exit_code == 0
    assert [f["rule"] for f in json.loads(out.read_text())["findings"]] == ["item-sync"]
    assert invoke("analyze", trace, "--json", str(out), "--force", "--set", "item-sync.min_share=0.5").exit_code == 0
    assert json.loads(out.read_text())["findings"] == []
    (tmp_path / "pyproject.toml").write_text('[tool.perfsleuth.thresholds.item-sync]\nmin_calls_per_step = 2\n')
    assert invoke("analyze", trace, "--json", str(out), "--force").exit_code == 0
    assert json.loads(out.read_text())["findings"] == []


def test_docs_rules_md_is_generated_from_the_catalog():
    text = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    start, end = text.index(GENERATED_BEGIN), text.index(GENERATED_END) + len(GENERATED_END)
    assert text[start:end] + "\n" == catalog_markdown(load_catalog()), (
        "docs/rules.md is stale: regenerate with `perfsleuth rules --markdown`")


def _f(rule, severity="medium", ceiling=0.0, forecast=None, saving=None, verified=None, verified_saving=None):
    """A finding dict as the engine makes it, before `rate`: the rule's severity, a ceiling, maybe numbers."""
    f = {"rule": rule, "severity": severity, "ceiling": {"saving_us": ceiling, "speedup": None, "basis": "b"},
         "forecast": {"speedup": forecast, "saving_us": saving, "low": None, "high": None}}
    if verified is not None:
        f["verified"] = {"speedup": verified, "low": verified, "high": verified, "saving_us": verified_saving,
                         "pairs": 3}
    return f


@pytest.mark.parametrize("speedup, severity", [(1.2499, "medium"), (1.25, "high"), (1.0499, "low"), (1.05, "medium"),
                                               (0.8, "low"), (3.0, "high")])
def test_severity_follows_the_forecast_at_the_thresholds(speedup, severity):
    from perfsleuth.engine.evaluate import rate

    for rule_says in ("low", "medium", "high"):  # the rule's own severity does not matter once there is a number
        f = rate(_f("x", rule_says, forecast=speedup, saving=100.0))
        assert (f["severity"], f["severity_from"]) == (severity, "forecast")


def test_a_measurement_decides_severity_over_the_forecast():
    from perfsleuth.engine.evaluate import order, rate

    f = rate(_f("num-workers", "high", forecast=1.66, saving=400.0))
    assert (f["severity"], f["severity_from"]) == ("high", "forecast")
    f["verified"] = {"speedup": 0.63, "low": 0.6, "high": 0.66, "saving_us": -590.0, "pairs": 3, "outcome": "slower"}
    (f,) = order([f])  # helper verify attaches `verified`, then calls order(): the severity follows it
    assert (f["severity"], f["severity_from"]) == ("low", "measured")
    f["verified"].update(speedup=1.02, saving_us=20.0)  # <= NO_GAIN: no gain, low
    assert rate(f)["severity"] == "low"
    f["verified"].update(speedup=1.41, saving_us=290.0)
    assert (rate(f)["severity"], f["severity_from"]) == ("high", "measured")


def test_without_a_number_the_rule_severity_is_capped_at_medium():
    from perfsleuth.engine.evaluate import rate

    for said, shown in (("high", "medium"), ("medium", "medium"), ("low", "low")):
        f = rate(_f("exposed-communication", said, ceiling=30_000.0))
        assert (f["severity"], f["severity_from"]) == (shown, "rule")
        assert rate(f)["severity"] == shown  # idempotent
    unreliable = _f("tiny-ops", "high", ceiling=5000.0)
    unreliable["forecast"].update(kind="unreliable", reason="its range, 1.57-25.59x, is over 3x wide")
    assert (rate(unreliable)["severity"], unreliable["severity_from"]) == ("medium", "rule")


def test_order_is_by_saving_and_the_top_finding_is_the_largest_saving():
    """Numbered findings that buy at least 1.05x first, by saving (measured, else forecast); then those
    without a number, medium and high before low (issue 37: a medium finding without a number may be the top
    one, a low one may not), each by ceiling; then numbers that buy next to nothing (channels-last at 1.02x)
    or cost time. No 'most severe first' exception among the numbered ones."""
    from perfsleuth.engine.evaluate import order, sort_key

    found = [_f("step-outliers", "low", ceiling=9000.0),                       # no number, big ceiling
             _f("channels-last", "medium", ceiling=100.0, forecast=1.02, saving=19.6),
             _f("amp", "medium", ceiling=500.0, forecast=1.30, saving=230.0),
             _f("cuda-graphs", "high", ceiling=7000.0, forecast=0.97, saving=-30.9),  # a slowdown: last
             _f("num-workers", "high", ceiling=800.0, forecast=1.66, saving=400.0, verified=1.10, verified_saving=90.0),
             _f("exposed-communication", "high", ceiling=3000.0)]
    ranked = order(found)
    assert [f["rule"] for f in ranked] == ["amp", "num-workers", "exposed-communication", "step-outliers",
                                           "channels-last", "cuda-graphs"]
    assert [f["severity"] for f in ranked] == ["high", "medium", "medium", "low", "low", "low"]
    assert ranked[0]["severity"] == "high" and ranked[2]["severity_from"] == "rule"
    tie = [_f("b", forecast=1.3, saving=100.0), _f("a", forecast=1.1, saving=100.0)]  # equal savings: severity, slug
    assert [f["rule"] for f in sorted(order(tie), key=sort_key)] == ["b", "a"]
    assert order([]) == []
