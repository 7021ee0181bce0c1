"""The rule catalogue: rules are data (rules/*.toml), loaded, validated and compiled once.

Load every rule file (the package's own plus user paths), validate it against one schema, compile
each condition, severity escalation, saving estimate and template once (Jinja2's immutable sandbox,
StrictUndefined: no Python is ever evaluated from a rule file), and reject any name that is neither a
registered fact, one of the rule's thresholds nor an evidence table. `evaluate` runs the compiled
rules over `Facts`. See docs/rules.md.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import math
import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Optional

import tomllib

from ..config import CATEGORIES
from ..errors import TraceError, UsageError
from ..facts.requirements import REQUIREMENTS
from ..trace.files import describe_os_error, open_regular

log = logging.getLogger(__name__)

SEVERITIES = ("low", "medium", "high")
DOC_SECTIONS = ("what", "why", "example", "use_instead", "thresholds", "references")
DOC_TITLES = {"what": "What it does", "why": "Why is this bad?", "example": "Example",
              "use_instead": "Use instead", "thresholds": "Thresholds", "references": "References"}
# Evidence tables rules may name (templates, `locations`); the *_sites ones are source locations.
TABLES = ("sync_sites", "explicit_sync_sites", "gemm_dtypes", "kernel_families", "host_consumers", "host_sites",
          "alloc_sites", "small_op_sites", "optimizer_sites", "dataloader_sites", "zero_grad_sites",
          "pageable_copy_sites", "blocking_copy_sites", "recompile_reasons", "graph_break_reasons",
          "memory_kept_sites", "memory_peak_sites")
_SLUG = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
_REQUIRED = {"slug": str, "title": str, "category": str, "severity": str, "condition": str,
             "saving_us": str, "saving_basis": str, "evidence": list, "message": str, "fix": str,
             "thresholds": dict, "docs": dict}
_OPTIONAL = {"severity_when": dict, "locations": str, "requires": list, "applies": str, "cpu": dict,
             "forecast": str, "no_forecast": str}
CPU_KEYS = ("title", "saving_basis")  # static texts a rule may word differently for CPU-only traces


def _num(v) -> str:
    """Compact number: 1,216 · 189 · 0.5 · 12.5 · 12,345,678 (no exponent); from 100 up, whole (a mean count of ops
    per step read "691.2 ops" to an unseen helper)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.4g}"


@functools.cache
def environment():
    """The Jinja2 environment rules compile in, made on first use (listing the catalog needs no Jinja2):
    bounded in time, memory and output (sandbox.py)."""
    from jinja2 import StrictUndefined

    from ..report.present import fmt_ibytes
    from ..report.present import fmt_bytes, fmt_pct, fmt_us
    from .sandbox import BoundedEnvironment

    env = BoundedEnvironment(undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=False)
    env.add_filters(us=fmt_us, pct=fmt_pct, bytes=fmt_bytes, ibytes=fmt_ibytes, num=_num)
    return env


def registries() -> tuple:
    """(fact names, forecast model names) a user's rule may name; imported only to check such a rule
    (they load the facts' providers and the forecast models: numpy, pandas)."""
    from ..analysis.forecast.models.compile import WINDOW_MODELS
    from ..analysis.forecast.forecaster import MODELS
    from ..facts.core import FACTS

    return FACTS, {**MODELS, **dict.fromkeys(WINDOW_MODELS)}


class RuleError(UsageError):
    """A rule file that does not follow the schema (one line: file, rule, problem)."""


@dataclass(frozen=True)
class Rule:
    slug: str
    title: str
    category: str
    severity: str
    condition: str
    saving_us: str
    saving_basis: str
    evidence: tuple
    message: str
    fix: str
    thresholds: dict
    docs: dict
    source: str
    severity_when: tuple = ()  # ((severity, expression), ...), most severe first
    locations: str = ""
    requires: tuple = ()  # names in facts.core.REQUIREMENTS: facts the rule needs to be checked at all
    applies: str = ""  # expression: the rule is relevant here (then an unmet requirement is "not checked")
    cpu: dict = field(default_factory=dict)  # title / saving_basis for CPU-only traces
    forecast: str = ""  # the forecast model (analysis/forecast/forecaster.py MODELS) of the fix; "" = no forecast
    # without a forecast model: why none is defensible (its saving is a ceiling only); said with "no forecast"
    no_forecast: str = ""

    @functools.cached_property
    def compiled(self) -> "_Compiled":
        """Conditions and templates, each compiled on first use, once per rule object (thresholds are
        runtime names): a rule that never fires never compiles its message."""
        return _Compiled(self)


