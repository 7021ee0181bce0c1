"""diff@1 dict -> terminal text and GitHub-flavoured Markdown (a pull-request comment).

The Markdown is always under MAX_CHARS (GitHub's comment limit is 65,536): rows, names and lists are
capped, and a section that would not fit is replaced by a line saying so. Names from traces go
through `perfsleuth.report.escape` (code spans in table cells, escaped inline text), so backticks, pipes,
newlines and HTML in a kernel name render as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..report.escape import md_cell, md_code, md_text, one_line, shorten, terminal
from ..report import figures
from . import safe_write
from .efficiency_text import diff_lines as efficiency_diff_lines
from .memory_diff import memory_lines
from .outputs import to_json
from ..report.present import CATEGORY_LABELS, DASH, fmt_pct, fmt_us, number
from .terminal import shown_path

MAX_CHARS = 60_000
MAX_ROWS = 10  # rows per slower / faster table
MAX_FINDINGS = 20  # per appeared / gone list
MAX_WARNINGS = 10
MAX_NAME = 120
TERM_NAME = 100
_MARK = {"regression": "▲", "improvement": "▼", "within noise": "≈"}


# ---------------------------------------------------------------- shared bits


def _signed_us(us: Any) -> str:
    v = number(us)
    if v is None:
        return DASH
    return ("+" if v > 0 else "−" if v < 0 else "±") + fmt_us(abs(v))


def _signed_pct(x: Any) -> str:
    v = number(x)
    if v is None:
        return "new"
    if v >= 9:  # ten times and more: a factor (a percentage of 15 digits says nothing more)
        return f"×{v + 1:,.0f}"
    return ("+" if v > 0 else "−" if v < 0 else "±") + fmt_pct(abs(v))


def _step_pct(st: dict) -> str:
    """The step time's change as a percentage; none against a base whose median step is 0 µs (diff.py)."""
    if number(st.get("change")) is None and number(st.get("change_us")):
        return "no percentage: the base's median step is 0 µs"
    return _signed_pct(st.get("change"))


def _pp(x: Any) -> str:
    v = number(x)
    if v is None:
        return DASH
    return ("+" if v > 0 else "−" if v < 0 else "±") + f"{abs(v) * 100:.1f} pp"


def _call(call: Any) -> str:
    c = str(call)
    return f"{_MARK.get(c, '?')} {c}"


def _headline_text(d: dict) -> str:
    st = d["step_time"]
    change = ("no change" if number(st["change_us"]) == 0
              else f"{_signed_us(st['change_us'])}, {_step_pct(st)}")
    basis = " without the profiler" if st.get("basis") == "unprofiled" else ""
    return (f"median step{basis} {fmt_us(st['base']['median'])} → {fmt_us(st['head']['median'])} ({change}): "
            f"{st['call']}")


def differences_sentence(items: list) -> str:
    """One sentence for what differs between the two runs (cli/diff.py `differences`), or ''."""
    words = {"device": "device {base} vs {head}", "program": "program {base} vs {head}",
             "steps": "{base} vs {head} steps compared"}
    said = [words[x["what"]].format(base=one_line(x["base"]), head=one_line(x["head"]))
            for x in items if x.get("what") in words]
    if not said:
        return ""
    return (f"the runs differ ({'; '.join(said)}): a change between them need not come from "
            "the code; compare one program on one machine, over as many steps")


def _noise_sentence(st: dict) -> str:
    band = fmt_us(st["noise_us"])
    if st["call"] == "within noise":
        return f"The change is within the step-to-step noise (±{band}): not a regression or an improvement."
    return f"The change is outside the step-to-step noise (±{band})."


def _plain(text: Any, limit: int = TERM_NAME) -> str:
    """Terminal-safe: one line, no control characters, at most `limit` characters."""
    return shorten(terminal(one_line(text)), limit)


# ---------------------------------------------------------------- terminal


