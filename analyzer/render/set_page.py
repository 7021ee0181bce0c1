"""report-set@1 (a directory of traces) -> one HTML page of at most MAX_PAGE_BYTES in which every trace
can be reached.

The page is an index (one row per trace, by rank then path, each linking to its section), then one
collapsible `<details>` section per trace. Sections are the full report while the budget allows,
then a compact one (headline, shares, the findings as a list); when even compact sections would
not fit, the last traces keep their index row (verdict, step time, top finding) and are complete
in report.json. The budget is measured on the rendered page, not estimated.
"""

from __future__ import annotations

from markupsafe import Markup

from ..report import figures, numbers, present
from ..report.escape import shorten
from .html import _environment, _verdict_class, view
from ..report.present import member_path, set_order
from .ranks_html import ranks_view
from .timeline_html import shown_path

MAX_PAGE_BYTES = 1_000_000  # the whole page, index and every section (docs/reports.md)
COMPACT_FINDINGS = 5  # findings listed in a compact section (title, its number, rule)


def render_set_html(data: dict, folder: str | None = None) -> str:
    """The set's page; `folder`: its folder (the paths it shows are relative to it, never
    absolute)."""
    env = _environment()
    reports = set_order([r for r in data.get("reports") or [] if isinstance(r, dict)])
    rows = [index_row(r, f"r{i + 1}-", str(data.get("path") or "")) for i, r in enumerate(reports)]
    skipped = [{"path": str(s.get("path")), "problem": str(s.get("problem"))}
               for s in (data.get("skipped") or [])[:50] if isinstance(s, dict)]

    ranks = ranks_view(data)  # the cross-rank section (ranks_html.py), above the sections

    def page(kept_rows: list, sections: list, counts: dict) -> str:
        index = {"path": shown_path(str(data.get("path") or ""), folder),
                 "count": len(reports), "rows": kept_rows, "skipped": skipped,
                 "budget": f"{MAX_PAGE_BYTES / 1e6:g} MB", **counts}
        title = f"perfsleuth: {len(reports)} traces — {shorten(index['path'], 80)}"
        return env.get_template("report.html.j2").render(
            page_title=title, bodies=sections, index=index, ranks=ranks, version=str((data.get("tool") or {}).get("version") or ""),
            schema=str(data.get("schema") or "perfsleuth/report-set@1"))

    counts = {"full": 0, "compact": 0, "rows_only": 0, "more": 0}
    base = _size(page(rows, [], counts)) + 400  # room for the counts written into the page at the end
    while base > MAX_PAGE_BYTES and rows:  # thousands of traces: not even one row each fits
        rows = rows[: len(rows) * 3 // 4]
        counts["more"] = len(reports) - len(rows)
        base = _size(page(rows, [], counts)) + 400
    section = env.get_template("_set_section.html.j2")

    def render(v: dict, row: dict, level: str) -> Markup:
        body = env.get_template("_body.html.j2" if level == "full" else "_compact.html.j2").render(
            {**v, "compact_findings": v["findings"][:COMPACT_FINDINGS],
             "compact_more": max(0, len(v["findings"]) + v["findings_more"] - COMPACT_FINDINGS)})
        return Markup(section.render(row=row, body=Markup(body), open=row["n"] == 1, level=level))

    left = MAX_PAGE_BYTES - base
    sections, views = [], []
    for rep, row in zip(reports, rows):  # compact sections while they fit
        v = view(rep, pid=row["pid"], base=folder)
        small = render(v, row, "compact")
        if _size(small) > left:
            break
        sections.append(small)
        views.append(v)
        left -= _size(small)
    for i, (v, row) in enumerate(zip(views, rows)):  # then full ones, first traces first
        full = render(v, row, "full")
        extra = _size(full) - _size(sections[i])
        if extra > left:
            break
        sections[i], left = full, left - extra
        counts["full"] += 1
    counts["compact"] = len(sections) - counts["full"]
    counts["rows_only"] = len(rows) - len(sections)
    for row in rows[len(sections):]:
        row["anchor"] = ""  # no section: the row itself is where the trace is
    return page(rows, sections, counts)


def index_row(rep: dict, pid: str, root: str) -> dict:
    """One index row: where the trace is, its rank, verdict, step time, device busy and top finding."""
    t = rep.get("trace") if isinstance(rep.get("trace"), dict) else {}
    summary = rep.get("summary") if isinstance(rep.get("summary"), dict) else {}
    findings = [f for f in rep.get("findings") or [] if isinstance(f, dict)]
    top = numbers.top_finding(findings)
    verdict = str(rep.get("verdict") or "unknown")
    return {"n": int(pid[1:-1]), "pid": pid, "path": shorten(member_path(str(t.get("path") or "?"), root), 160),
            "rank": present.DASH if t.get("rank") is None else t["rank"], "verdict": verdict,
            "verdict_class": _verdict_class(verdict), "median": (summary.get("step_time_us") or {}).get("median"),
            "busy": present.number(summary.get("device_busy")), "top": str(top.get("rule") or "") if top else "",
            "top_number": figures.short_text(top) if top else (numbers.NO_TOP if findings else ""),
            "anchor": f"{pid}section", "id": f"{pid}row"}


def _size(text: str) -> int:
    return len(text.encode("utf-8"))
