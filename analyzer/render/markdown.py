"""report@1 dict -> a GitHub-flavoured Markdown summary for pull requests and CI job summaries.

Always under MAX_CHARS (GitHub's comment limit is 65,536): every part is capped, findings are added
while they fit, and what is left out is named in a visible "… N more" line. Names from the trace go
through `perfsleuth.report.escape`, so they render as text and cannot break tables or the mermaid block.
"""

from __future__ import annotations

from typing import Any

from ..config import CATEGORIES
from ..report import figures, numbers, present
from ..report.escape import md_cell, md_code, md_fence, md_text, mermaid_label, shorten
from ..report.present import CATEGORY_LABELS, fmt_pct, fmt_us, number
from .efficiency_text import markdown_section
from .memory_text import memory_markdown
from .ranks_text import render_ranks_markdown

MAX_CHARS = 60_000
MAX_FINDINGS = 10
MAX_ROWS = 10
MAX_WARNINGS = 10
MAX_NAME = 120
MAX_FIX = 3000
MAX_MESSAGE = 1000
MAX_EVIDENCE = 15
MAX_REASON = 200  # characters of a "no reliable forecast" reason beside a finding


MAX_SET_ROWS = 30  # rows of a report set's overview table
SET_SECTION_CHARS = 20_000  # most characters one report of a set may take


def render_markdown(report: dict) -> str:
    """The report as Markdown (a str of fewer than MAX_CHARS characters).

    A report-set@1 dict gives an overview table of its traces, then as many full summaries as fit.
    """
    if "reports" in report:
        return _render_set(report)
    return _render_one(report, MAX_CHARS)


def _render_one(report: dict, max_chars: int, root: str = "") -> str:
    """One report@1 in at most `max_chars` (for max_chars >= SET_SECTION_CHARS; parts are capped); `root`: the
    folder of the set it belongs to, which its trace's path is shown relative to."""
    head = "\n\n".join(p for p in (_headline(report), _warnings(report), _not_checked(report), _categories(report),
                                   _apart(report), memory_markdown(report, lambda s: md_text(s, 200)),
                                   _efficiency(report)) if p)
    tail = "\n\n".join((_table_kernels(report), _table_ops(report), _trace_line(report, root)))
    budget = max_chars - len(head) - len(tail) - 200
    return f"{head}\n\n{_findings(report, budget)}\n\n{tail}\n"


def _efficiency(report: dict) -> str:
    return markdown_section(report, md_cell, md_text)  # render/efficiency_text.py


def _render_set(report_set: dict) -> str:
    reports = present.set_order([r for r in report_set.get("reports") or [] if isinstance(r, dict)])
    root = str(report_set.get("path") or "")
    lines = [f"### perfsleuth: {len(reports)} traces in {md_code(present.shown_path(root or '?'), 120)}", "",
             "| Trace | Rank | Verdict | Median step | Device busy | Top finding |", "|:--|--:|:--|--:|--:|:--|"]
    for r in reports[:MAX_SET_ROWS]:
        t, summary = r.get("trace") or {}, r.get("summary") or {}
        lines.append(f"| {md_cell(present.member_path(str(t.get('path') or '?'), root), MAX_NAME, code=True)} "
                     f"| {md_cell(t.get('rank'), 10)} "
                     f"| {md_cell(r.get('verdict') or '?', 40)} | {fmt_us((summary.get('step_time_us') or {}).get('median'))} "
                     f"| {fmt_pct(summary.get('device_busy'))} | {_top_cell(r)} |")
    if len(reports) > MAX_SET_ROWS:
        lines += ["", f"_… {len(reports) - MAX_SET_ROWS} more traces in report.json._"]
    for s in (report_set.get("skipped") or [])[:MAX_WARNINGS]:
        if isinstance(s, dict):
            lines.append(f"\n- skipped {md_code(present.member_path(str(s.get('path')), root), 120)}: "
                         f"{md_text(s.get('problem'), 200)}")
    out = "\n".join(lines)
    cross = render_ranks_markdown(report_set)
    if cross:
        out += "\n\n" + cross
    for i, r in enumerate(reports):
        if MAX_CHARS - len(out) < SET_SECTION_CHARS + 200:
            out += f"\n\n_… {len(reports) - i} more trace summaries in report.json._"
            break
        out += "\n\n---\n\n" + _render_one(r, SET_SECTION_CHARS, root)
    return out.rstrip("\n") + "\n"


