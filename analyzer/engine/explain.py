"""The host-time explanation a report carries: who consumed the host time (the `host_consumers` fact
table) and, when the verdict is host-bound and no host finding names the cause, the plain statement
"host time is spread: the top five consumers are ..." -- a host-bound verdict never comes alone."""

from __future__ import annotations

from ..facts.core import Facts
from ..report.escape import shorten
from ..report.present import fmt_pct, fmt_us

TOP = 5
NAME_CHARS = 160  # of a consumer's name in the statement: the table beside it holds the whole name, once


def _consumer_text(row: dict) -> str:
    text = f"{shorten(str(row['name']), NAME_CHARS)} ({fmt_us(row['us_per_step'])} per step, {fmt_pct(row['share'])} of the step"
    longest, calls = row.get("max_call_us"), row.get("calls_per_step") or 0
    if longest and calls >= 2 and longest >= 0.5 * row["us_per_step"]:  # one call of several is most of it
        text += f"; one call took {fmt_us(longest)}"
        if row.get("kind") == "runtime call" and "Launch" in row["name"]:
            text += ", as a first launch does while it loads the kernel's code: warm-up was profiled"
    return text + ")"


def host_time(verdict: str, findings: list, facts: Facts) -> dict:
    """{"share", "us_per_step", "consumers": top rows, "findings": host rules that fired, "statement"}."""
    consumers = list(facts.tables.get("host_consumers") or [])[:TOP]
    explained = [f["rule"] for f in findings if f.get("category") == "host"]
    statement = ""
    if verdict == "host-bound" and not explained:
        if consumers:
            words = {2: "two", 3: "three", 4: "four", 5: "five"}
            head = f"the top {words.get(len(consumers), len(consumers))} consumers are" if len(consumers) > 1 \
                else "its one consumer is"
            statement = f"host time is spread: {head} " + ", ".join(_consumer_text(c) for c in consumers)
        else:
            statement = "host time is spread: no runtime call, op or Python frame inside the steps accounts for it"
    return {"share": facts.values.get("host_share", 0.0), "us_per_step": facts.values.get("host_us_per_step", 0.0),
            "consumers": consumers, "findings": explained, "statement": statement}