COMPILED_KEYS = ("condition", "saving_us", "applies", "severity_when", "message", "fix")


class _Compiled(dict):
    """`rule.compiled[key]`: compiled when first looked up."""

    def __init__(self, rule: "Rule"):
        super().__init__()
        self._rule = rule

    def __missing__(self, key: str):
        r = self._rule
        env = environment()
        expr = functools.partial(env.compile_expression, undefined_to_none=False)
        if key == "severity_when":
            value = tuple((s, expr(e)) for s, e in r.severity_when)
        elif key in ("message", "fix"):
            value = env.from_string(getattr(r, key))
        elif key in ("condition", "saving_us"):
            value = expr(getattr(r, key))
        elif key == "applies":
            value = expr(r.applies or "true")
        else:
            raise KeyError(key)
        self[key] = value
        return value


# --- loading and validation -------------------------------------------------------------------
def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _fail(where: str, problem: str):
    raise RuleError(f"{where}: {problem}")


def _check_types(where: str, raw: dict, facts=None) -> None:
    """The keys, their types and values; with `facts` (the registry: a user's rule file) also that no
    threshold shadows a fact."""
    unknown = set(raw) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        _fail(where, f"unknown key(s) {', '.join(sorted(unknown))}")
    for key, typ in {**_REQUIRED, **_OPTIONAL}.items():
        if key not in raw:
            if key in _REQUIRED:
                _fail(where, f"missing required key '{key}'")
            continue
        if not isinstance(raw[key], typ):
            _fail(where, f"'{key}' must be a {typ.__name__}")
    if not _SLUG.match(raw["slug"]):
        _fail(where, f"slug '{raw['slug']}' is not lowercase-with-dashes")
    if raw["category"] not in CATEGORIES:
        _fail(where, f"category '{raw['category']}' is not one of {', '.join(CATEGORIES)}")
    if raw["severity"] not in SEVERITIES:
        _fail(where, f"severity '{raw['severity']}' is not one of {', '.join(SEVERITIES)}")
    for sev in raw.get("severity_when", {}):
        if sev not in SEVERITIES:
            _fail(where, f"severity_when key '{sev}' is not one of {', '.join(SEVERITIES)}")
    for name in raw.get("requires", []):
        if name not in REQUIREMENTS:
            _fail(where, f"requires '{name}' is not one of {', '.join(REQUIREMENTS)}")
    extra = set(raw.get("cpu", {})) - set(CPU_KEYS)
    if extra or not all(isinstance(v, str) and v for v in raw.get("cpu", {}).values()):
        _fail(where, f"'cpu' takes non-empty strings for {', '.join(CPU_KEYS)} only")
    for name, value in raw["thresholds"].items():
        if not _IDENT.match(name) or isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(where, f"threshold '{name}' must be a snake_case name with a number")
        if facts is not None and (name in facts or name in TABLES):
            _fail(where, f"threshold '{name}' shadows a fact of the same name")
        problem = threshold_problem(name, value)
        if problem:
            _fail(where, f"threshold '{name}' {problem}")


def _check_docs(where: str, docs: dict) -> None:
    missing = [s for s in DOC_SECTIONS if not docs.get(s)]
    if missing:
        _fail(where, f"docs lack section(s) {', '.join(missing)}")
    extra = set(docs) - set(DOC_SECTIONS)
    if extra:
        _fail(where, f"unknown docs section(s) {', '.join(sorted(extra))}")
    if not isinstance(docs["references"], list) or not all(isinstance(r, str) for r in docs["references"]):
        _fail(where, "docs.references must be a list of strings")
    if not all(isinstance(docs[s], str) for s in DOC_SECTIONS if s != "references"):
        _fail(where, "docs sections must be strings")


