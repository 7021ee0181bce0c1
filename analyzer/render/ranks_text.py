"""The cross-rank section of a report set (docs/ranks.md) as text: the straggler sentences shared by
every renderer, the terminal summary and the Markdown section. Works on the report-set@1 dict only;
names from traces (paths, collective kinds) are escaped. A folder of several jobs has one section
per job (`jobs`), and the set's warnings say why traces were split or left out."""

from __future__ import annotations

from typing import Any

from ..config import CATEGORIES
from ..report.escape import md_cell, md_text, one_line
from ..report.present import CATEGORY_LABELS, fmt_speedup, fmt_us, number

MAX_RANK_ROWS = 64  # rows of the ranks x categories table shown in the terminal and Markdown
MAX_ARRIVAL_RANKS = 6  # ranks named in "arrivals alternate (...)"
SHORT = {"dataloader": "data", "kernel": "kernel", "sync": "sync", "transfer": "xfer", "host": "host",
         "communication": "comm", "other": "other"}
_CAUSE_TEXT = {"dataloader": "the DataLoader", "kernel": "kernels (compute)", "sync": "device syncs",
               "transfer": "host-device transfers", "host": "host code (Python, launches)",
               "other": "time no category explains", "unknown": "no single category"}


def has_ranks(data: dict) -> bool:
    return isinstance(data.get("ranks"), list) and isinstance(data.get("job"), dict)


def job_sections(data: dict) -> list:
    """The cross-rank reports of a set: itself (one job), or each of `jobs`."""
    if has_ranks(data):
        return [data]
    return [j for j in data.get("jobs") or [] if isinstance(j, dict) and has_ranks(j)]


def set_warnings(data: dict) -> list:
    return [str(w) for w in data.get("warnings") or []] if "reports" in data else []


def ranks_heading(job: dict) -> str:
    """'2 ranks', or '2 of 128 ranks' when the world size names ranks that have no trace here."""
    world, count = job.get("world_size"), job.get("ranks")
    return f"{count} of {world} ranks" if job.get("missing_ranks") and world else f"{count} ranks"


def verdict_word(job: dict) -> str:
    return str(job.get("verdict")) if job.get("verdict") else "withheld"


def arrivals_sentence(job: dict) -> str:
    """Why no rank is named a straggler, from `job.arrivals` (analysis/ranks/who_arrives_last.py); '' when one is,
    or when the verdict is withheld."""
    a = job.get("arrivals") if isinstance(job.get("arrivals"), dict) else {}
    why, last, of = a.get("no_straggler"), a.get("last") or {}, a.get("of") or {}
    if not why or not last:
        return ""
    lost = fmt_us(a.get("lost_us_per_step"))
    if why == "alternate":
        shown = sorted(sorted(last, key=lambda r: -int(last[r] or 0))[:MAX_ARRIVAL_RANKS], key=int)
        parts = [f"rank {r}{' last' if i == 0 else ''} in {last[r]} of {of.get(r)}" for i, r in enumerate(shown)]
        more = ", …" if len(last) > len(shown) else ""
        return f"no consistent straggler: arrivals alternate ({', '.join(parts)}{more}), {lost} per step lost to jitter"
    rank = a.get("consistent_rank")
    share = number(a.get("straggler_share")) or 0.0
    head = f"no straggler: rank {rank} arrives last consistently (in {last.get(str(rank))} of {of.get(str(rank))})"
    if why == "small":
        return f"{head}, but the others wait for it less than {share:.0%} of the step; {lost} per step lost to waits"
    return (f"{head}, but spends less than {share:.0%} of the step more than the median rank outside "
            f"communication; {lost} per step lost to waits")


def present_sentence(job: dict) -> str:
    """With ranks missing: the present rank that arrives last consistently among the present ones."""
    p = job.get("among_present") if isinstance(job.get("among_present"), dict) else None
    if not p:
        return ""
    cause = _CAUSE_TEXT.get(str(p.get("cause")), str(p.get("cause")))
    return (f"among the ranks present, rank {p.get('rank')} arrives last in {p.get('last')} of {p.get('of')} "
            f"matched instances and spends {fmt_us(p.get('excess_us_per_step'))} more per step in {cause} than the "
            "median of the others; an absent rank may arrive later still")


def p2p_sentence(c: dict) -> str:
    p = c.get("point_to_point") if isinstance(c.get("point_to_point"), dict) else {}
    if not p.get("operations"):
        return ""
    how = " and ".join(str(m) for m in p.get("matched_by") or [])
    out = f"{p['operations']} point-to-point operations: " + (f"{p['pairs']} pairs matched by {how}" if p.get("pairs")
                                                              else "none paired")
    if p.get("unmatched"):
        why = [f"{p['peer_absent']} with a peer not in the folder" if p.get("peer_absent") else "",
               f"{p['ambiguous']} ambiguous in time" if p.get("ambiguous") else ""]
        why = "; ".join(w for w in why if w)
        out += (f", {p['unmatched']} unmatched{f' ({why})' if why else ''}: "
                f"{fmt_us(p.get('unmatched_us_per_step'))} per step not charged to any rank")
    return out


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
    pairs = (c.get("point_to_point") or {}).get("pairs") or 0
    colls = c.get("collective_instances", c.get("instances", 0)) if pairs else c.get("instances", 0)
    what = f"{colls} collectives matched by {c.get('matched_by')}" if colls or not pairs else "no collectives matched"
    return (what + (f", {c['unmatched']} unmatched" if c.get("unmatched") else "")
            + (f", {pairs} point-to-point pairs" if pairs else "")
            + f"; clocks aligned to rank {clock.get('reference_rank')} on {'their' if pairs else 'collective'} ends: "
            f"correction up to {fmt_us(clock.get('max_correction_us'))}, residual end skew "
            f"{fmt_us(clock.get('residual_us'))}")