def render_diff_terminal(d: dict) -> str:
    st, v = d["step_time"], d["verdict"]
    base, head = (d[side].get("path") for side in ("base", "head"))
    lines = [f"perfsleuth diff — base: {_plain(shown_path(base) if base else base)}",
             f"{'':16}head: {_plain(shown_path(head) if head else head)}", "",
             f"step time: {_headline_text(d)}".replace(": regression", ": REGRESSION")
             .replace("median step ", "median ", 1)]
    differ = differences_sentence(d.get("differences") or [])
    if differ:  # right under the headline: what the change may come from instead (issue 37)
        lines.append(f"warning: {_plain(differ, 400)}")
    lines.append(f"  {_noise_sentence(st)}")
    for label in ("base", "head"):
        s = st[label]
        steps = f"{s['n']} step{'s' if s['n'] != 1 else ''}"
        lines.append(f"  {label}: {steps}, MAD {fmt_us(s['mad'])}, range {fmt_us(s['min'])} – "
                     f"{fmt_us(s['max'])}")
    verdict = (f"{_plain(v['base'], 40)} → {_plain(v['head'], 40)} (changed)" if v["changed"]
               else f"{_plain(v['head'], 40)} (unchanged)")
    lines += [f"verdict: {verdict}", "",
              f"{'category':<14}{'base':>7}{'head':>7}{'Δ share':>10}   {'median per step':<24}  call"]
    for c in d["categories"]:
        per_step = f"{fmt_us(c['base_us_per_step'])} → {fmt_us(c['head_us_per_step'])}"
        lines.append(f"{c['category']:<14}{fmt_pct(c['base_share']):>7}{fmt_pct(c['head_share']):>7}"
                     f"{_pp(c['share_change']):>10}   {per_step:<24}  {_call(c['call'])}")
    if _ungated_note(d):
        lines.append(_ungated_note(d))
    f = d["findings"]
    for label, key in (("findings appeared", "appeared"), ("findings gone", "gone")):
        if f[key]:
            lines += ["", f"{label}:"] + [f"  {_plain(x['rule'], 60)}: {_plain(x.get('title') or '', 100)}  "
                                          f"({_plain(figures.number_text(x, 120), 300)})"
                                          for x in f[key][:MAX_FINDINGS]]
            if len(f[key]) > MAX_FINDINGS:
                lines.append(f"  … {len(f[key]) - MAX_FINDINGS} more")
    changed = _changed_numbers(f)
    if changed:
        lines += ["", "findings in both whose number changed:"] + [
            f"  {_plain(x['rule'], 60)}: {_plain(before, 60)} → {_plain(after, 60)}" for x, before, after in changed]
    memory = memory_lines(d.get("memory"), _plain)
    lines += [""] + memory if memory else []
    for what, key in (("kernels", "kernels"), ("ops", "ops")):
        lines += _terminal_changes(what, d[key])
    lines += [_plain(x, 400) for x in efficiency_diff_lines(d)]
    for w in d.get("warnings") or []:
        if w != differ:  # said under the headline
            lines.append(f"warning: {_plain(w, 300)}")
    return "\n".join(lines)


def _terminal_changes(what: str, block: dict) -> list:
    out = []
    for label, key in (("slower", "slower"), ("faster", "faster")):
        rows = block.get(key) or []
        if not rows:
            continue
        total = block.get(f"{key}_count", len(rows))
        out += ["", f"{what} {label} (per step, {min(len(rows), MAX_ROWS)} of {total}):"]
        for r in rows[:MAX_ROWS]:
            tag = f" [{r['status']}]" if r.get("status") in ("new", "gone") else ""
            out.append(f"  {_signed_us(r['change_us_per_step']):>11}  {_side_us(r, 'base'):>9} → "
                       f"{_side_us(r, 'head'):<9}  {_plain(r['name'])}{tag}")
    if not out:
        out = ["", f"{what}: " + (_NONE if not block.get("compared") else "no per-step change")]
    return out


_NONE = "none in either run"  # a CPU-only diff has no device kernels to compare


# ---------------------------------------------------------------- Markdown


def render_diff_markdown(d: dict) -> str:
    """The diff as a pull-request comment: fewer than MAX_CHARS characters, whatever the names."""
    memory = memory_lines(d.get("memory"), lambda s: md_text(s, MAX_NAME))
    sections = [_md_headline(d), _md_step_table(d), _md_warnings(d), _md_categories(d),
                "\n".join(f"- {x}" for x in memory), _md_findings(d),
                _md_changes("Kernels", "Kernel", d["kernels"]), _md_changes("Ops", "Op", d["ops"]),
                "\n".join(md_text(x) for x in efficiency_diff_lines(d) if x)]
    footer = _md_footer(d)
    out = ""
    for s in (s for s in sections if s):
        if len(out) + len(s) + len(footer) + 300 > MAX_CHARS:
            out += "_… a section was left out to stay within GitHub's comment limit; see diff.json._\n\n"
            continue
        out += s + "\n\n"
    return out + footer + "\n"


