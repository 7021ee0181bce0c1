"""`perfsleuth docs [TOPIC]`: the guides in docs/*.md, shipped inside the package (as `perfsleuth.docs`),
so that `--help` texts and error hints can point at them: a pip-installed user has no docs/ folder."""

from __future__ import annotations

import difflib
import importlib.resources
from pathlib import Path

from ..errors import UsageError


def _root():
    try:
        return importlib.resources.files("perfsleuth.docs")
    except ModuleNotFoundError:  # an editable install made before the docs were package data
        return Path(__file__).resolve().parents[2] / "docs"


def topics() -> dict:
    """{topic: title} of every guide, in name order; the title is the guide's first heading."""
    out = {}
    for res in sorted(_root().iterdir(), key=lambda r: r.name):
        if res.name.endswith(".md"):
            first = res.read_text(encoding="utf-8").split("\n", 1)[0]
            out[res.name[:-3]] = first.lstrip("# ").strip()
    return out


# Guides for those who work on perfsleuth itself (its design, how it is measured and tested),
# listed apart from the user guides; every other guide is a user guide.
DEVELOPER = frozenset({"architecture", "accuracy", "perf", "robustness", "synth"})


def listing() -> str:
    """The user guides, then the developer docs, each `name  title` (issue 37: a user looking for
    how to use a command should not have to tell them apart)."""
    known = topics()
    width = max(map(len, known), default=0)
    rows = {name: f"  {name:<{width}}  {title}" for name, title in known.items()}
    users = [row for name, row in rows.items() if name not in DEVELOPER]
    developers = [row for name, row in rows.items() if name in DEVELOPER]
    return "\n".join(["Guides:", *users, "",
                      "For perfsleuth's developers (design, measurements, tests):", *developers, "",
                      "`perfsleuth docs TOPIC` prints one (Markdown); "
                      "`perfsleuth rules SLUG` a rule's docs."])


def read_topic(name: str) -> str:
    known = topics()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(f"no guide named {name!r}; {hint}guides: {', '.join(known)}")
    return (_root() / f"{name}.md").read_text(encoding="utf-8")