def _check_names(where: str, what: str, source: str, allowed: set, template: bool = False) -> None:
    from jinja2 import TemplateError, meta

    from .sandbox import LOOP_GUARD, forbidden_construct

    try:
        ast = environment().parse(source if template else "{{ (" + source + ") }}")
    except TemplateError as exc:
        _fail(where, f"{what} does not compile: {_first_line(exc)}")
    except RecursionError:
        _fail(where, f"{what} is nested too deeply")
    construct = forbidden_construct(ast)
    if construct:
        _fail(where, f"{what} uses {construct}, which rule templates may not use (docs/rules.md)")
    try:
        unknown = sorted(meta.find_undeclared_variables(ast) - allowed - {"range", LOOP_GUARD})
    except TemplateError as exc:  # e.g. a filter the sandbox does not offer (sandbox.FILTERS)
        _fail(where, f"{what} does not compile: {_first_line(exc)}")
    if unknown:
        _fail(where, f"{what} names unknown fact(s) {', '.join(unknown)}")


def build_rule(raw: dict, source: str, check: bool = True) -> Rule:
    """A Rule from its TOML table. `check=False` (the built-in catalog, which tests/unit/test_engine.py holds
    to every check) skips parsing each expression and template for unknown names and forbidden
    constructs, and compiles them when first used: that took 0.3 s of every analysis. It also skips the
    checks against the fact and forecast model registries (which load numpy and pandas): `perfsleuth
    rules` lists the catalog without them."""
    where = f"{source}: rule '{raw.get('slug', '?')}'"
    facts, models = registries() if check else (None, None)
    _check_types(where, raw, facts)
    _check_docs(where, raw["docs"])
    if check:
        allowed = set(facts) | set(raw["thresholds"]) | set(TABLES)
        for key in ("condition", "saving_us", "applies"):
            if key in raw:
                _check_names(where, key, raw[key], allowed)
        for sev, expr in raw.get("severity_when", {}).items():
            _check_names(where, f"severity_when.{sev}", expr, allowed)
        for key in ("message", "fix"):
            _check_names(where, key, raw[key], allowed, template=True)
    bad = [e for e in raw["evidence"] if not isinstance(e, str) or (check and e not in facts)]
    if bad:
        _fail(where, f"evidence names unknown fact(s) {', '.join(map(str, bad))}")
    if raw.get("locations") and raw["locations"] not in TABLES:
        _fail(where, f"locations names unknown evidence table '{raw['locations']}'")
    if check and raw.get("forecast") and raw["forecast"] not in models:
        _fail(where, f"forecast names unknown model '{raw['forecast']}' (known: {', '.join(sorted(models))})")
    when = raw.get("severity_when", {})
    rule = Rule(slug=raw["slug"], title=raw["title"], category=raw["category"], severity=raw["severity"],
                condition=raw["condition"], saving_us=raw["saving_us"], saving_basis=raw["saving_basis"],
                evidence=tuple(raw["evidence"]), message=raw["message"].strip(), fix=raw["fix"].strip(),
                thresholds=dict(raw["thresholds"]), docs=dict(raw["docs"]), source=source,
                severity_when=tuple((s, when[s]) for s in reversed(SEVERITIES) if s in when),
                locations=raw.get("locations", ""), requires=tuple(raw.get("requires", ())),
                applies=raw.get("applies", ""), cpu=dict(raw.get("cpu", {})), forecast=raw.get("forecast", ""),
                no_forecast=raw.get("no_forecast", ""))
    if not check:
        return rule
    from jinja2 import TemplateError

    try:  # compile now: a broken expression is a load error, not a runtime one
        for key in COMPILED_KEYS:
            rule.compiled[key]  # noqa: B018
    except TemplateError as exc:  # e.g. a filter the sandbox does not offer (sandbox.FILTERS)
        _fail(where, f"does not compile: {_first_line(exc)}")
    except RecursionError:
        _fail(where, "is nested too deeply")
    return rule


