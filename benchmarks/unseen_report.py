"""benchmarks/unseen.py's numbers and its section of docs/accuracy.md: pair statistics, the Markdown
table, and the writer that replaces only the section between its markers (fix_verification.py, which
writes the rest of the file, keeps that section as it finds it).

No torch, no perfsleuth: tests/e2e/test_unseen_bench.py checks these on fixed numbers.
"""

from __future__ import annotations

import statistics
from pathlib import Path

BEGIN = "<!-- unseen:begin (written by benchmarks/unseen.py --write) -->"
END = "<!-- unseen:end -->"
GOAL = (0.8, 1.25)  # --verify within this factor of the independent A/B


def run_time(run: dict, stat: str = "mean") -> float:
    """One run's step time (s) over its timed steps: their median, or their mean (a throughput, right
    where steps alternate between waiting for a batch and not)."""
    steps = run["step_s"]
    return statistics.median(steps) if stat == "median" else statistics.fmean(steps)


def ab_summary(pairs: list, stat: str = "mean") -> dict:
    """Speed-up of B over A: the median of the pair ratios A/B, with the lowest and highest pair."""
    ratios = [run_time(p["a"], stat) / run_time(p["b"], stat) for p in pairs
              if all(p.get(k) and p[k].get("step_s") and "error" not in p[k] for k in ("a", "b"))]
    if not ratios:
        return {"speedup": None, "low": None, "high": None, "pairs": 0, "pair_ratios": []}
    return {"speedup": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "pairs": len(ratios),
            "pair_ratios": [round(r, 4) for r in ratios], "noise": min(ratios) <= 1.0 <= max(ratios)}


def ratio(x, y):
    return x / y if x and y else None


def within_goal(r) -> bool:
    return r is not None and GOAL[0] <= r <= GOAL[1]


def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _range(d: dict, pairs: bool = False) -> str:
    if not d or d.get("speedup") is None:
        return "—"
    text = f"**{d['speedup']:.2f}x** ({d['low']:.2f}–{d['high']:.2f}x"
    return text + (f", {d['pairs']} pair{'s' if d['pairs'] != 1 else ''})" if pairs else ")")


def _forecast(fc: dict) -> str:
    if not fc:
        return "—"
    if fc.get("speedup") is None:
        return f"none ({fc.get('kind') or 'no forecast'})"
    return f"{fc['speedup']:.2f}x ({fc['low']:.2f}–{fc['high']:.2f}x)"


def _load(pairs: list) -> str:
    loads = [x for p in pairs for x in (p["load"][0][0], p["load"][1][0])]
    others = [p["others_cores"] for p in pairs if p.get("others_cores") is not None]
    if not loads:
        return "—"
    text = f"{min(loads):.2f}–{max(loads):.2f}"
    return text + (f"; others {min(others):.2f}–{max(others):.2f} cores" if others else "")


def _verify(row: dict) -> str:
    v = row.get("verified")
    if isinstance(v, dict):
        return _range(v, pairs=True)
    return str(row.get("verify_status") or "not available")


def row_cells(row: dict, stat: str) -> list:
    ind = ab_summary(row.get("pairs") or [], stat)
    fc = row.get("forecast") or {}
    v = row.get("verified") if isinstance(row.get("verified"), dict) else {}
    finding = f"`{row['rule']}` [{row['severity']}]" if row.get("severity") else f"none fired; tried `{row['rule']}`"
    vi, fi = ratio(v.get("speedup"), ind["speedup"]), ratio(fc.get("speedup"), ind["speedup"])
    return [f"`{row['program']}`", f"{finding}: {row['variant']}", _forecast(fc), _verify(row),
            _range(ind, pairs=True), "—" if vi is None else f"{vi:.2f}" + ("" if within_goal(vi) else " (**off**)"),
            "—" if fi is None else f"{fi:.2f}",
            _load(row.get("pairs") or [])]


