"""The Jinja2 sandbox the rule files run in, with bounds on time, memory and output (docs/robustness.md).

Jinja2's immutable sandbox already keeps a rule from reaching Python (no `__class__`, no mutation).
A rule file from an untrusted checkout could still hang or exhaust memory with plain template
features: nested loops, `'A' * 10**9`, `'%01000000000d' % 1`, a string doubled in a chain of `set`s.
Here:

- every loop iteration, call, filter and arithmetic operator is one step of a `Meter`: a rule's
  evaluation may take `LIMITS.rule_steps` of them and `LIMITS.rule_seconds` of wall time;
- no operation may build a string or list longer than `LIMITS.rule_sequence`: repetition, `%`
  formatting, `~`, `+`, `join`, `replace`, `center` and `indent` are checked BEFORE they allocate;
  integers stay below 2**1024;
- a rendered message or fix stops at `LIMITS.rule_output_chars`;
- the language is a subset: no macros, call blocks, block `set`s, `{% filter %}`, imports or
  includes; only the filters in `FILTERS` and the read-only methods in `METHODS`.

A rule that exceeds a bound raises `BudgetError` (the catalogue turns it into a one-line RuleError
naming the rule file).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import time
from typing import Any, Iterator, Optional

from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.runtime import str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..config import LIMITS, Limits

LOOP_GUARD = "__perfsleuth_loop"
FORBIDDEN = {nodes.Macro: "macros", nodes.CallBlock: "call blocks", nodes.AssignBlock: "block sets",
             nodes.FilterBlock: "filter blocks", nodes.Import: "imports", nodes.FromImport: "imports",
             nodes.Include: "includes", nodes.Extends: "extends", nodes.Block: "blocks"}
FILTERS = ("abs", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "forceescape",
           "int", "items", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "reverse",
           "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "trim", "truncate", "unique",
           "upper", "wordcount", "join", "replace", "center", "indent", "batch", "slice", "groupby", "filesizeformat")
METHODS = {"startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "split", "get", "items", "keys",
           "values", "count", "index", "title", "capitalize", "isdigit", "isalpha"}
_WIDTH = re.compile(r"\d{7,}")  # a width or precision in a format string that builds a megabyte


class BudgetError(Exception):
    """A rule went past one of the engine's bounds."""


class Meter:
    def __init__(self, limits: Limits):
        self.limits, self.steps = limits, 0
        self.deadline = time.monotonic() + limits.rule_seconds

    def tick(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.limits.rule_steps:
            raise BudgetError(f"takes more than {self.limits.rule_steps:,} steps (loop iterations and calls)")
        if self.steps % 256 == 0 and time.monotonic() > self.deadline:
            raise BudgetError(f"takes more than {self.limits.rule_seconds:g} s")


_METER: contextvars.ContextVar[Optional[Meter]] = contextvars.ContextVar("perfsleuth_rule_meter", default=None)


@contextlib.contextmanager
def metered(limits: Optional[Limits] = None) -> Iterator[Meter]:
    """Run rule code in this block against a fresh budget."""
    token = _METER.set(Meter(limits or LIMITS))
    try:
        yield _METER.get()
    finally:
        _METER.reset(token)


def _tick() -> None:
    meter = _METER.get()
    if meter is not None:
        meter.tick()


def _size(n: int) -> None:
    if n > LIMITS.rule_sequence:
        raise BudgetError(f"builds a string or list of {n:,} items (the limit is {LIMITS.rule_sequence:,})")


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, range)) else 0


def _check_format(fmt: Any) -> None:
    if isinstance(fmt, str) and _WIDTH.search(fmt):
        raise BudgetError("formats with a width or precision of a million characters or more")


def _loop(iterable: Any) -> Iterator:
    for item in iterable:
        _tick()
        yield item


def _checked_join(parts: tuple) -> str:
    _size(sum(len(p) if isinstance(p, str) else len(str(p)) for p in parts))
    return str_join(parts)


def _check_args(what: str, args) -> None:
    for a in args:
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > LIMITS.rule_sequence:
            raise BudgetError(f"passes {a:,} to {what}")


