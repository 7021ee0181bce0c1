"""The cross-rank section of the HTML page (templates/_ranks.html.j2): per job, the ranks x categories
heatmap and the straggler explanation (or why there is none), computed from the report-set@1 dict;
then the set's warnings (why traces were split into jobs or left out). Kept apart from html.py so the
per-file index and this section change independently."""

from __future__ import annotations

from ..config import CATEGORIES
from ..report.escape import shorten
from ..report.present import CATEGORY_LABELS, number
from .ranks_text import (MAX_RANK_ROWS, arrivals_sentence, clock_sentence, exposed_sentence, forecast_sentence,
                         job_sections, p2p_sentence, present_sentence, ranks_heading, set_warnings,
                         straggler_sentence, verdict_word)


def ranks_view(data: dict) -> dict | None:
    """What _ranks.html.j2 shows, or None when the set has neither a cross-rank report nor a warning
    about its jobs. Each cell's shade is the category's share of that rank's step (the template
    escapes every string)."""
    sections = job_sections(data)
    jobs = [{**_job_view(j), "label": f"Job {i + 1} of {len(sections)}: " if len(sections) > 1 else ""}
            for i, j in enumerate(sections)]
    warnings = set_warnings(data)
    if not jobs and not warnings:
        return None
    return {"jobs": jobs, "warnings": warnings}


def _job_view(data: dict) -> dict:
    job = data["job"]
    stragglers = {s.get("rank") for s in data.get("stragglers") or []}
    rows = []
    for r in data["ranks"][:MAX_RANK_ROWS]:
        t = r.get("time_us") or {}
        step = number(r.get("step_time_us")) or 0.0
        total = sum(number(t.get(c)) or 0.0 for c in CATEGORIES) or step
        cells = [{"category": c, "us": number(t.get(c)),
                  "alpha": round(min(1.0, (number(t.get(c)) or 0.0) / total), 3) if total > 0 else 0.0}
                 for c in CATEGORIES]
        rows.append({"rank": r.get("rank"), "path": shorten(str(r.get("path") or ""), 160),
                     "step": r.get("step_time_us"),
                     "cells": cells, "waits": r.get("wait_us_per_step"), "caused": r.get("caused_wait_us_per_step"),
                     "verdict": str(r.get("verdict") or ""), "straggler": r.get("rank") in stragglers,
                     "critical": r.get("rank") == job.get("critical_rank")})
    verdict = verdict_word(job)
    first = (data.get("stragglers") or [{}])[0]
    shade = str(first.get("cause")) if verdict == "straggler-bound" else verdict.removesuffix("-bound")
    collectives = data.get("collectives") or {}
    return {
        "verdict": verdict, "verdict_class": shade if shade in CATEGORIES else "other",
        "reason": str(job.get("verdict_reason") or ""),
        "heading": ranks_heading(job), "step": job.get("step_time_us"),
        "categories": [(c, CATEGORY_LABELS[c]) for c in CATEGORIES], "rows": rows,
        "more": max(0, len(data["ranks"]) - MAX_RANK_ROWS),
        "stragglers": [{"sentence": straggler_sentence(s), "forecast": forecast_sentence(s)}
                       for s in data.get("stragglers") or []],
        "arrivals": "; ".join(x for x in (arrivals_sentence(job), present_sentence(job)) if x),
        "absent": number(job.get("absent_wait_us_per_step")) or 0.0,
        "exposed": exposed_sentence(job), "clock": clock_sentence(collectives), "p2p": p2p_sentence(collectives),
        "warnings": [str(w) for w in job.get("warnings") or []],
    }
