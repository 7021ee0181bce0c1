"""The efficiency rules' savings are ceilings (rules/efficiency.toml): no forecast model is defensible for
them (each says why in `no_forecast`), and every output says so: JSON, terminal, Markdown, HTML."""

from __future__ import annotations

import pytest
from test_rules_efficiency import BF16, _attention_trace, _mm
from tracebuilder_rules import RuleTraceBuilder, analyze, fired

from perfsleuth.engine.catalog import load_catalog
from perfsleuth.render.html import render_html
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.terminal import render_terminal

SLUGS = ("tensor-core-shapes", "attention-unfused", "elementwise-fusion")


def _misaligned() -> RuleTraceBuilder:
    tb = RuleTraceBuilder()
    for i in range(2):
        tb.step(i + 1, i * 1000, 1000)
        _mm(tb, i * 1000 + 10, 64, 50257, 64, BF16, 100, i * 1000 + 20)
    return tb


def _elementwise() -> RuleTraceBuilder:
    tb = RuleTraceBuilder()
    x = [1024, 1024]
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        for j in range(30):
            tb.op("aten::add", t0 + 5 + j * 10, 8, **{"Input Dims": [x, x, []],
                                                      "Input type": [BF16, BF16, "Scalar"],
                                                      "Concrete Inputs": ["", "", "1"]})
            tb.launch("vectorized_elementwise_kernel", host=(t0 + 6 + j * 10, 2),
                      device=(t0 + 10 + j * 10, 8))
    return tb


def test_each_efficiency_rule_says_why_it_has_no_forecast():
    rules = {r.slug: r for r in load_catalog()}
    for slug in SLUGS:
        assert rules[slug].forecast == ""
        assert rules[slug].no_forecast.startswith("the saving is a ceiling only: ")
        assert rules[slug].saving_basis.startswith("ceiling: ")


@pytest.mark.parametrize("slug, build", [("tensor-core-shapes", _misaligned),
                                         ("attention-unfused", lambda: _attention_trace(False)),
                                         ("elementwise-fusion", _elementwise)])
def test_every_output_says_the_saving_is_a_ceiling(tmp_path, slug, build):
    report, _ = analyze(build(), tmp_path)
    f = fired(report)[slug]
    rule = next(r for r in load_catalog() if r.slug == slug)
    fc = f["forecast"]
    assert (fc["kind"], fc["speedup"], fc["ceiling_only"], fc["reason"]) == ("none", None, True, rule.no_forecast)
    assert f["ceiling"]["basis"].startswith("ceiling: ") and f["ceiling"]["saving_us"] > 0
    assert f["severity_from"] == "rule"  # no number of its own: the rule's severity
    term = render_terminal(report)
    line = next(x for x in term.splitlines() if f"] {slug}:" in x)
    assert "(no forecast: the saving is a ceiling only: " in line
    md = render_markdown(report)
    assert "Forecast: no forecast (its saving is a ceiling only)" in md
    assert f"- no forecast: {rule.no_forecast}" in md
    html = render_html(report)
    assert f"no forecast: {rule.no_forecast[:40]}" in html