def _guard_filter(name: str, fn):
    """`fn` ticking the meter, with its size checked before (the filters that multiply) and after."""
    passes = hasattr(fn, "jinja_pass_arg")  # Jinja passes the context/environment first

    def run(*args, **kwargs):
        _tick()
        lead, (value, *rest) = (args[:1], args[1:]) if passes else ((), args)
        _check_args(f"the {name} filter", (*rest, *kwargs.values()))
        if name == "join":
            value = value if isinstance(value, (str, list, tuple)) else list(value)
            sep = rest[0] if rest else kwargs.get("d", "")
            _size(sum(len(str(x)) for x in value) + len(str(sep)) * len(value))
        elif name == "replace" and isinstance(value, str) and len(rest) >= 2:
            old, new = str(rest[0]), str(rest[1])
            _size(len(value) + (value.count(old) if old else len(value) + 1) * max(0, len(new) - len(old)))
        elif name == "indent" and isinstance(value, str):
            width = rest[0] if rest else kwargs.get("width", 4)
            _size(len(value) + (value.count("\n") + 1) * (width if isinstance(width, int) else len(str(width))))
        result = fn(*lead, value, *rest, **kwargs)
        _size(_length(result))
        return result

    run.__name__ = name
    if passes:
        run.jinja_pass_arg = fn.jinja_pass_arg
    return run


class _Generator(CodeGenerator):
    """`a ~ b` goes through a join that checks the size it is about to build."""

    def visit_Concat(self, node: nodes.Concat, frame) -> None:
        self.write("environment.checked_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    code_generator_class = _Generator
    intercepted_binops = frozenset({"*", "**", "%", "+", "//"})
    checked_join = staticmethod(_checked_join)

    def __init__(self, **options):
        super().__init__(**options)
        self.globals = {"range": self.globals["range"], LOOP_GUARD: _loop}
        self.filters = {name: _guard_filter(name, self.filters[name]) for name in FILTERS}

    def add_filters(self, **filters) -> None:
        self.filters.update({name: _guard_filter(name, fn) for name, fn in filters.items()})

    def wrap_str_format(self, value: Any) -> None:
        return None  # str.format / format_map are not in METHODS: widths could build gigabytes

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if callable(value) and attr not in METHODS:
            return False
        return super().is_safe_attribute(obj, attr, value)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
        _tick()
        _check_args("a call", (*args, *kwargs.values()))
        result = super().call(__context, __obj, *args, **kwargs)
        _size(_length(result))
        return result

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        _tick()
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            if right * (abs(left).bit_length() - 1) > 1024:
                raise BudgetError(f"computes {left} ** {right}, a number of more than 1024 bits")
        if operator == "*":
            if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > 4096:
                raise BudgetError("multiplies integers of more than 4096 bits")
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    _size(len(seq) * max(n, 0))
        if operator == "%" and isinstance(left, str):
            _check_format(left)
        if operator == "+":
            _size(_length(left) + _length(right))
        return super().call_binop(context, operator, left, right)

    def _generate(self, source: nodes.Template, name, filename, defer_init: bool = False):
        for loop in source.find_all(nodes.For):  # every iteration is a step of the meter
            loop.iter = nodes.Call(nodes.Name(LOOP_GUARD, "load", lineno=loop.lineno), [loop.iter], [], None, None,
                                   lineno=loop.lineno)
        return super()._generate(source, name, filename, defer_init)


def forbidden_construct(ast: nodes.Template) -> Optional[str]:
    """The first construct a rule template may not use ('macros', ...), or None."""
    for node in ast.find_all(tuple(FORBIDDEN)):
        return FORBIDDEN[type(node)]
    return None


def render(template, names: dict) -> str:
    """The template rendered, stopping with BudgetError past LIMITS.rule_output_chars characters."""
    out, total = [], 0
    for chunk in template.generate(**names):
        total += len(chunk)
        if total > LIMITS.rule_output_chars:
            raise BudgetError(f"renders more than {LIMITS.rule_output_chars:,} characters")
        out.append(chunk)
    return "".join(out)
