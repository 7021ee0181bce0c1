"""The Markdown summary: verdict line, category table, mermaid pie, folded findings, limits, escaping.

Tables are checked twice: by counting unescaped pipes, and through GitHub's renderer (cmark-gfm).
"""

import re

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from perfsleuth.render.markdown import MAX_CHARS, render_markdown
from report_factory import make_hostile_report, make_report

PIE_LINE = re.compile(r'^    "[\w .,/+\-…]+" : \d+\.\d$')


def gfm(text: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)


def tables(md: str) -> list[list[str]]:
    """Each Markdown table as its lines."""
    out, cur = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


def cells(row: str) -> int:
    return len(re.split(r"(?<!\\)\|", row.strip()[1:-1]))


def mermaid(md: str) -> list[str]:
    block = re.search(r"^```mermaid\n(.*?)\n```$", md, re.S | re.M)
    assert block, "no mermaid block"
    return block.group(1).split("\n")


def test_verdict_line_and_top_finding():
    md = render_markdown(make_report())
    assert md.startswith("### perfsleuth: `kernel-bound` · median step **2.25 ms** · device busy **71.0%**\n")
    assert ("**Top finding:** DataLoader runs in the main process — **est. 1.25× (1.20–1.30×)**, "
            "saves 450 µs per step") in md
    assert "> kernels take 61% of the step and no stall category takes a material share" in md


def test_the_headline_step_is_the_measured_one_where_the_run_measured_it():
    """A run's headline gives the step its program runs at without the profiler, the profiled one beside it (a
    helper read "median step **21.12 ms**" as the program's step where it ran 15.98 ms)."""
    report = make_report()
    report["measurement"] = {"unprofiled_step_us": {"median": 1500.0, "n": 7},
                             "profiled_step_us": {"median": 2250.0, "n": 5}, "overhead": 1.5}
    md = render_markdown(report)
    assert md.startswith("### perfsleuth: `kernel-bound` · median step **1.50 ms** without the profiler (2.25 ms "
                         "profiled) · device busy **71.0%**\n")
    report["measurement"] = {"note": "no unprofiled step was timed"}
    assert render_markdown(report).startswith("### perfsleuth: `kernel-bound` · median step **2.25 ms** · ")


def test_category_table_has_every_category_in_order():
    md = render_markdown(make_report())
    table = tables(md)[0]
    assert table[0] == "| Category | Share | Median per step | Mean per step |"
    assert [r.split("|")[1].strip() for r in table[2:]] == [
        "DataLoader", "Kernels", "Sync", "Transfer", "Host", "Communication", "Other"]
    assert "| Kernels | 64.2% | 1.43 ms | 1.43 ms |" in table


def test_mermaid_pie_lists_nonzero_categories():
    lines = mermaid(render_markdown(make_report()))
    assert lines[0] == "pie showData title Share of step time (%)"
    assert lines[1:] == ['    "DataLoader" : 15.5', '    "Kernels" : 64.2', '    "Sync" : 2.7', '    "Transfer" : 4.0',
                         '    "Host" : 11.3', '    "Communication" : 1.8', '    "Other" : 0.4']


def test_cpu_only_pie_skips_zero_slices_and_says_n_a():
    md = render_markdown(make_report(device=False, findings=0))
    assert "device busy **n/a (CPU only)**" in md
    assert [line.split('"')[1] for line in mermaid(md)[1:]] == ["DataLoader", "Host", "Other"]
    assert "**Findings: none** (no rule fired on this trace)" in md
    assert "#### Findings: none\n\nNo rule fired on this trace.\n" in md


def test_no_steps_gives_no_pie():
    report = make_report(steps=0)
    report["summary"]["time_share"] = {}
    md = render_markdown(report)
    assert "```mermaid" not in md and "_No step time to chart._" in md


def test_findings_fold_their_fix_in_details():
    report = make_report(findings=3)
    md = render_markdown(report)
    for i, f in enumerate(report["findings"], 1):
        assert f"**{i}. {f['title']}**" in md
    assert md.count("<details><summary>Evidence and fix</summary>") == 3
    assert md.count("<details><summary>Forecast: ") == 3  # each finding's forecast and its assumptions
    assert md.count("</details>") == 3 + 3 + 2  # evidence and fix + forecasts + kernels + ops
    assert "```python\nloader = DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True)\n```" in md
    assert "- `train.py:57 in train_step`" in md
    assert ("rule `num-workers`\n\nThe DataLoader takes 17.0% of the step in the main process. "
            "Record with `with_stack=True` to see the source lines.\n\n<details>") in md
    # the ceiling is JSON only: never shown, never as "up to" (issue 24)
    assert "the time the device waits for the next batch" not in md and "Bound" not in md and "up to" not in md
    assert "| `wait_us_per_step` | 346 µs per step |" in md
    html = gfm(md)
    assert html.count("<details>") == 8 and html.count('<pre lang="python">') == 6


def test_rendered_by_github_renderer_as_expected():
    html = gfm(render_markdown(make_report()))
    assert "<h3>perfsleuth: <code>kernel-bound</code>" in html
    assert html.count("<table>") == 6  # categories, 3 evidence tables, kernels, ops
    assert '<pre lang="mermaid"><code>pie showData' in html