def _top_cell(report: dict) -> str:
    """An index row's top finding: `num-workers` est. 1.30× (the number its report shows)."""
    findings = _finding_list(report)
    if not findings:
        return present.DASH
    top = numbers.top_finding(findings)
    if top is None:
        return f"{present.DASH} ({numbers.NO_TOP})"
    return f"{md_cell(top.get('rule') or '?', 60, code=True)} {md_cell(figures.short_text(top), 40)}"


def _headline(report: dict) -> str:
    summary = report.get("summary") or {}
    step = (summary.get("step_time_us") or {}).get("median")
    busy = number(summary.get("device_busy"))
    busy_text = fmt_pct(busy) if busy is not None else "n/a (CPU only)"
    degree = f" ({md_text(report['degree'], 20)})" if report.get("degree") else ""
    # the step the user's program runs at, where `perfsleuth run` measured it; the profiled one beside it (a helper
    # read "median step **21.12 ms**" as the program's step where it ran 15.98 ms without the profiler)
    unprofiled = present.unprofiled_median(report)
    step_text = (f"**{fmt_us(unprofiled)}** without the profiler ({fmt_us(step)} profiled)" if unprofiled is not None
                 else f"**{fmt_us(step)}**")
    lines = [
        f"### perfsleuth: {md_code(report.get('verdict') or 'unknown', 40)}{degree} · median step "
        f"{step_text} · device busy **{busy_text}**"
    ]
    measured, flag = present.measurement_lines(report)
    if flag:
        lines.append(f"> ⚠️ **{md_text(flag, 600)}**")
    text, notes = figures.verdict_said(report)
    said = [md_text(x, 600) for x in [text, *notes] if x]
    if said:
        lines.append("> " + "  \n> ".join(said))
    if measured:
        lines.append(md_text(measured, 400))
    statement = (report.get("host_time") or {}).get("statement") if isinstance(report.get("host_time"), dict) else ""
    if statement:
        lines.append(f"**Host time:** {md_text(statement, 1500)}")
    findings = _finding_list(report)
    best = figures.best_measured(findings)
    if best:
        lines.append(f"**Measured on this machine:** {md_text(best, 600)}")
    if findings:
        top = numbers.top_finding(findings)
        title = md_text(top.get("title") or top.get("rule"), 200) if top else ""
        lines.append(f"**Top finding:** {title} — {_impact(top)}" if top
                     else f"**Top finding:** none ({numbers.NO_TOP})")
        combined = (report.get("forecast") or {}).get("combined")
        if isinstance(combined, dict) and number(combined.get("speedup")) is not None:
            lines.append(_forecast_block(combined, "All top fixes together (" + ", ".join(
                str(r) for r in combined.get("rules") or []) + ")"))
    else:
        lines.append(f"**Findings: {present.NO_FINDINGS}** ({present.NO_FINDINGS_WHY})")
    return "\n\n".join(lines)


def _impact(f: dict) -> str:
    """`**measured 1.41× (…)** · est. 1.30× (…), saves 2.10 ms per step`: the finding's number."""
    v = figures.verified_of(f)
    est = md_text(present.fmt_forecast(present.forecast_of(f), MAX_REASON), MAX_REASON + 40)
    measured = md_text(figures.measured_text(v), 400) if v else ""  # 400: room for the settings
    text = f"**{measured}** · {est}" if v else f"**{est}**"
    saving = figures.saving_text(f)
    return f"{text}, {saving}" if saving else text