def _md_headline(d: dict) -> str:
    st, v = d["step_time"], d["verdict"]
    verdict = (f"verdict {md_code(v['base'], 40)} → {md_code(v['head'], 40)}" if v["changed"]
               else f"verdict {md_code(v['head'], 40)} (unchanged)")
    basis = " without the profiler" if st.get("basis") == "unprofiled" else ""
    differ = differences_sentence(d.get("differences") or [])
    warning = f"\n\n> **Warning:** {md_text(differ, 400)}" if differ else ""
    return (f"### perfsleuth diff: median step{basis} **{_step_pct(st)}** "
            f"({md_text(_call(st['call']))}) · {verdict}{warning}\n\n"
            f"> {md_text(_noise_sentence(st))}")


def _md_step_table(d: dict) -> str:
    st = d["step_time"]
    b, h = st["base"], st["head"]
    return "\n".join([
        f"| Step time{' (without the profiler)' if st.get('basis') == 'unprofiled' else ''} | Base | Head | Change |",
        "|:--|--:|--:|--:|",
        f"| Median | {fmt_us(b['median'])} | {fmt_us(h['median'])} | **{_signed_us(st['change_us'])}** "
        f"({_step_pct(st)}) |",
        f"| Spread (MAD) | {fmt_us(b['mad'])} | {fmt_us(h['mad'])} | noise band ±{fmt_us(st['noise_us'])} |",
        f"| Range | {fmt_us(b['min'])} – {fmt_us(b['max'])} | {fmt_us(h['min'])} – {fmt_us(h['max'])} | |",
        f"| Steps | {b['n']} | {h['n']} | |",
    ])


def _md_warnings(d: dict) -> str:
    differ = differences_sentence(d.get("differences") or [])
    ws = [w for w in d.get("warnings") or [] if w != differ]  # that one is under the headline
    if not ws:
        return ""
    lines = [f"- {md_text(w, 300)}" for w in ws[:MAX_WARNINGS]]
    if len(ws) > MAX_WARNINGS:
        lines.append(f"- … {len(ws) - MAX_WARNINGS} more warnings in diff.json")
    return "**Warnings**\n\n" + "\n".join(lines)


def _md_categories(d: dict) -> str:
    rows = ["| Category | Base | Head | Δ share | Median per step | Call |", "|:--|--:|--:|--:|--:|:--|"]
    for c in d["categories"]:
        label = CATEGORY_LABELS.get(c["category"], md_text(c["category"], 40))
        rows.append(f"| {label} | {fmt_pct(c['base_share'])} | {fmt_pct(c['head_share'])} | {_pp(c['share_change'])} "
                    f"| {fmt_us(c['base_us_per_step'])} → {fmt_us(c['head_us_per_step'])} | {md_text(_call(c['call']))} |")
    note = _ungated_note(d)
    return "\n".join(rows) + (f"\n\n_{md_text(note)}_" if note else "")


def _ungated_note(d: dict) -> str:
    """Under the category table when a category's share grew with its time beyond noise: a ▲ there
    fails no build unless a gate names it (issue 37: nothing said that categories are not gated)."""
    grew = [c for c in d["categories"] if c.get("call") == "regression"
            and (number(c.get("share_change")) or 0) > 0]
    if not grew:
        return ""
    return (f"▲ is a change beyond noise; a category fails no gate unless named "
            f"(--fail-on-regression {grew[0]['category']}:+10pp)")


def _changed_numbers(f: dict) -> list:
    """(finding, base number, head number) of the findings in both whose shown number differs."""
    out = []
    for x in (f.get("kept") or [])[:MAX_FINDINGS]:
        before = _short_number(x.get("base_number"))
        after = figures.short_text(x)
        if isinstance(x.get("base_number"), dict) and before != after:
            out.append((x, before, after))
    return out


def _short_number(h: Any) -> str:
    """A headline number (report/numbers.headline) as figures.short_text words it."""
    h = h if isinstance(h, dict) else {}
    x = number(h.get("speedup"))
    if x is None:
        return "no forecast"
    return f"{'measured' if h.get('kind') == 'measured' else 'est.'} {x:.2f}×"


