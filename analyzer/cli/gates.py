"""CI gates (docs/ci.md#gates): `--fail-on VERDICT|RULE,...` on a report; on a diff,
`--fail-on-regression PCT` (the step time) and `--fail-on-regression CATEGORY:+Npp` (a
category's share of the step).

Parsing raises UsageError (exit 2); evaluation returns failure strings, one per tripped gate
(the CLI prints them on one line and exits 1). Nothing here prints or exits.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from ..analysis.verdict import STRAGGLER_BOUND
from ..analysis.verdict import VERDICTS as RANK_VERDICTS
from ..config import CATEGORIES, Config
from ..errors import UsageError

EXIT_GATE = 1  # a gate tripped (bad input is 2, like every user error)
# A directory of one job's rank traces also has a job verdict (docs/ranks.md): straggler-bound, or one of these.
VERDICTS = RANK_VERDICTS + (STRAGGLER_BOUND,)
SLUG = re.compile(r"^[a-z0-9-]+$")
_PCT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(%?)\s*$")
_PP = re.compile(r"^\s*\+?\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*pp\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class FailOn:
    """What `--fail-on` asked for: verdict names and rule slugs, each in the order first given."""

    verdicts: tuple = ()
    rules: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.verdicts or self.rules)


def parse_fail_on(values: Iterable[str], known_rules: Optional[Iterable[str]] = None) -> FailOn:
    """Comma-separated lists (the option may repeat) of verdict names (`sync-bound`) and rule slugs
    (`item-sync`). A name that looks like a verdict (`*-bound`, or a near miss of one) must be one.
    Rule slugs are checked against `known_rules` when given (the CLI passes `known_rule_slugs()`);
    with None any `[a-z0-9-]` slug is taken."""
    known = set(known_rules) if known_rules is not None else None
    verdicts: list = []
    rules: list = []
    for value in values:
        for raw in str(value).split(","):
            token = raw.strip().lower()
            if not token:
                continue
            if token in VERDICTS:
                _add(verdicts, token)
                continue
            if not SLUG.match(token):
                raise UsageError(f"--fail-on: {raw.strip()!r} is neither a verdict ({', '.join(VERDICTS)}) "
                                 "nor a rule slug (lowercase letters, digits and '-')")
            near = difflib.get_close_matches(token, VERDICTS, n=1, cutoff=0.85)
            if token.endswith("-bound") or near:
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise UsageError(f"--fail-on: unknown verdict {token!r}{hint}; verdicts: {', '.join(VERDICTS)}")
            if known is not None and token not in known:
                near = difflib.get_close_matches(token, sorted(known), n=1, cutoff=0.75)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise UsageError(f"--fail-on: unknown rule {token!r}{hint}; rules: {', '.join(sorted(known))}")
            _add(rules, token)
    return FailOn(tuple(verdicts), tuple(rules))


def known_rule_slugs(config: Optional[Config] = None) -> set:
    """The slugs of the rule catalogue an analysis with `config` evaluates (built-in plus rule_paths)."""
    from ..engine.catalog import load_catalog

    config = config or Config()
    return {r.slug for r in load_catalog(config.rule_paths, config.thresholds)}


def _add(seq: list, item: str) -> None:
    if item not in seq:
        seq.append(item)


def check_report(result: dict, fail_on: FailOn) -> list:
    """Failures of a report@1 (or each report of a report-set@1) against `--fail-on`."""
    if not fail_on:
        return []
    reports = result.get("reports") if isinstance(result.get("reports"), list) else [result]
    several = len(reports) > 1
    failures = []
    jobs = [result] + [j for j in result.get("jobs") or [] if isinstance(j, dict)]  # one job, or several
    for job in (j.get("job") for j in jobs if isinstance(j.get("job"), dict)):
        if job.get("verdict") in fail_on.verdicts:
            failures.append(f"job verdict {job['verdict']} (--fail-on {job['verdict']})")
    for rep in reports:
        where = f" in {_path(rep)}" if several else ""
        verdict = rep.get("verdict")
        if verdict in fail_on.verdicts:
            failures.append(f"verdict {verdict}{where} (--fail-on {verdict})")
        fired = {f.get("rule") for f in rep.get("findings") or [] if isinstance(f, dict)}
        for rule in fail_on.rules:
            if rule in fired:
                failures.append(f"finding {rule}{where} (--fail-on {rule})")
    return failures


def _path(rep: dict) -> str:
    t = rep.get("trace") if isinstance(rep.get("trace"), dict) else {}
    return str(t.get("path") or "?")


def parse_threshold(text: str, option: str = "--fail-on-regression") -> float:
    """`10%` or `0.1` -> 0.1. A bare number must be a fraction below 1 (write `10%` for ten per cent)."""
    m = _PCT.match(str(text))
    if not m:
        raise UsageError(f"{option}: {text!r} is not a percentage (write 10% or 0.1)")
    value = float(m.group(1))
    if m.group(2):
        value /= 100.0
    elif value >= 1.0:
        raise UsageError(f"{option}: {text!r} is ambiguous; write {value:g}% or {value / 100:g}")
    if not math.isfinite(value) or value >= 10.0:
        raise UsageError(f"{option}: {text!r} is out of range (0% to 1000%)")
    return value


@dataclass(frozen=True)
class RegressionGates:
    """What `--fail-on-regression` asked for: the step time's growth (a fraction) and, per
    category, how much its share of the step may grow (a fraction: 0.1 for +10pp)."""

    step: Optional[float] = None
    shares: tuple = ()  # ((category, fraction), ...) in the order given

    def __bool__(self) -> bool:
        return self.step is not None or bool(self.shares)


def parse_regressions(values: Sequence[str]) -> RegressionGates:
    """Comma-separated (the option may repeat): `10%` / `0.1` gates the step time,
    `dataloader:+10pp` a category's share of the step (percentage points). The last value given
    for the step or a category wins."""
    values = list(values)
    step, shares = None, {}
    for value in values:
        for raw in str(value).split(","):
            token = raw.strip()
            if not token:
                continue
            if ":" not in token:
                step = parse_threshold(token)
                continue
            category, _, amount = (part.strip() for part in token.partition(":"))
            category = category.lower()
            if category not in CATEGORIES:
                near = difflib.get_close_matches(category, CATEGORIES, n=1, cutoff=0.6)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise UsageError(f"--fail-on-regression: unknown category {category!r}{hint}; "
                                 f"categories: {', '.join(CATEGORIES)}")
            m = _PP.match(amount)
            if not m:
                raise UsageError(f"--fail-on-regression: {token!r}: a share grows in percentage "
                                 f"points: write {category}:+10pp")
            pp = float(m.group(1))
            if not 0 <= pp < 100:
                raise UsageError(f"--fail-on-regression: {token!r} is out of range (+0pp to +99pp)")
            shares[category] = pp / 100.0
    gates = RegressionGates(step, tuple(shares.items()))
    if values and not gates:  # never a gate that silently cannot trip
        raise UsageError(f"--fail-on-regression: {', '.join(map(repr, values))} names no gate "
                         "(write 10% or dataloader:+10pp)")
    return gates


def check_shares(diff: dict, shares: Iterable) -> list:
    """Failures of the category gates: the category's share of the step grew by more than its
    limit AND its time per step grew outside noise (its call is `regression`, as the diff's
    table marks it)."""
    from .diff import REGRESSION

    rows = _category_rows(diff)
    failures = []
    for category, limit in shares:
        row = rows.get(category)
        if row and row.get("call") == REGRESSION and row["share_change"] > limit:
            failures.append(f"{_share_text(row)}, outside noise ±{_ms(row['noise_us'])}) exceeds "
                            f"--fail-on-regression {category}:+{limit * 100:g}pp")
    return failures


def _category_rows(diff: dict) -> dict:
    return {c.get("category"): c for c in diff.get("categories") or [] if isinstance(c, dict)}


def _share_text(row: dict) -> str:
    """`dataloader share 0.7% → 45.0% (+44.3 pp; 35.0 µs → 2.30 ms per step` (the caller
    closes the parenthesis)."""
    return (f"{row['category']} share {row['base_share']:.1%} → {row['head_share']:.1%} "
            f"({row['share_change'] * 100:+.1f} pp; {_ms(row['base_us_per_step'])} → "
            f"{_ms(row['head_us_per_step'])} per step")


def gate_notes(diff: dict, gates: RegressionGates) -> list:
    """What a passing regression gate says (one line each, on stderr): a step time or a share
    that grew past its limit within the noise band, "not failed"; and, when any gate was asked
    and the step gate did not fail, the categories the diff marks as regressions whose share
    grew and that no gate names (categories are gated only when asked)."""
    from .diff import REGRESSION, WITHIN_NOISE

    if not gates:
        return []
    notes = []
    st = diff["step_time"]
    change = st.get("change")
    if (gates.step is not None and st.get("call") == WITHIN_NOISE and change is not None
            and change > gates.step):
        notes.append(f"gate passed: step time {growth(change)} (median "
                     f"{_ms(st['base']['median'])} → {_ms(st['head']['median'])}) is within the "
                     f"noise band ±{_ms(st['noise_us'])}: not failed "
                     f"(--fail-on-regression {gates.step * 100:g}%)")
    rows = _category_rows(diff)
    for category, limit in gates.shares:
        row = rows.get(category)
        if row and row.get("call") == WITHIN_NOISE and row["share_change"] > limit:
            notes.append(f"gate passed: {_share_text(row)}) is within the noise band "
                         f"±{_ms(row['noise_us'])}: not failed "
                         f"(--fail-on-regression {category}:+{limit * 100:g}pp)")
    gated = {c for c, _ in gates.shares}
    # a category whose time grew outside noise, and faster than the step (its share grew): unless
    # the step gate failed already, the build passes with it unless a gate names it
    loose = [] if check_regression(diff, gates.step) else [
        row for c, row in rows.items()
        if c not in gated and row.get("call") == REGRESSION and row["share_change"] > 0]
    if loose:
        said = ", ".join(f"{r['category']} {r['base_share']:.1%} → {r['head_share']:.1%}"
                         for r in loose)
        notes.append(f"not gated: {said} of the step (marked regression in the diff); categories "
                     f"are gated only when asked, e.g. --fail-on-regression "
                     f"{loose[0]['category']}:+10pp")
    return notes


def check_regression(diff: dict, threshold: Optional[float]) -> list:
    """Failure when the median step time grew by more than `threshold` AND the change is outside noise."""
    from .diff import REGRESSION  # diff's module (and report@1's schema) only when a diff is gated

    if threshold is None:
        return []
    st = diff["step_time"]
    change = st.get("change")
    if st.get("call") != REGRESSION:
        return []
    grew = (f"(median {_ms(st['base']['median'])} → {_ms(st['head']['median'])}, "
            f"outside noise ±{_ms(st['noise_us'])})")
    if change is None:  # a base of (almost) 0 µs: no ratio, but the growth is beyond any threshold
        return [f"step time grew from a base whose median step is {_ms(st['base']['median'])} {grew}: no percentage "
                f"against it, and more than any --fail-on-regression (the base report is suspect)"]
    if change <= threshold:
        return []
    return [f"step time {growth(change)} {grew} exceeds --fail-on-regression {threshold * 100:g}%"]


def growth(change: float) -> str:
    """+12.3%, or for ten times and more ×1,234 (a percentage of 15 digits says nothing more)."""
    return f"×{change + 1:,.0f}" if change >= 9 else f"+{change:.1%}"


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if abs(us) >= 1000 else f"{us:.1f} µs"


def failure_line(failures: list) -> str:
    """The one stderr line for tripped gates."""
    return "perfsleuth: gate failed: " + "; ".join(failures)
