"""The terminal summary beside the other outputs: the category table's median per step sits beside the median
step time of the headline, the mean is labelled; a report without findings says "findings: none" (issue 29)."""

from perfsleuth.render.html import render_html
from perfsleuth.render.markdown import render_markdown
from perfsleuth.report.present import per_step
from perfsleuth.render.terminal import render_terminal
from report_factory import make_report


def _one_slow_loader_step() -> dict:
    """Six steps whose DataLoader waits 100 µs, but one waits 5,100 µs: median 100, mean 933.3."""
    report = make_report(findings=0)
    for i, step in enumerate(report["steps"]):
        step["time_us"]["dataloader"] = 5100.0 if i == 2 else 100.0
    return report


def test_per_step_gives_the_median_and_the_mean():
    steps = [{"time_us": {"host": v}} for v in (1.0, 2.0, 10.0)]
    assert per_step(steps, "host") == {"median": 2.0, "mean": 13.0 / 3}
    assert per_step(steps[:2], "host") == {"median": 1.5, "mean": 1.5}
    assert per_step([], "host") == {"median": 0.0, "mean": 0.0}
    assert per_step([{"time_us": {}}], "sync") == {"median": 0.0, "mean": 0.0}


def test_the_terminal_shows_median_and_mean_per_step_each_labelled():
    lines = render_terminal(_one_slow_loader_step()).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("category"))
    assert lines[header].split() == ["category", "share", "median/step", "mean/step"]
    assert lines[header + 1].split()[:6] == ["dataloader", lines[header + 1].split()[1], "100.0", "µs", "933.3", "µs"]
    assert lines[header + 8] == ("(median/step: like the step time above; share and mean/step: of all the steps' "
                                 "time together)")
    assert "step time: median " in lines[2]


def test_every_output_says_findings_none_when_no_rule_fired():
    report = _one_slow_loader_step()
    assert "\nfindings: none (no rule fired on this trace)" in render_terminal(report)
    md = render_markdown(report)
    assert "**Findings: none** (no rule fired on this trace)" in md and "#### Findings: none\n" in md
    assert "| DataLoader | 15.5% | 100 µs | 933 µs |" in md
    html = render_html(report)
    assert "<h2>Findings: none</h2>" in html
    assert '<th class="num">Median per step</th><th class="num">Mean per step</th>' in html