def _md_findings(d: dict) -> str:
    f = d["findings"]
    changed = _changed_numbers(f)
    changed_md = "\n".join(["**Findings in both whose number changed**", ""] + [
        f"- {md_code(x['rule'], 60)}: {md_text(before, 60)} → {md_text(after, 60)}" for x, before, after in changed])
    if not f["appeared"] and not f["gone"]:
        kept = len(f.get("kept") or [])
        head = f"**Findings:** none appeared or went away ({kept} in both)."
        return f"{head}\n\n{changed_md}" if changed else head
    parts = []
    for label, key in (("Appeared", "appeared"), ("Gone", "gone")):
        items = f[key]
        if not items:
            continue
        lines = [f"**Findings {label.lower()}** ({len(items)})", ""]
        for x in items[:MAX_FINDINGS]:
            sev = f" ({md_text(x.get('severity'), 20)})" if x.get("severity") else ""
            lines.append(f"- {md_code(x['rule'], 60)}{sev}: {md_text(x.get('title') or '', 200)} — "
                         f"{md_text(figures.number_text(x, 120), 300)}")
        if len(items) > MAX_FINDINGS:
            lines.append(f"- … {len(items) - MAX_FINDINGS} more in diff.json")
        parts.append("\n".join(lines))
    if changed:
        parts.append(changed_md)
    return "\n\n".join(parts)


def _md_changes(title: str, noun: str, block: dict) -> str:
    slower, faster = block.get("slower") or [], block.get("faster") or []
    n_slow, n_fast = block.get("slower_count", len(slower)), block.get("faster_count", len(faster))
    if not slower and not faster:
        compared = block.get("compared") or 0
        if not compared:
            return f"**{title}:** {_NONE}."
        return (f"<details><summary>{title}: no per-step change</summary>\n\nNone of the {compared} compared "
                "changed.\n\n</details>")
    body = []
    for label, rows, total in (("Slower", slower, n_slow), ("Faster", faster, n_fast)):
        if not rows:
            continue
        body += [f"**{label}** ({min(len(rows), MAX_ROWS)} of {total})", "",
                 f"| {noun} | Base / step | Head / step | Change | Calls / step |", "|:--|--:|--:|--:|--:|"]
        for r in rows[:MAX_ROWS]:
            tag = f" ({r['status']})" if r.get("status") in ("new", "gone") else ""
            body.append(f"| {md_cell(r['name'], MAX_NAME, code=True)}{tag} | {_side_us(r, 'base')} "
                        f"| {_side_us(r, 'head')} | {_signed_us(r['change_us_per_step'])} "
                        f"| {_count(r.get('base_count_per_step'))} → {_count(r.get('head_count_per_step'))} |")
        body.append("")
    if block.get("unmatched"):
        body.append(f"_{block['unmatched']} names are in only one side's top list and were not compared._\n")
    return f"<details><summary>{title}: {n_slow} slower, {n_fast} faster</summary>\n\n" + "\n".join(body) + "\n</details>"


def _side_us(row: dict, side: str) -> str:
    """Per-step time of one side, a dash where the name is absent there (new / gone)."""
    absent = "gone" if side == "head" else "new"
    return DASH if row.get("status") == absent else fmt_us(row.get(f"{side}_us_per_step"))


def _count(x: Any) -> str:
    v = number(x)
    return DASH if v is None else f"{v:g}"


def _md_footer(d: dict) -> str:
    bits = []
    for label in ("base", "head"):
        s = d[label]
        device = md_text(s.get("device") or "CPU only", 80)
        bits.append(f"{label} {md_code(s.get('path') or '?', 120)} ({device})")
    bits.append(f"perfsleuth {md_text((d.get('tool') or {}).get('version') or '?', 20)}")
    return "<sub>" + " · ".join(bits) + "</sub>"


# ---------------------------------------------------------------- files


def _diff_targets(json_path, markdown_path) -> list:
    return [(kind, Path(p)) for kind, p in (("JSON", json_path), ("Markdown", markdown_path)) if p is not None]


def check_diff_outputs(json_path, markdown_path, force: bool) -> None:
    """Before any work: the targets are distinct regular files (or absent) that can be written, and
    absent unless `force`. Raises UsageError."""
    safe_write.check_targets(_diff_targets(json_path, markdown_path), force)


def write_diff_outputs(d: dict, *, json_path=None, markdown_path=None, force: bool = False) -> list:
    """Write diff.json / the Markdown comment as a set (safe_write.write_set); return the paths."""
    targets = _diff_targets(json_path, markdown_path)
    texts = {"JSON": lambda: to_json(d),
             "Markdown": lambda: render_diff_markdown(d)}
    contents = [(path, texts[kind]()) for kind, path in targets]
    return safe_write.write_set(contents, force, kinds=[kind for kind, _ in targets])
