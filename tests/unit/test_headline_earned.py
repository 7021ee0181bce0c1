"""Issue 37, item 1: the headline is earned. The top finding (first in every output, the HTML card) is the
largest measured or forecast saving that buys at least 1.05x, or a medium/high finding without a number;
otherwise every output says "no finding buys more than 5 %" and shows none as top. A fix measured slower
says "tried: slower on this machine; don't apply" where its fix block would be, and never leads."""

from perfsleuth.engine.evaluate import order
from perfsleuth.engine.measured import apply_verified
from perfsleuth.render.html import render_html
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.terminal import render_set_index, render_terminal
from perfsleuth.report import figures, numbers
from report_factory import make_report


def _f(rule, severity="medium", forecast=None, saving=None, ceiling=0.0, fix="Do X:\n```python\nx()\n```"):
    return {"rule": rule, "title": f"title of {rule}", "category": "host", "severity": severity,
            "ceiling": {"saving_us": ceiling, "speedup": None, "basis": "b"}, "fix": fix, "message": "m",
            "forecast": {"kind": "forecast" if forecast else "none", "speedup": forecast, "saving_us": saving,
                         "low": forecast, "high": forecast, "reason": None if forecast else "no model"}}


def test_savings_on_different_steps_rank_by_the_share_of_the_step_they_save():
    """An unseen helper's CPU run (issue 39): fused-optimizer 1.10x saving 8.91 ms of the profiled 88.9 ms step led
    tiny-ops 1.147x saving 6.80 ms of the 46.4 ms step without the profiler. Ranked by the share of the step each
    saves (9.1% and 12.8%), tiny-ops leads; at one speedup the larger saving in µs goes first."""
    fused, tiny = _f("fused-optimizer", forecast=1.10, saving=8905.7), _f("tiny-ops", forecast=1.147, saving=6799.2)
    ranked = order([fused, tiny])
    assert [f["rule"] for f in ranked] == ["tiny-ops", "fused-optimizer"]
    assert numbers.top_finding(ranked)["rule"] == "tiny-ops"
    assert round(numbers.share_saved(numbers.ranked(ranked[0])), 4) == round(1 - 1 / 1.147, 4) == 0.1282
    tie = order([_f("a", forecast=1.2, saving=10.0), _f("b", forecast=1.2, saving=20.0)])
    assert [f["rule"] for f in tie] == ["b", "a"]


def test_a_pin_memory_finding_at_1_00x_is_not_the_top_finding():
    """The H100 video trace's card showed pin-memory `est. 1.00×, saves 4.2 µs`."""
    ranked = order([_f("pin-memory", "low", forecast=1.00, saving=4.2, ceiling=4.2)])
    assert numbers.rank_group(ranked[0]) == 3
    assert numbers.top_finding(ranked) is None
    assert numbers.NO_TOP == "no finding buys more than 5 %"


def test_the_top_is_the_largest_saving_from_1_05x_then_a_medium_finding_without_a_number():
    found = [_f("a", forecast=1.049, saving=900.0), _f("b", forecast=1.05, saving=100.0),
             _f("c", forecast=1.40, saving=300.0), _f("d", "high", ceiling=5000.0), _f("e", "low", ceiling=9e4)]
    ranked = order(found)
    assert [f["rule"] for f in ranked] == ["c", "b", "d", "e", "a"]
    assert [numbers.rank_group(f) for f in ranked] == [0, 0, 1, 2, 3]
    assert numbers.top_finding(ranked)["rule"] == "c"
    # without the numbered ones, the medium finding without a number (the high rule capped at medium) leads
    rest = order([f for f in found if f["rule"] in ("a", "d", "e")])
    assert [f["rule"] for f in rest] == ["d", "e", "a"] and rest[0]["severity"] == "medium"
    assert numbers.top_finding(rest)["rule"] == "d"
    # a low finding without a number never is the top one
    assert numbers.top_finding(order([_f("e", "low", ceiling=9e4), _f("a", forecast=1.03, saving=9.0)])) is None


def test_a_fix_measured_slower_never_leads_and_its_fix_block_says_dont_apply():
    """The CNN's num-workers card read `measured 0.79× ... costs 89.93 ms per step` above an After block."""
    found = [_f("num-workers", "high", forecast=1.77, saving=30_000.0), _f("cpu-threads", "low", ceiling=10.0)]
    ranked = apply_verified(found, {"num-workers": {"speedup": 0.79, "low": 0.75, "high": 0.82, "pairs": 3,
                                                    "saving_us": -89_930.0, "outcome": "slower"}})
    assert [f["rule"] for f in ranked] == ["cpu-threads", "num-workers"]
    assert ranked[1]["severity"] == "low" and numbers.top_finding(ranked) is None
    assert figures.fix_shown(ranked[1]) == "tried: slower on this machine; don't apply (measured 0.79× (0.75–0.82×))"
    assert figures.fix_shown(ranked[0]) == "Do X:\n```python\nx()\n```"
    report = make_report(findings=0)
    report["findings"] = ranked
    html, md = render_html(report), render_markdown(report)
    for text in (html, md):
        assert "tried: slower on this machine; don&#39;t apply (measured 0.79×" in text or \
            "tried: slower on this machine; don't apply (measured 0.79×" in text
        assert "x()" in text  # cpu-threads keeps its fix block
    assert md.count("x()") == 1 and html.count("x()") == 1  # num-workers' After block is gone
    assert "**Top finding:** none (no finding buys more than 5 %)" in md
    assert 'id="no-top">None</div><div class="sub">no finding buys more than 5 %</div>' in html
    terminal = render_terminal(report)
    assert "findings (none is the top one: no finding buys more than 5 %):" in terminal


def test_index_rows_show_no_top_finding_when_none_earns_it():
    report = make_report(findings=0)
    report["findings"] = order([_f("pin-memory", "low", forecast=1.00, saving=4.2)])
    index = render_set_index({"tool": {"version": "0.1.0"}, "path": "runs", "reports": [report]})
    assert "- (no finding buys more than 5 %)" in index and "pin-memory" not in index
    report["findings"] = order([_f("amp", forecast=1.30, saving=230.0)])
    index = render_set_index({"tool": {"version": "0.1.0"}, "path": "runs", "reports": [report]})
    assert "amp (est. 1.30×)" in index