def render(doc: dict, stat: str = "mean") -> str:
    rows = doc["rows"]
    if not rows:
        return (f"## On programs the models were not fitted to\n\n{doc['method']}\n\n"
                f"Not measured yet: {doc.get('why', 'no results')}.\n")
    head = ("| program | finding: fix applied | forecast (range) | `--verify` measured (range, pairs) | "
            "independent A/B (range, pairs) | verify / independent | forecast / independent | load (1 min); others |")
    out = ["## On programs the models were not fitted to", "", doc["method"], "",
           f"Generated {doc['recorded']} by `{doc['command']}`"
           f"{' (**smoke run: not measurements**)' if doc.get('smoke') else ''}; "
           f"per run the {stat} step time of its timed steps. {doc['machine_line']}", "", head,
           "|" + "---|" * 8]
    out += ["| " + " | ".join(row_cells(r, stat)) + " |" for r in rows]
    compared = [ratio((r.get("verified") or {}).get("speedup") if isinstance(r.get("verified"), dict) else None,
                      ab_summary(r.get("pairs") or [], stat)["speedup"]) for r in rows]
    met = sum(within_goal(c) for c in compared)
    have = sum(c is not None for c in compared)
    out += ["", f"Goal: `--verify` within {GOAL[0]}–{GOAL[1]}x of the independent A/B on every program: "
            f"{met} of {len(rows)} programs ({have} with a `--verify` measurement to compare)."]
    failed = [r for r in rows if r.get("problem")]
    if failed:
        out += ["", "Problems: " + "; ".join(f"`{r['program']}`: {r['problem']}" for r in failed) + "."]
    out += ["", "Programs and commands (in a copy of the program's folder; `E` = the pytorch/examples checkout):", ""]
    out += [f"- `{r['program']}`: {r['title']}. `{r['command']}`; fix: {r['variant']}; runner: {r['runner']}."
            for r in rows]
    return "\n".join(out) + "\n"


def write_section(path: Path, text: str) -> None:
    """Replace what lies between the markers; a file without them gets the section at its end."""
    old = path.read_text() if path.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        path.write_text(f"{head}{BEGIN}\n{text}{END}{rest.split(END, 1)[1]}")
    else:
        path.write_text(f"{old.rstrip()}\n\n{BEGIN}\n{text}{END}\n" if old else f"{BEGIN}\n{text}{END}\n")


def kept_section(path: Path) -> str:
    """The marked section of `path` with its markers, or '' (fix_verification.py appends it to what it writes)."""
    old = path.read_text() if path.exists() else ""
    if BEGIN not in old or END not in old:
        return ""
    return BEGIN + old.split(BEGIN, 1)[1].split(END, 1)[0] + END + "\n"


# --- each rule's forecasts on these programs: analyzer/engine/unseen_record.py ---------------------------------
RIGHT = (0.67, 1.5)  # a forecast within this factor of the measurement is right (as in fix_verification.py) ...
NO_HELP, AT_MOST = 1.1, 1.2  # ... and a fix measured below 1.1x must have been forecast at 1.2x or less


def forecast_right(forecast: float, measured: float) -> bool:
    """The criterion of docs/accuracy.md, applied to a finding's forecast and its `--verify` measurement."""
    if measured < NO_HELP and forecast > AT_MOST:
        return False
    return RIGHT[0] <= forecast / measured <= RIGHT[1]


# A rule's record counts the runs made after its forecast model last changed (`recorded`, "YYYY-MM-DD HH:MM"):
# the checks before judge a model that is gone. Issue 37 item 4: fewer-threads gives no number; the worker model
# counts the process's other threads and gives no number where torch's threads and the workers crowd the cores.
MODEL_CHANGED = {"cpu-threads": "2026-12-02 11:00", "num-workers": "2026-12-02 11:00"}


def rule_record(docs: list) -> dict:
    """{rule: {"checked", "right", "missed": [program, ...]}}: every finding of every (non-smoke) run whose forecast
    and `--verify` measurement are both numbers, judged by `forecast_right`, from the runs after the rule's model
    last changed (MODEL_CHANGED). analyzer/engine/unseen_record.py holds
    it for the committed results (tests/e2e/test_unseen_bench.py checks that it does)."""
    record: dict = {}
    for doc in docs:
        if doc.get("smoke"):
            continue
        for row in doc.get("rows") or []:
            for f in row.get("findings") or []:
                if str(doc.get("recorded") or "") < MODEL_CHANGED.get(f["rule"], ""):
                    continue
                fc, v = f.get("forecast") or {}, f.get("verified") or {}
                if fc.get("kind", "forecast") != "forecast" or not fc.get("speedup") or not v.get("speedup"):
                    continue
                r = record.setdefault(f["rule"], {"checked": 0, "right": 0, "missed": []})
                r["checked"] += 1
                if forecast_right(float(fc["speedup"]), float(v["speedup"])):
                    r["right"] += 1
                elif row["program"] not in r["missed"]:
                    r["missed"].append(row["program"])
    return {rule: {**r, "missed": sorted(r["missed"])} for rule, r in sorted(record.items())}
