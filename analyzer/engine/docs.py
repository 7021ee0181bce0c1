"""Rule docs as text: `perfsleuth rules`, `perfsleuth rules SLUG`, and the catalog in docs/rules.md."""

from __future__ import annotations

import re

from ..config import CATEGORIES
from ..errors import UsageError
from ..facts.requirements import REQUIREMENTS
from ..report.escape import terminal
from .catalog import DOC_SECTIONS, DOC_TITLES, TABLES, Rule

GENERATED_BEGIN = "<!-- BEGIN GENERATED: perfsleuth rules --markdown -->"
GENERATED_END = "<!-- END GENERATED -->"


RULE_LIST_BEGIN = "<!-- BEGIN GENERATED: rule list (python scripts/readme_sample.py) -->"


def rule_list(rules: list) -> str:
    """The README's list of the catalogue's rules, by category in report order (scripts/readme_sample.py writes
    it between RULE_LIST_BEGIN and GENERATED_END; tests/e2e/test_readme.py checks it)."""
    by: dict = {}
    for r in rules:
        by.setdefault(r.category, []).append(r.slug)
    order = [c for c in CATEGORIES if c in by] + sorted(set(by) - set(CATEGORIES))
    parts = [f"{c}: " + ", ".join(f"`{s}`" for s in by[c]) for c in order]
    return f"The {len(rules)} rules of the catalogue, by category — " + "; ".join(parts) + "."


def find_rule(rules: list, slug: str) -> Rule:
    for r in rules:
        if r.slug == slug:
            return r
    raise UsageError(f"no rule '{slug}' (see `perfsleuth rules` for the catalog)")


def listing(rules: list) -> str:
    """One line per rule: slug, category, severity, title."""
    width = max((len(r.slug) for r in rules), default=4)
    lines = [f"{'rule':<{width}}  {'category':<13}  {'severity':<8}  title"]
    for r in sorted(rules, key=lambda r: (r.category, r.slug)):
        lines.append(f"{r.slug:<{width}}  {r.category:<13}  {r.severity:<8}  {terminal(r.title)}")
    lines.append("")
    lines.append("`perfsleuth rules SLUG` prints a rule's docs.")
    return "\n".join(lines)


def _severity_text(r: Rule) -> str:
    """The rule's own severity: what its finding shows while it has no forecast or measurement (at most
    medium); with one, severity follows that number (docs/rules.md#a-finding)."""
    extra = "; ".join(f"{s} when `{e}`" for s, e in r.severity_when)
    return r.severity + (f" ({extra})" if extra else "")


def gpu_only(r: Rule) -> bool:
    """The rule's condition is `device_is_gpu and ...`: it can never fire on a CPU-only trace."""
    return re.match(r"\s*device_is_gpu\s*(and\b|$)", r.condition) is not None


def rule_markdown(r: Rule, heading: str = "#") -> str:
    """A rule's docs with the fixed sections (ruff style)."""
    out = [f"{heading} `{r.slug}`: {r.title}", "",
           f"Category: `{r.category}` · severity: from the forecast (or measurement); without one, "
           f"{_severity_text(r)}, at most medium · defined in `{r.source}`", ""]
    for section in DOC_SECTIONS:
        out.append(f"{heading}# {DOC_TITLES[section]}")
        out.append("")
        if section == "references":
            out += [f"- <{ref}>" for ref in r.docs["references"]]
        else:
            out.append(r.docs[section].strip())
        if section == "thresholds":
            out += ["", "| threshold | default | override |", "|---|---|---|"]
            out += [f"| `{k}` | {v} | `--set {r.slug}.{k}={v}` |" for k, v in r.thresholds.items()]
        out.append("")
    out += [f"{heading}# Condition", "", "```jinja", r.condition, "```", "",
            f"Ceiling (JSON `ceiling`, never the finding's number): `{r.saving_us}` per step ({r.saving_basis}).", "",
            (f"Forecast: model `{r.forecast}` — {_window_models()[r.forecast].__doc__} ([compile.md](compile.md))."
             if r.forecast and r.forecast in _window_models() else
             f"Forecast: model `{r.forecast}` — the steady step replayed with the fix applied "
             "([forecast.md](forecast.md))." if r.forecast else
             f"Forecast: none — {r.no_forecast}; the finding says \"no forecast\" and why." if r.no_forecast else
             "Forecast: none — no model is good enough for this fix; the finding says \"no forecast\"."), ""]
    if r.requires:
        needs = "; ".join(f"`{name}`: {REQUIREMENTS[name][1]}" for name in r.requires)
        applies = f" and `{r.applies}` holds" if r.applies else ""
        out += [f"Requires {needs}. Without it, when the rule does not fire{applies}, the report lists it under "
                "`not_checked`.", ""]
    if gpu_only(r):  # its CPU wording (for rule files that drop the gate) is never shown: not documented as if it were
        out += ["On CPU-only traces: never fires (its condition requires `device_is_gpu`).", ""]
    elif r.cpu:
        out += ["On CPU-only traces: " + "; ".join(f"{k.replace('_', ' ')} \"{v}\"" for k, v in r.cpu.items()) + ".", ""]
    if r.locations:
        out += [f"Source locations: `{r.locations}` (with python stacks).", ""]
    return "\n".join(out)


def facts_markdown() -> str:
    from ..facts.core import FACTS  # the providers' registries: numpy and pandas, for --markdown only

    out = ["| fact | unit | meaning |", "|---|---|---|"]
    out += [f"| `{name}` | {unit} | {desc} |" for name, (unit, desc) in FACTS.items()]
    out += ["", "Evidence tables (lists of rows) usable in templates and as `locations`: "
            + ", ".join(f"`{t}`" for t in TABLES) + "."]
    return "\n".join(out)


def dtype_table_markdown() -> str:
    from ..facts.device import INPUT_TYPE_DTYPES, KERNEL_DTYPE_HINTS

    out = ["| cpu_op `Input type` (first tensor) | dtype |", "|---|---|"]
    out += [f"| `{k}` | {v} |" for k, v in INPUT_TYPE_DTYPES.items()]
    out += ["", "| kernel name matches (case-insensitive, first row wins) | dtype |", "|---|---|"]
    out += [f"| `{pattern.replace('|', ' · ')}` | {dtype} |" for dtype, pattern in KERNEL_DTYPE_HINTS]
    return "\n".join(out)


def catalog_markdown(rules: list) -> str:
    """The generated part of docs/rules.md: index, every rule's docs, the facts, the dtype table."""
    ordered = sorted(rules, key=lambda r: (r.category, r.slug))
    out = [GENERATED_BEGIN, "", "## Catalog", "", "| rule | category | severity | title |", "|---|---|---|---|"]
    out += [f"| [`{r.slug}`](#{r.slug}) | {r.category} | {r.severity} | {r.title} |" for r in ordered]
    out.append("")
    for r in ordered:
        out += [f'<a id="{r.slug}"></a>', "", rule_markdown(r, heading="###")]
    out += ["## Facts", "", facts_markdown(), "", "## GEMM dtype detection", "", dtype_table_markdown(), "",
            GENERATED_END]
    return "\n".join(out) + "\n"


def _window_models() -> dict:
    """torch.compile's forecast models (analysis/forecast/models/compile.py: light, numpy only inside a model)."""
    from ..analysis.forecast.models.compile import WINDOW_MODELS

    return WINDOW_MODELS