def exposed_sentence(job: dict) -> str:
    return (f"exposed communication on rank {job.get('critical_rank')} (the rank the others wait for): "
            f"{fmt_us(job.get('exposed_communication_us_per_step'))} per step that no compute overlaps")


def render_ranks_terminal(data: dict) -> str:
    """The cross-rank summary in brief, for the terminal after the per-rank summaries: each job's,
    then the set's warnings (why traces were split into jobs or left out)."""
    jobs = job_sections(data)
    out = [_terminal_job(job, _job_label(i, len(jobs))) for i, job in enumerate(jobs)]
    out += [f"warning: {_clean(w)}" for w in set_warnings(data)]
    return "\n\n".join(out)


def _job_label(i: int, n: int) -> str:
    return f"job {i + 1} of {n}: " if n > 1 else ""


def _terminal_job(data: dict, label: str = "") -> str:
    job, ranks = data["job"], data["ranks"]
    head = f"{'rank':>5} {'step':>9}" + "".join(f" {SHORT[c]:>9}" for c in CATEGORIES) + f" {'waits':>9} {'caused':>9}"
    lines = [f"{label}across {ranks_heading(job)} — step {fmt_us(job.get('step_time_us'))} "
             "(per step: each rank's time in each category; waits = its wait in collectives; "
             "caused = the wait it caused each other rank)", head]
    for r in ranks[:MAX_RANK_ROWS]:
        t = r.get("time_us") or {}
        lines.append(f"{r.get('rank')!s:>5} {fmt_us(r.get('step_time_us')):>9}"
                     + "".join(f" {fmt_us(t.get(c)):>9}" for c in CATEGORIES)
                     + f" {fmt_us(r.get('wait_us_per_step')):>9} {fmt_us(r.get('caused_wait_us_per_step')):>9}")
    if len(ranks) > MAX_RANK_ROWS:
        lines.append(f"  … {len(ranks) - MAX_RANK_ROWS} more ranks in report.json")
    if number(job.get("absent_wait_us_per_step")):
        lines.append(f"{'absent':>5} (ranks not in the folder) caused {fmt_us(job.get('absent_wait_us_per_step'))} "
                     "per step")
    c = data.get("collectives") or {}
    lines += [clock_sentence(c)] + [x for x in (p2p_sentence(c),) if x] + [exposed_sentence(job), "",
              f"job verdict: {verdict_word(job).upper()}", f"  {_clean(job.get('verdict_reason'))}"]
    for s in data.get("stragglers") or []:
        lines += [f"  straggler: {_clean(straggler_sentence(s))}", f"    {_clean(forecast_sentence(s))}"]
    for extra in (arrivals_sentence(job), present_sentence(job)):
        if extra:
            lines.append(f"  {_clean(extra)}")
    for w in job.get("warnings") or []:
        lines.append(f"warning: {_clean(w)}")
    return "\n".join(lines)


def render_ranks_markdown(data: dict) -> str:
    """The cross-rank section of each job: the job verdict, the stragglers (or why none) and the
    ranks x categories table; then the set's warnings."""
    jobs = job_sections(data)
    out = [_markdown_job(job, _job_label(i, len(jobs)).capitalize()) for i, job in enumerate(jobs)]
    out += [f"- **Warning:** {md_text(w, 1200)}" for w in set_warnings(data)]
    return "\n\n".join(out)


def _markdown_job(data: dict, label: str = "") -> str:
    job, ranks = data["job"], data["ranks"]
    out = [f"### {label}{'a' if label else 'A'}cross {ranks_heading(job)}: **{md_text(verdict_word(job), 40)}**", "",
           md_text(job.get("verdict_reason"), 800), ""]
    for s in data.get("stragglers") or []:
        out += [f"- **Straggler:** {md_text(straggler_sentence(s), 600)}.",
                f"  _{md_text(forecast_sentence(s), 1200)}._"]
    for extra in (arrivals_sentence(job), present_sentence(job)):
        if extra:
            out.append(f"- {md_text(extra, 600)}.")
    c = data.get("collectives") or {}
    out += ["", f"- {md_text(exposed_sentence(job), 300)}.", f"- {md_text(clock_sentence(c), 400)}."]
    if p2p_sentence(c):
        out.append(f"- {md_text(p2p_sentence(c), 400)}.")
    out += ["", "| Rank | Step | " + " | ".join(CATEGORY_LABELS[c] for c in CATEGORIES) + " | Waits | Caused |",
            "|--:|--:|" + "--:|" * len(CATEGORIES) + "--:|--:|"]
    for r in ranks[:MAX_RANK_ROWS]:
        t = r.get("time_us") or {}
        out.append(f"| {md_cell(r.get('rank'), 12)} | {fmt_us(r.get('step_time_us'))} | "
                   + " | ".join(fmt_us(t.get(c)) for c in CATEGORIES)
                   + f" | {fmt_us(r.get('wait_us_per_step'))} | {fmt_us(r.get('caused_wait_us_per_step'))} |")
    if len(ranks) > MAX_RANK_ROWS:
        out += ["", f"_… {len(ranks) - MAX_RANK_ROWS} more ranks in report.json._"]
    if number(job.get("absent_wait_us_per_step")):
        out += ["", f"_Ranks not in the folder caused {fmt_us(job.get('absent_wait_us_per_step'))} per step._"]
    out += ["", "_Per step. Waits: the rank's wait in collectives; caused: the wait it caused each other rank._"]
    out += [f"- **Warning:** {md_text(w, 800)}" for w in job.get("warnings") or []]
    return "\n".join(out)