def parse_rule_file(text: str, source: str, check: bool = True) -> list:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        _fail(source, f"not valid TOML ({exc})")
    except RecursionError:
        _fail(source, "not valid TOML (nested too deeply)")
    extra = set(doc) - {"rule", "family", "description"}
    if extra:
        _fail(source, f"unknown top-level key(s) {', '.join(sorted(extra))} (rules go in [[rule]] tables)")
    rules = doc.get("rule")
    if not isinstance(rules, list) or not rules or not all(isinstance(r, dict) for r in rules):
        _fail(source, "no [[rule]] tables")
    return [build_rule(r, source, check) for r in rules]


def _user_files(paths: Iterable) -> list:
    files = []
    for p in map(Path, paths):
        try:
            is_dir = stat.S_ISDIR(os.stat(p).st_mode)
        except FileNotFoundError:
            _fail(str(p), "no such rule file or directory" if not os.path.islink(p) else "a symbolic link to a missing file")
        except OSError as exc:
            _fail(str(p), f"rule file or directory: {describe_os_error(p, exc)}")
        if is_dir:
            try:
                found = sorted(p.glob("*.toml"))
            except OSError as exc:
                _fail(str(p), f"cannot list the rule directory: {describe_os_error(p, exc)}")
            if not found:
                _fail(str(p), "directory holds no *.toml rule files")
            files += found
        else:
            files.append(p)
    return files


def _read_rule_file(f: Path) -> str:
    try:
        with open_regular(f) as fh:
            return fh.read().decode("utf-8")
    except TraceError as exc:
        _fail(str(f), f"cannot read rule file ({exc.problem})")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(str(f), f"cannot read rule file ({exc})")


@functools.lru_cache(maxsize=8)
def _load(paths: tuple) -> tuple:
    rules: list = []
    for res in sorted(importlib.resources.files("perfsleuth.rules").iterdir(), key=lambda r: r.name):
        if res.name.endswith(".toml"):
            rules += parse_rule_file(res.read_text(encoding="utf-8"), f"rules/{res.name}", check=False)
    for f in _user_files(paths):
        rules += parse_rule_file(_read_rule_file(f), str(f))
    seen: dict = {}
    for r in rules:
        if r.slug in seen:
            _fail(r.source, f"rule '{r.slug}' is already defined in {seen[r.slug]}")
        seen[r.slug] = r.source
    return tuple(rules)


def load_catalog(paths: Iterable = (), overrides: Optional[dict] = None) -> list:
    """The built-in rules plus rule files/directories in `paths`, with threshold overrides applied
    (`{"num-workers.min_share": 0.05}`). Raises RuleError / UsageError on any problem."""
    rules = list(_load(tuple(str(p) for p in paths)))
    return apply_overrides(rules, overrides or {})


MAX_THRESHOLD = 1e15  # larger than any step, count or byte size a trace can hold


def threshold_problem(name: str, value) -> Optional[str]:
    """Why `value` cannot be threshold `name` (None when it can): NaN and infinities would silently
    switch a rule off or on, and no threshold is negative; a *_share or *_fraction is a share of the
    step, at most 1."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if value < 0:
        return f"must not be negative, got {_show(value)}"
    if value > MAX_THRESHOLD:
        return f"is out of range (at most {MAX_THRESHOLD:g}), got {_show(value)}"
    if name.endswith(("_share", "_fraction")) and value > 1:
        return f"is a share of the step, between 0 and 1, got {value:g}"
    return None


def _show(value) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else text[:20] + "..."


def apply_overrides(rules: list, overrides: dict) -> list:
    by_slug = {r.slug: r for r in rules}
    changes: dict = {}
    for key, value in overrides.items():
        slug, _, name = str(key).rpartition(".")
        if slug not in by_slug:
            raise UsageError(f"unknown threshold '{key}': no rule '{slug}' (expected RULE.THRESHOLD)")
        if name not in by_slug[slug].thresholds:
            known = ", ".join(sorted(by_slug[slug].thresholds)) or "none"
            raise UsageError(f"unknown threshold '{key}': rule '{slug}' has {known}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"threshold '{key}' must be a number, got {str(value)[:40]!r}")
        problem = threshold_problem(name, value)
        if problem:
            raise UsageError(f"threshold '{key}' {problem}")
        changes.setdefault(slug, {})[name] = value
    return [replace(r, thresholds={**r.thresholds, **changes[r.slug]}) if r.slug in changes else r
            for r in rules]
