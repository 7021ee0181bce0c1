"""The cross-rank section of a report set (docs/ranks.md) as text: the straggler sentences shared by
every renderer, the terminal summary and the Markdown section. Works on the report-set@1 dict only;
names from traces (paths, collective kinds) are escaped."""

from __future__ import annotations

from typing import Any

from ..config import CATEGORIES
from .escape import md_cell, md_text, one_line
from .present import CATEGORY_LABELS, fmt_speedup, fmt_us, number

MAX_RANK_ROWS = 64  # rows of the ranks x categories table shown in the terminal and Markdown
SHORT = {"dataloader": "data", "kernel": "kernel", "sync": "sync", "transfer": "xfer", "host": "host",
         "communication": "comm", "other": "other"}
_CAUSE_TEXT = {"dataloader": "the DataLoader", "kernel": "kernels (compute)", "sync": "device syncs",
               "transfer": "host-device transfers", "host": "host code (Python, launches)",
               "other": "time no category explains", "unknown": "no single category"}


def has_ranks(data: dict) -> bool:
    return isinstance(data.get("ranks"), list) and isinstance(data.get("job"), dict)


def _clean(text: Any) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in one_line(text))


def straggler_sentence(s: dict) -> str:
    """'rank 3 spends 41.00 ms more per step in the DataLoader than the median rank; the other 7 ranks
    wait 38.00 ms per step for it in allreduce' (plain text: escape it for the target format)."""
    others = int(s.get("other_ranks") or 0)
    who = "the other rank waits" if others == 1 else f"the other {others} ranks wait"
    where = f" in {one_line(s['wait_in'])}" if s.get("wait_in") else ""
    cause = _CAUSE_TEXT.get(str(s.get("cause")), str(s.get("cause")))
    return (f"rank {s.get('rank')} spends {fmt_us(s.get('excess_us_per_step'))} more per step in {cause} than "
            f"the median rank; {who} {fmt_us(s.get('others_wait_us_per_step'))} per step for it{where}")


def forecast_sentence(s: dict) -> str:
    f = s.get("forecast") or {}
    gain = f" ({fmt_speedup(f.get('speedup'))})" if number(f.get("speedup")) else ""
    return (f"forecast: step {fmt_us(f.get('from_step_time_us'))} -> {fmt_us(f.get('step_time_us'))}{gain} if rank "
            f"{s.get('rank')} matched the median rank (a forecast, not a measurement; assumes "
            + "; ".join(str(a) for a in f.get("assumptions") or []) + ")")


def clock_sentence(c: dict) -> str:
    clock = c.get("clock") or {}
    return (f"{c.get('instances', 0)} collectives matched by {c.get('matched_by')}"
            + (f", {c['unmatched']} unmatched" if c.get("unmatched") else "")
            + f"; clocks aligned to rank {clock.get('reference_rank')} on collective ends: correction up to "
            f"{fmt_us(clock.get('max_correction_us'))}, residual end skew {fmt_us(clock.get('residual_us'))}")


def exposed_sentence(job: dict) -> str:
    return (f"exposed communication on rank {job.get('critical_rank')} (the rank the others wait for): "
            f"{fmt_us(job.get('exposed_communication_us_per_step'))} per step that no compute overlaps")


def render_ranks_terminal(data: dict) -> str:
    """The cross-rank summary in brief, for the terminal after the per-rank summaries."""
    if not has_ranks(data):
        return ""
    job, ranks = data["job"], data["ranks"]
    head = f"{'rank':>5} {'step':>9}" + "".join(f" {SHORT[c]:>9}" for c in CATEGORIES) + f" {'waits':>9} {'caused':>9}"
    lines = [f"across {job.get('ranks')} ranks — step {fmt_us(job.get('step_time_us'))} "
             "(per step: each rank's time in each category; waits = its wait in collectives; "
             "caused = the wait it caused each other rank)", head]
    for r in ranks[:MAX_RANK_ROWS]:
        t = r.get("time_us") or {}
        lines.append(f"{r.get('rank')!s:>5} {fmt_us(r.get('step_time_us')):>9}"
                     + "".join(f" {fmt_us(t.get(c)):>9}" for c in CATEGORIES)
                     + f" {fmt_us(r.get('wait_us_per_step')):>9} {fmt_us(r.get('caused_wait_us_per_step')):>9}")
    if len(ranks) > MAX_RANK_ROWS:
        lines.append(f"  … {len(ranks) - MAX_RANK_ROWS} more ranks in report.json")
    lines += [clock_sentence(data.get("collectives") or {}), exposed_sentence(job), "",
              f"job verdict: {str(job.get('verdict')).upper()}", f"  {_clean(job.get('verdict_reason'))}"]
    for s in data.get("stragglers") or []:
        lines += [f"  straggler: {_clean(straggler_sentence(s))}", f"    {_clean(forecast_sentence(s))}"]
    for w in job.get("warnings") or []:
        lines.append(f"warning: {_clean(w)}")
    return "\n".join(lines)


def render_ranks_markdown(data: dict) -> str:
    """The cross-rank section: the job verdict, the stragglers and the ranks x categories table."""
    if not has_ranks(data):
        return ""
    job, ranks = data["job"], data["ranks"]
    out = [f"### Across {job.get('ranks')} ranks: **{md_text(job.get('verdict'), 40)}**", "",
           md_text(job.get("verdict_reason"), 400), ""]
    for s in data.get("stragglers") or []:
        out += [f"- **Straggler:** {md_text(straggler_sentence(s), 600)}.",
                f"  _{md_text(forecast_sentence(s), 1200)}._"]
    out += ["", f"- {md_text(exposed_sentence(job), 300)}.",
            f"- {md_text(clock_sentence(data.get('collectives') or {}), 400)}.", "",
            "| Rank | Step | " + " | ".join(CATEGORY_LABELS[c] for c in CATEGORIES) + " | Waits | Caused |",
            "|--:|--:|" + "--:|" * len(CATEGORIES) + "--:|--:|"]
    for r in ranks[:MAX_RANK_ROWS]:
        t = r.get("time_us") or {}
        out.append(f"| {md_cell(r.get('rank'), 12)} | {fmt_us(r.get('step_time_us'))} | "
                   + " | ".join(fmt_us(t.get(c)) for c in CATEGORIES)
                   + f" | {fmt_us(r.get('wait_us_per_step'))} | {fmt_us(r.get('caused_wait_us_per_step'))} |")
    if len(ranks) > MAX_RANK_ROWS:
        out += ["", f"_… {len(ranks) - MAX_RANK_ROWS} more ranks in report.json._"]
    out += ["", "_Per step. Waits: the rank's wait in collectives; caused: the wait it caused each other rank._"]
    return "\n".join(out)