def test_hostile_names_keep_tables_and_mermaid_intact():
    md = render_markdown(make_hostile_report())
    for table in tables(md):
        width = cells(table[0])
        assert all(cells(row) == width for row in table), table
    assert all(PIE_LINE.match(line) for line in mermaid(md)[1:])
    assert md.count("```mermaid") == 1
    html = gfm(md)
    assert "<script" not in html and "<img" not in html
    assert 'href="javascript' not in html and "<a " not in html
    for t in html.split("<table>")[1:]:
        head, body = t.split("<tbody>")
        width = len(re.findall(r"<th[ >]", head))
        rows = body.split("</table>")[0].split("<tr>")[1:]
        assert rows and all(r.count("<td") == width for r in rows)


def test_names_that_mention_people_notify_nobody():
    """Issue 38, class 8: @user and @org/team in a frame's folder, a device name, a title or a warning went
    into the PR comment as mentions (notified again on every push: the comment is edited)."""
    from test_escape import mentions_outside_code

    r = make_report(steps=4, findings=2)
    at = "@org/security-team"
    r["trace"]["device"] = f"NVIDIA {at} H100"
    r["verdict_reason"] = f"graph break in {at}/model.py"
    f = r["findings"][0]
    f["title"] = f"Slow op under {at}/train.py"
    f["message"] = f"cc @octocat: {at}/train.py(12): step"
    f["evidence"] = {"op": f"{at}/op", "note": "@someone"}
    f["locations"] = [{"file": f"/home/u/{at}/train.py", "line": 3, "function": "@step"}]
    r["warnings"] = [f"ping {at}"]
    html = gfm(render_markdown(r))
    assert "security-team" in html and "octocat" in html  # the names are there, as text
    assert mentions_outside_code(html) == []


def test_hostile_fix_cannot_close_the_details_block():
    report = make_report(findings=1)
    report["findings"][0]["fix"] = "</details>\n\n# heading\n\n```\n</details>\n```"
    md = render_markdown(report)
    html = gfm(md)
    assert html.count("<details>") == html.count("</details>") == 4  # forecast, evidence and fix, kernels, ops
    assert "<h1>" not in html and "\\</details\\>" in md


def test_many_findings_and_kernels_stay_under_the_limit_with_a_note():
    report = make_report(steps=10_000, findings=400, kernels=5000, ops=5000, warnings=[f"{i} " + "x" * 5000 for i in range(300)])
    for f in report["findings"]:
        f["fix"] = "```\n" + "y = 1\n" * 2000 + "```"
        f["evidence"] = {f"k{i}": "v" * 500 for i in range(100)}
    md = render_markdown(report)
    assert len(md) < MAX_CHARS
    assert "- … 290 more warnings in report.json" in md
    assert re.search(r"_… \d+ more findings in report\.json\._", md)
    assert "_… 4990 more in report.json._" in md
    assert md.count("```mermaid") == 1


def test_report_set_has_an_overview_and_stays_under_the_limit():
    reports = [make_report(findings=10, kernels=50) for _ in range(40)]
    for i, r in enumerate(reports):
        r["trace"]["path"] = f"runs/rank{i}.json.gz"
    md = render_markdown({"schema": "perfsleuth/report-set@1", "path": "runs", "reports": reports})
    assert md.startswith("### perfsleuth: 40 traces in `runs`\n")
    assert "| `runs/rank0.json.gz` | 0 | kernel-bound | 2.25 ms | 71.0% |" in md
    assert "_… 10 more traces in report.json._" in md
    assert len(md) < MAX_CHARS
    assert re.search(r"_… \d+ more trace summaries in report\.json\._", md)


def test_a_directorys_summary_shows_paths_inside_it_not_the_machines(tmp_path, monkeypatch):
    """A runner's folder (/home/runner/work/...) never reaches a pull-request comment: the rows and each
    trace's line show the path inside the folder, the heading the folder as seen from the working directory."""
    root = tmp_path / "work" / "repo" / "prof"
    reports = [make_report(findings=1) for _ in range(2)]
    for i, r in enumerate(reports):
        r["trace"]["path"] = str(root / "logs" / f"rank{i}.json.gz")
    data = {"schema": "perfsleuth/report-set@1", "path": str(root), "reports": reports,
            "skipped": [{"path": str(root / "bad.json"), "problem": "not a trace"}]}
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    md = render_markdown(data)
    assert md.startswith("### perfsleuth: 2 traces in `repo/prof`\n")
    assert "| `logs/rank0.json.gz` |" in md and "<sub>trace `logs/rank1.json.gz` ·" in md
    assert "- skipped `bad.json`: not a trace" in md
    assert str(tmp_path) not in md
    # one report alone: its trace relative to the working directory too
    assert "<sub>trace `repo/prof/logs/rank0.json.gz` ·" in render_markdown(reports[0])


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_real_trace_summary(real_traces):
    from perfsleuth.api import analyze_path
    from perfsleuth.report.escape import md_text

    report = analyze_path(real_traces / "a100_trace_diff_control.json.gz").to_dict()
    md = render_markdown(report)
    assert md.startswith("### perfsleuth: `communication-bound` (moderate) · median step **76.76 ms** · device busy "
                         "**83.6%**\n\n> 19% of each step waits for collectives with no compute alongside; kernels 60%")
    assert "moderately communication-bound:" not in md  # the headline says the verdict: said once (issue 37)
    assert len(md) < 20_000
    for i, f in enumerate(report["findings"], 1):
        assert f"**{i}. {md_text(f['title'], 200)}**" in md
    html = gfm(md)
    combined = 1 if ((report.get("forecast") or {}).get("combined") or {}).get("speedup") else 0
    # per finding: its forecast and its evidence; the kernels and ops tables; the combined forecast
    assert html.count("<details>") == 2 * len(report["findings"]) + 2 + combined
    assert all(PIE_LINE.match(line) for line in mermaid(md)[1:])