def _forecast_block(fc: dict, title: str) -> str:
    """The forecast and its assumptions, one click away."""
    rows = "\n".join(f"- {md_text(k, 60)}: {md_text(v, 400)}" for k, v in present.forecast_details(fc))
    return f"<details><summary>{md_text(title, 80)}: {md_text(present.fmt_forecast(fc), 60)}</summary>\n\n{rows}\n\n</details>"


def _not_checked(report: dict) -> str:
    """Rules that could not be checked for lack of a fact (never skipped silently)."""
    rows = [n for n in report.get("not_checked") or [] if isinstance(n, dict)]
    if not rows:
        return ""
    return "\n".join(["**Not checked**", ""] + [f"- {md_code(n.get('rule') or '?', 60)} — {md_text(n.get('reason'), 300)}"
                                               for n in rows[:MAX_WARNINGS]])


def _warnings(report: dict) -> str:
    warnings = figures.shown_warnings(report, present.measurement_lines(report))
    if not warnings:
        return ""
    lines = ["**Warnings**", ""] + [f"- {md_text(w, 300)}" for w in warnings[:MAX_WARNINGS]]
    if len(warnings) > MAX_WARNINGS:
        lines.append(f"- … {len(warnings) - MAX_WARNINGS} more warnings in report.json")
    return "\n".join(lines)


def _categories(report: dict) -> str:
    share = (report.get("summary") or {}).get("time_share") or {}
    steps = present.steady_steps(report)
    rows = ["| Category | Share | Median per step | Mean per step |", "|:--|--:|--:|--:|"]
    pie = []
    for c in CATEGORIES:
        each = present.per_step(steps, c)
        rows.append(f"| {CATEGORY_LABELS[c]} | {fmt_pct(share.get(c))} | {fmt_us(each['median'])} "
                    f"| {fmt_us(each['mean'])} |")
        value = number(share.get(c))
        if value is not None and value > 0:
            pie.append(f'    "{mermaid_label(CATEGORY_LABELS[c])}" : {value * 100:.1f}')
    table = "\n".join(rows)
    if not pie:
        return table + "\n\n_No step time to chart._"
    chart = "```mermaid\npie showData title Share of step time (%)\n" + "\n".join(pie) + "\n```"
    return f"{table}\n\n{chart}"


def _apart(report: dict) -> str:
    """The warm-up and partial steps: named, with why, outside the shares."""
    apart = present.set_apart(report)
    if not apart:
        return ""
    lines = ["**Set apart** (not in the shares, the verdict or the findings; `step-outliers` still counts them):", ""]
    lines += [f"- {a['label']} {md_code(a['name'], MAX_NAME)}: {md_text(a['reason'] or fmt_us(a['duration_us']), 300)}"
              for a in apart[:MAX_ROWS]]
    if len(apart) > MAX_ROWS:
        lines.append(f"- … {len(apart) - MAX_ROWS} more in report.json")
    return "\n".join(lines)


def _finding_list(report: dict) -> list[dict]:
    return [f for f in report.get("findings") or [] if isinstance(f, dict)]


def _findings(report: dict, budget: int) -> str:
    findings = _finding_list(report)
    if not findings:
        return f"#### Findings: {present.NO_FINDINGS}\n\n{present.NO_FINDINGS_WHY.capitalize()}."
    parts = [f"#### Findings ({len(findings)})"]
    used = len(parts[0])
    shown = 0
    for i, f in enumerate(findings[:MAX_FINDINGS], 1):
        block = _finding(i, f)
        if used + len(block) + 2 > budget:
            break
        parts.append(block)
        used += len(block) + 2
        shown += 1
    if shown < len(findings):
        parts.append(f"_… {len(findings) - shown} more findings in report.json._")
    return "\n\n".join(parts)


