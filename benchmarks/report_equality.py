"""Do two versions of perfsleuth give the same reports? A check for optimisations, not a test.

    python benchmarks/report_equality.py dump OUT [PATH ...]   # report.json of each trace / rank folder
    python benchmarks/report_equality.py compare OLD NEW       # every difference, path by path
    python benchmarks/report_equality.py rendered OUT [PATH ...]   # also the terminal text, HTML, Markdown
    python benchmarks/report_equality.py bare-terminal OLD [PATH ...]  # `analyze` without report files

`dump` analyses (in this interpreter, so run it with the version to check: a venv with the old code,
then one with the new) every trace under fixtures/traces (stacks companions are
read through their main trace, not on their own) and every folder of rank traces, one worker, and
writes each report dict as JSON. Fields that hold timings of the analysis itself would be left out
(TIMING); report@1 has none today. `compare` lists every value that differs; exit 1 when any does.
`rendered` dumps as `dump` does and writes beside each report its terminal text (.term), HTML page
(.html) and Markdown summary (.md), which `compare` compares byte for byte: a move of the renderers
(issue 34) must change none of them. Paths of the checkout read `<checkout>` in every file.
`bare-terminal` analyses as `analyze` without report files does (Config.report_links off: no top
kernels' ops and lines, no timeline) and compares each terminal text with the `.term` files of a
`rendered` dump OLD (made with every link): the terminal must not change (issue 35 item 5).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOTS = (HERE.parent / "fixtures" / "traces",)
TIMING = frozenset({"elapsed_s", "analysis_s", "wall_s"})  # keys dropped before comparing


def targets(paths: list) -> list:
    if paths:
        return [Path(p) for p in paths]
    out = []
    for root in ROOTS:
        files = sorted(p for p in root.rglob("*.json*") if ".stacks." not in p.name)
        out += files
        out += sorted({p.parent for p in files if p.parent.name != root.name and
                       sum(1 for q in p.parent.glob("*.json*") if ".stacks." not in q.name) > 1})
    return out


def clean(obj):
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [clean(v) for v in obj]
    return obj


def _renderers() -> dict:
    """The renderers of the version imported: render/ since issue 34, report/ before."""
    import importlib

    def pick(attr: str, *modules: str):
        for m in modules:
            try:
                return getattr(importlib.import_module(m), attr)
            except ImportError:
                continue
        raise ImportError(attr)

    term = pick("render_terminal", "perfsleuth.render.terminal", "perfsleuth.report.terminal")
    term_set = pick("render_terminal_set", "perfsleuth.render.terminal", "perfsleuth.report.terminal")
    files = pick("_RENDERERS", "perfsleuth.render.outputs", "perfsleuth.report.outputs")
    return {"term": lambda d: term_set(d) if "reports" in d else term(d), "html": files["html"],
            "md": files["markdown"]}


def dump(out: Path, paths: list, rendered: bool = False) -> None:
    from perfsleuth.api import analyze_path
    from perfsleuth.errors import TraceError

    renderers = _renderers() if rendered else {}

    out.mkdir(parents=True, exist_ok=True)
    for p in targets(paths):
        name = "__".join(p.resolve().parts[-3:]).replace(".json.gz", "").replace(".json", "")
        try:
            result = analyze_path(p, jobs=1)
            data = clean(result.to_dict())
        except TraceError as exc:
            data = {"error": str(exc)}
        text = json.dumps(data, indent=1, sort_keys=True, default=str)
        # each version's checkout in its own folder: the fixtures' paths compare as <checkout>/fixtures/...
        text = text.replace(json.dumps(str(HERE.parent))[1:-1], "<checkout>")
        (out / f"{name}.json").write_text(text)
        for kind, render in renderers.items():
            if "error" not in data:
                page = render(result.to_dict()).replace(str(HERE.parent), "<checkout>")
                (out / f"{name}.{kind}").write_text(page)
        print(name, flush=True)


def differences(a, b, where: str = "") -> list:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in
                (differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{where}.{k}"))]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {str(a)[:120]!r} vs {str(b)[:120]!r}"]


def compare(old: Path, new: Path) -> int:
    names = sorted({p.name for p in old.glob("*.json")} | {p.name for p in new.glob("*.json")})
    bad = 0
    pages = sorted({p.name for d in (old, new) for p in d.glob("*") if p.suffix in (".term", ".html", ".md")})
    for n in pages:
        same = (old / n).exists() and (new / n).exists() and (old / n).read_bytes() == (new / n).read_bytes()
        if not same:
            print(f"{n}: the rendered text differs (or is only in one)")
            bad += 1
    for n in names:
        if not (old / n).exists() or not (new / n).exists():
            print(f"{n}: only in {'new' if (new / n).exists() else 'old'}")
            bad += 1
            continue
        diffs = differences(json.loads((old / n).read_text()), json.loads((new / n).read_text()))
        bad += bool(diffs)
        for d in diffs:
            print(f"{n}: {d}")
    print(f"{len(names)} reports and {len(pages)} rendered texts, {len(names) + len(pages) - bad} identical, "
          f"{bad} different")
    return 1 if bad else 0


def bare_terminal(old: Path, paths: list) -> int:
    from perfsleuth.api import analyze_path
    from perfsleuth.config import Config
    from perfsleuth.errors import TraceError

    term = _renderers()["term"]
    bad = same = 0
    for p in targets(paths):
        name = "__".join(p.resolve().parts[-3:]).replace(".json.gz", "").replace(".json", "")
        try:
            result = analyze_path(p, Config(report_links=False), jobs=1)
        except TraceError:
            continue
        text = term(result.to_dict()).replace(str(HERE.parent), "<checkout>")
        want = old / f"{name}.term"
        if want.exists() and want.read_text() == text:
            same += 1
        else:
            print(f"{name}: the terminal text differs (or is not in {old})")
            bad += 1
    print(f"terminal texts without report links: {same} identical, {bad} different")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] in ("dump", "rendered"):
        dump(Path(sys.argv[2]), sys.argv[3:], rendered=sys.argv[1] == "rendered")
    elif len(sys.argv) >= 3 and sys.argv[1] == "bare-terminal":
        sys.exit(bare_terminal(Path(sys.argv[2]), sys.argv[3:]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