def _finding(i: int, f: dict) -> str:
    head = (f"**{i}. {md_text(f.get('title') or f.get('rule') or 'Finding', 200)}**  \n"
            f"{md_text(f.get('severity') or 'info', 20)} · {md_text(f.get('category') or '?', 30)} · "
            f"{_impact(f)} · rule {md_code(f.get('rule') or '?', 60)}")
    message = _prose(f.get("message"), MAX_MESSAGE)
    if message:
        head = f"{head}\n\n{message}"
    head = f"{head}\n\n{_forecast_block(present.forecast_of(f), 'Forecast')}"
    body = [_evidence(f), _prose(figures.fix_shown(f), MAX_FIX), _locations(f)]
    inner = "\n\n".join(b for b in body if b)
    if not inner:
        return head
    return f"{head}\n\n<details><summary>Evidence and fix</summary>\n\n{inner}\n\n</details>"


def _evidence(f: dict) -> str:
    evidence = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    if not evidence:
        return ""
    rows = ["| Evidence | Value |", "|:--|:--|"]
    for k, v in list(evidence.items())[:MAX_EVIDENCE]:
        rows.append(f"| {md_cell(k, 60, code=True)} | {md_cell(present.fmt_value(str(k), v), 200)} |")
    return "\n".join(rows)


def _prose(text: Any, limit: int) -> str:
    """Rule text (message, fix) as Markdown: escaped paragraphs with code spans, fenced code kept."""
    blocks = present.fix_blocks(shorten(str(text or ""), limit))
    out = []
    for b in blocks:
        if b["kind"] == "code":
            out.append(md_fence(b["code"], b["lang"]))
        else:
            out.append("".join(md_code(t) if is_code else md_text(t) for is_code, t in b["parts"]))
    return "\n\n".join(out)


def _locations(f: dict) -> str:
    locs = f.get("locations") if isinstance(f.get("locations"), list) else []
    return "\n".join(f"- {md_code(present.location_text(loc), 200)}" for loc in locs[:10])


def _table_kernels(report: dict) -> str:
    return _name_table(report.get("top_kernels"), "Top kernels", "Kernel", "Share",
                       lambda r: fmt_pct(r.get("share")))


def _table_ops(report: dict) -> str:
    return _name_table(report.get("top_ops"), "Top ops", "Op", "Mean", lambda r: fmt_us(r.get("mean_us")))


def _name_table(rows, title: str, what: str, last: str, last_cell) -> str:
    """A folded table of named rows (kernels, ops): #, name, count, total, and one more column."""
    rows = [r for r in rows or [] if isinstance(r, dict)]
    lines = [f"| # | {what} | Count | Total | {last} |", "|--:|:--|--:|--:|--:|"]
    for i, r in enumerate(rows[:MAX_ROWS], 1):
        lines.append(f"| {i} | {md_cell(r.get('name'), MAX_NAME, code=True)} | {present.fmt_count(r.get('count'))} "
                     f"| {fmt_us(r.get('total_us'))} | {last_cell(r)} |")
    return _folded(title, lines, len(rows))


def _folded(title: str, lines: list[str], total: int) -> str:
    if total == 0:
        return f"<details><summary>{title}</summary>\n\nNone in this trace.\n\n</details>"
    more = f"\n\n_… {total - MAX_ROWS} more in report.json._" if total > MAX_ROWS else ""
    table = "\n".join(lines)
    return f"<details><summary>{title} ({total})</summary>\n\n{table}{more}\n\n</details>"


def _trace_line(report: dict, root: str = "") -> str:
    t: dict[str, Any] = report.get("trace") or {}
    tool = report.get("tool") or {}
    path = str(t.get("path") or "?")
    shown = present.member_path(path, root) if root else present.shown_path(path)
    bits = [f"trace {md_code(shown, 120)}", md_text(t.get("device") or "CPU only", 80)]
    if t.get("rank") is not None:
        bits.append(f"rank {md_text(t.get('rank'), 10)}/{md_text(t.get('world_size') or '?', 10)}")
    bits.append(f"{present.steps_text(report)} ({md_text(report.get('steps_source') or '?', 30)})")
    bits.append(f"perfsleuth {md_text(tool.get('version') or '?', 20)}")
    return "<sub>" + " · ".join(bits) + "</sub>"
