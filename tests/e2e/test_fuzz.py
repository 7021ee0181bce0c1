"""Property-based fuzzing of the promise (docs/robustness.md): whatever a trace, a report.json, a rule file
or a pyproject.toml holds, perfsleuth answers with a report (exit 0) or exactly one line naming the
problem (exit 2); never another exception, never a raw control character on the terminal.

Inputs are mutations of real traces (small ones from fixtures/traces/real and fixtures/traces, and one
from tests/helpers/tracebuilder.py),
of real reports, of a rule file and of pyproject.toml. CI runs FUZZ_EXAMPLES examples per test
(seconds); a long run sets PERFSLEUTH_FUZZ_EXAMPLES (docs/robustness.md records one) and, with
PERFSLEUTH_FUZZ_SAVE=1, copies every input that breaks the promise into tests/helpers/corpus/found/.
"""

import bz2
import copy
import gzip
import hashlib
import itertools
import json
import lzma
import os
import shutil
import tempfile
import traceback
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfsleuth.cli.main import main
from tracebuilder import TraceBuilder

from conftest import REAL_TRACES

FUZZ_EXAMPLES = int(os.environ.get("PERFSLEUTH_FUZZ_EXAMPLES", "25"))
FOUND = Path(__file__).resolve().parents[1] / "helpers" / "corpus" / "found"
SETTINGS = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=not os.environ.get("PERFSLEUTH_FUZZ_EXAMPLES"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
SMALL_TRACES = ("cpu_only_tiny.pt.trace.json.gz", "a100_triton_example.json.gz", "a100_cuda_event_sync.json.gz")
_COUNTER = itertools.count()


FIXTURE_TRACE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "cpu" / "eval_loop.pt.trace.json.gz"


def _base_traces() -> list:
    docs = [json.loads(gzip.decompress((REAL_TRACES / name).read_bytes())) for name in SMALL_TRACES]
    docs.append(json.loads(gzip.decompress(FIXTURE_TRACE.read_bytes())))  # recorded by `perfsleuth run`
    tb = TraceBuilder()
    for i in range(3):
        tb.step(i + 1, 200 * i, 180)
        tb.launch("ampere_sgemm_128x64_tn", host=(200 * i + 5, 3), device=(200 * i + 10, 120))
        tb.op("aten::item", 200 * i + 20, 100)
        tb.runtime("cudaStreamSynchronize", 200 * i + 30, 80)
        tb.dataloader(200 * i + 1, 3)
    return docs + [tb.build()]


BASES = _base_traces()

# --- values ------------------------------------------------------------------------------------------
SPECIAL_STRINGS = ["", "X", "M", "i", "ProfilerStep#1", "ProfilerStep#2", "Optimizer.step#SGD.step",
                   "cudaLaunchKernel", "cudaStreamSynchronize", "aten::mm", "kernel", "cpu_op", "user_annotation",
                   "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", "\x1b]0;title\x07", "\x1b[31mred", "evil\u202etxt",
                   "a\nb", "1e308", "0x10", "NaN", "\ud7ff\ufffd", "x" * 300, "}, {", '"ph": "X"']
SPECIAL_NUMBERS = [0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 1e308, -1e308, 1e-300,
                   5e-324, 0.5, -0.0, 1e15, 1.7e15, 9.2e15]
leaves = st.one_of(st.none(), st.booleans(), st.sampled_from(SPECIAL_NUMBERS), st.sampled_from(SPECIAL_STRINGS),
                   st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
                   st.text(max_size=12))
json_values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["name", "ph", "ts", "dur", "args", "rank", "x"]) | st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
EVENT_KEYS = ["ph", "ts", "dur", "pid", "tid", "name", "cat", "args", "id"]
ARG_KEYS = ["External id", "correlation", "Python id", "Python parent id", "Input type", "name", "bytes", "stream"]
TOP_KEYS = ["traceEvents", "deviceProperties", "distributedInfo", "perfsleuth", "perfsleuth_final", "schemaVersion",
            "roctracer_version"]
# The run metadata's sections and keys (record/trace_metadata.py, compile_facts.py), the compile section's included
META_KEYS = {"compile": ["steps", "compiles", "graph_breaks", "counters", "config", "version"],
             "compile.steps": ["wait", "warmup", "active", "after"],
             "compile.compiles": ["reason", "frame", "own", "failed", "us", "step", "phase", "id"],
             "compile.graph_breaks": ["reason", "count"], "compile.counters": ["graph_breaks", "recompile_limit_hits"],
             "clock": ["unprofiled_us", "after_us", "profiled_us", "unit"], "host": ["cpu_count", "torch_threads"]}


def nested(depth: int, leaf="1") -> str:
    return "[" * depth + leaf + "]" * depth


@st.composite
def trace_mutation(draw, n_events: int):
    kind = draw(st.sampled_from(["event", "event", "event", "arg", "delete", "duplicate", "top", "deep", "meta", "meta"]))
    i = draw(st.integers(0, max(0, n_events - 1)))
    if kind == "event":
        return ("event", i, draw(st.sampled_from(EVENT_KEYS) | st.text(max_size=4)), draw(json_values))
    if kind == "arg":
        return ("arg", i, draw(st.sampled_from(ARG_KEYS)), draw(json_values))
    if kind == "delete":
        return ("delete", i, draw(st.sampled_from(EVENT_KEYS)), None)
    if kind == "duplicate":
        return ("duplicate", i, None, draw(st.integers(-1000, 1000)))
    if kind == "top":
        return ("top", None, draw(st.sampled_from(TOP_KEYS)), draw(json_values))
    if kind == "meta":
        section = draw(st.sampled_from(sorted(META_KEYS) + ["compile"] * 4))  # compile: the newest section
        # `perfsleuth_final`: what run measured after the window (its clock and compile sections win)
        root = draw(st.sampled_from(["perfsleuth", "perfsleuth", "perfsleuth_final"]))
        return ("meta", None, (root, section, draw(st.sampled_from(META_KEYS[section]))), draw(json_values))
    return ("deep", i, draw(st.sampled_from(["args", "name", "ts"])), draw(st.sampled_from([5, 100, 990, 1100, 3000])))


def mutate_trace(doc: dict, mutations: list) -> str:
    events = doc.get("traceEvents") if isinstance(doc.get("traceEvents"), list) else []
    deep = {}
    for kind, i, key, value in mutations:
        ev = events[i] if events and i is not None and i < len(events) and isinstance(events[i], dict) else None
        if kind == "event" and ev is not None:
            ev[key] = value
        elif kind == "arg" and ev is not None:
            ev["args"] = ev["args"] if isinstance(ev.get("args"), dict) else {}
            ev["args"][key] = value
        elif kind == "delete" and ev is not None:
            ev.pop(key, None)
        elif kind == "duplicate" and ev is not None:
            twin = copy.deepcopy(ev)
            if isinstance(twin.get("ts"), (int, float)) and not isinstance(twin.get("ts"), bool):
                twin["ts"] += value
            events.append(twin)
        elif kind == "top":
            doc[key] = value
            events = doc["traceEvents"] if isinstance(doc.get("traceEvents"), list) else []
        elif kind == "meta":
            _set_meta(doc, *key, value)
        elif kind == "deep" and ev is not None:
            marker = f"@deep{len(deep)}@"
            ev[key] = marker
            deep[json.dumps(marker)] = nested(value)
    text = json.dumps(doc, ensure_ascii=False)
    for marker, replacement in deep.items():
        text = text.replace(marker, replacement)
    return text


def _set_meta(doc: dict, root: str, section: str, key: str, value) -> None:
    """Put `value` at ROOT.SECTION.KEY (ROOT: `perfsleuth` or `perfsleuth_final`; compile.compiles: in its
    first entry), making the path as needed."""
    node = doc[root] if isinstance(doc.get(root), dict) else ({"version": 1} if root == "perfsleuth" else {})
    doc[root] = node
    first, _, sub = section.partition(".")
    node = node.setdefault(first, {}) if isinstance(node.get(first), dict) or first not in node else {}
    if sub in ("compiles", "graph_breaks"):
        entries = node.get(sub) if isinstance(node.get(sub), list) and node[sub] else [{}]
        node[sub] = entries
        node = entries[0] if isinstance(entries[0], dict) else {}
    elif sub:
        node = node.setdefault(sub, {}) if isinstance(node.get(sub), dict) or sub not in node else {}
    node[key] = value


@st.composite
def byte_damage(draw):
    return draw(st.lists(st.tuples(st.sampled_from(["cut", "flip", "insert"]), st.floats(0, 1),
                                   st.binary(min_size=1, max_size=4)), max_size=2))


def damage(raw: bytes, edits: list) -> bytes:
    for kind, where, data in edits:
        at = int(where * len(raw))
        if kind == "cut":
            raw = raw[:at]
        elif kind == "flip" and raw:
            raw = raw[:at] + bytes([raw[min(at, len(raw) - 1)] ^ 0xFF]) + raw[at + 1:]
        else:
            raw = raw[:at] + data + raw[at:]
    return raw


# --- the promise ---------------------------------------------------------------------------------------
def keep_if_broken(check, name: str, data: bytes):
    """Run `check`; when it fails and PERFSLEUTH_FUZZ_SAVE is set, keep the input in tests/helpers/corpus/found/."""
    try:
        check()
    except AssertionError:
        if os.environ.get("PERFSLEUTH_FUZZ_SAVE"):
            FOUND.mkdir(exist_ok=True)
            stem, dot, ext = name.partition(".")
            (FOUND / f"{stem}-{hashlib.sha1(data).hexdigest()[:12]}{dot}{ext}").write_bytes(data)
        raise


def promise(result) -> None:
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        raise AssertionError("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    assert result.exit_code in (0, 2), (result.exit_code, result.output[-3000:])
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("perfsleuth: error: "), result.stderr[-3000:]
    raw = [ch for ch in result.output if (ord(ch) < 32 and ch not in "\n\t") or 0x7f <= ord(ch) <= 0x9f
           or 0x202a <= ord(ch) <= 0x202e]
    assert not raw, f"raw control characters on the terminal: {raw!r}"


def cli(*args, cwd=None):
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        return CliRunner().invoke(main, [str(a) for a in args])
    finally:
        os.chdir(here)


# --- traces ----------------------------------------------------------------------------------------------
@st.composite
def mutated_traces(draw):
    base = draw(st.integers(0, len(BASES) - 1))
    doc = copy.deepcopy(BASES[base])
    n = len(doc["traceEvents"])
    text = mutate_trace(doc, draw(st.lists(trace_mutation(n), min_size=1, max_size=6)))
    raw = damage(text.encode("utf-8", "surrogatepass"), draw(byte_damage()))
    return raw, draw(st.booleans())


@SETTINGS
@given(mutated_traces())
def test_fuzz_traces(case):
    raw, gz = case
    with tempfile.TemporaryDirectory() as d:
        name = f"t{next(_COUNTER)}.json" + (".gz" if gz else "")
        path = Path(d) / name
        path.write_bytes(gzip.compress(raw, 1) if gz else raw)
        keep_if_broken(lambda: promise(cli("analyze", path, "-j", "1", "-o", Path(d) / "out")), name, path.read_bytes())


COMPRESS = {"": lambda b: b, ".gz": lambda b: gzip.compress(b, 1), ".bz2": bz2.compress, ".xz": lzma.compress}


@SETTINGS
@given(mutated_traces(), st.sampled_from(["memory", "local"]), st.sampled_from(sorted(COMPRESS)))
def test_fuzz_remote_traces(case, scheme, compression):
    """The same mutated traces through fsspec URLs (issue 28): `memory://` (fsspec's in-memory file system)
    and `local://` go through the bounded remote reader, plain or compressed, and keep the same promise."""
    raw, _ = case
    data = COMPRESS[compression](raw)
    name = f"t{next(_COUNTER)}.json{compression}"
    with tempfile.TemporaryDirectory() as d:
        if scheme == "memory":
            fs = fsspec.filesystem("memory")
            fs.pipe(f"/fuzz/{name}", data)
            url = f"memory://fuzz/{name}"
        else:
            (Path(d) / name).write_bytes(data)
            url = f"local://{Path(d) / name}"
        try:
            keep_if_broken(lambda: promise(cli("analyze", url, "-j", "1", "-o", Path(d) / "out")), name, data)
        finally:
            if scheme == "memory":
                fs.rm(f"/fuzz/{name}")


# --- reports (diff) ----------------------------------------------------------------------------------------
def _base_report() -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        assert cli("analyze", REAL_TRACES / "cpu_only_tiny.pt.trace.json.gz", "--json", out).exit_code == 0
        return json.loads(out.read_text())


BASE_REPORT = _base_report()


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _paths(v, prefix + (i,))


REPORT_PATHS = [p for p in _paths(BASE_REPORT) if p]


@st.composite
def mutated_reports(draw):
    doc = copy.deepcopy(BASE_REPORT)
    deep = None
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(REPORT_PATHS))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.integers(0, 9)) == 0:
                del parent[path[-1]]
            elif draw(st.integers(0, 9)) == 0:
                parent[path[-1]], deep = "@deep@", draw(st.sampled_from([50, 1100, 5000]))
            else:
                parent[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue
    text = json.dumps(doc, ensure_ascii=False, sort_keys=draw(st.booleans()))
    if deep:
        text = text.replace('"@deep@"', nested(deep))
    return damage(text.encode("utf-8", "surrogatepass"), draw(byte_damage()) if draw(st.integers(0, 4)) == 0 else [])


@SETTINGS
@given(mutated_reports())
def test_fuzz_reports_for_diff(raw):
    with tempfile.TemporaryDirectory() as d:
        base, head = Path(d) / "base.json", Path(d) / f"report{next(_COUNTER)}.json"
        base.write_text(json.dumps(BASE_REPORT))
        head.write_bytes(raw)
        keep_if_broken(lambda: promise(cli("diff", base, head, "--json", Path(d) / "d.json", "--markdown",
                                           Path(d) / "d.md")), head.name, raw)


# --- rule files ----------------------------------------------------------------------------------------
from rule_files import HOSTILE_SKELETON as RULE  # noqa: E402 - the rule file skeleton those tests use

FACTS = ["step_us", "host_share", "kernels_per_step", "max_kernels"]
FILTERS = ["join", "length", "list", "upper", "center(99999999)", "replace('A', 'AAAA')", "sum", "sort", "us", "pct",
           "num", "bytes", "indent(1000000)", "format(1)", "wordwrap(1)", "batch(2)", "first", "round(400)"]
METHODS = ["upper()", "split()", "format(1)", "__class__", "mro()", "zfill(999999999)", "items()", "get('a')"]
pieces = st.one_of(
    st.sampled_from(FACTS),
    st.sampled_from(["1", "0", "-1", "10**9", "10**400", "1e308", "'A'", "'%0999999999d'", "range(100000)", "[1, 2]",
                     "none", "true", "''", "'\\x1b]0;t\\x07'"]),
)


@st.composite
def expressions(draw, depth=0):
    if depth > 2 or draw(st.integers(0, 2)) == 0:
        return draw(pieces)
    a, b = draw(expressions(depth + 1)), draw(expressions(depth + 1))
    op = draw(st.sampled_from(["+", "-", "*", "**", "/", "//", "%", "~", "and", "or", ">", "==", "in"]))
    form = draw(st.sampled_from(["bin", "bin", "filter", "call", "attr"]))
    if form == "filter":
        return f"({a}) | {draw(st.sampled_from(FILTERS))}"
    if form == "call":
        return f"({a}).{draw(st.sampled_from(METHODS))}"
    if form == "attr":
        return f"({a})[{b}]"
    return f"({a}) {op} ({b})"


@st.composite
def templates(draw):
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        e = draw(expressions())
        kind = draw(st.sampled_from(["out", "out", "if", "for", "set"]))
        if kind == "out":
            parts.append("{{ %s }}" % e)
        elif kind == "if":
            parts.append("{%% if %s %%}y{%% endif %%}" % e)
        elif kind == "for":
            inner = draw(st.sampled_from(["", "{{ i }}", "{% for j in range(100000) %}{% endfor %}"]))
            parts.append("{%% for i in %s %%}%s{%% endfor %%}" % (e, inner))
        else:
            parts.append("{%% set v = %s %%}{{ v }}" % e)
    return "".join(parts)


@SETTINGS
@given(expressions(), expressions(), templates())
def test_fuzz_rule_files(condition, saving, message):
    text = RULE.format(condition=condition.replace('"', "'"), saving=saving.replace('"', "'"),
                       message=message.replace('"""', "'''"))
    with tempfile.TemporaryDirectory() as d:
        rules = Path(d) / f"rule{next(_COUNTER)}.toml"  # a new name each time: the catalogue caches by path
        rules.write_text(text)
        trace = _small_trace(Path(d))
        keep_if_broken(lambda: promise(cli("analyze", trace, "--rules", rules)), rules.name, text.encode())


def _small_trace(folder: Path) -> Path:
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k", host=(1, 2), device=(10, 50))
    return tb.write(folder / "t.json")


# --- pyproject.toml ----------------------------------------------------------------------------------------
def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if not isinstance(value, float) or value == value else "nan"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"


toml_leaves = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.sampled_from(
    [0.05, -1.0, float("inf"), float("nan"), 1e300, 5.0]), st.sampled_from(["x", "rules.toml", "", "\x1b[31m"]))
toml_values = st.recursive(toml_leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["num-workers", "min_share", "item-sync", "x", "num-workers.min_share"]), inner, max_size=3),
    max_leaves=6)


@st.composite
def pyprojects(draw):
    kind = draw(st.sampled_from(["tool", "perfsleuth", "keys", "keys", "deep", "raw"]))
    if kind == "tool":
        return f"tool = {toml_value(draw(toml_values))}\n"
    if kind == "perfsleuth":
        return f"[tool]\nperfsleuth = {toml_value(draw(toml_values))}\n"
    if kind == "deep":
        return "[tool.perfsleuth]\nthresholds = " + nested(draw(st.sampled_from([3, 500, 2000])), "") + "\n"
    keys = draw(st.dictionaries(st.sampled_from(["rules", "thresholds", "other"]), toml_values, max_size=2))
    text = "[tool.perfsleuth]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items())
    if kind == "raw":
        text = text[:draw(st.integers(0, len(text)))] + draw(st.sampled_from(["[", "=", '"', "\x00", "]]"]))
    return text


@SETTINGS
@given(pyprojects())
def test_fuzz_pyproject(text):
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "pyproject.toml").write_text(text)
        trace = _small_trace(Path(d))
        keep_if_broken(lambda: promise(cli("analyze", trace, cwd=d)), "pyproject.toml", text.encode())
        keep_if_broken(lambda: promise(cli("rules", cwd=d)), "pyproject.toml", text.encode())
        shutil.rmtree(Path(d), ignore_errors=True)


@pytest.mark.parametrize("section", [{"compiles": 5}, {"graph_breaks": 3.5}, {"steps": {"wait": 7}}, {"steps": 4},
                                     {"counters": [1]}, {"config": "x"}, 7, "compile", None])
@pytest.mark.parametrize("root", ["perfsleuth", "perfsleuth_final"])
def test_compile_metadata_of_the_wrong_type_is_dropped_with_a_warning(tmp_path, section, root):
    """Issue 38, class 7: `compiles`, `graph_breaks` or `steps.wait` a number ended in a traceback (exit 1, the
    CI gate's code). The compile section is validated like the rest of the run metadata: a bad one is dropped
    with a warning that names where, and the rest of the report stands. In `perfsleuth_final` too (what run
    measured after the window: its compile section wins)."""
    doc = copy.deepcopy(BASES[-2])  # recorded by `perfsleuth run`
    doc.setdefault(root, {})["compile"] = section
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    result = cli("analyze", path)
    promise(result)
    assert result.exit_code == 0
    assert "perfsleuth compile metadata was ignored" in result.output
    assert "verdict:" in result.output


def test_python_functions_that_are_not_frames_are_no_source_sites(tmp_path):
    """Issue 38, class 7: a `python_function` whose name is not `file(N): func` (no line, a line that is
    not a number, a negative one, an empty name) is not a source site: the finding that cited
    `toy.py:25` stands without a site, exit 0, no traceback."""
    fixtures = FIXTURE_TRACE.parent
    odd = ["weird name", "toy.py(abc): f", "(1): ", ": ", "toy.py(25)", "", "a.py(-5): <module>"]
    for name in ("dataloader_starved.pt.trace.json.gz", "dataloader_starved.stacks.pt.trace.json.gz"):
        doc = json.loads(gzip.decompress((fixtures / name).read_bytes()))
        frames = [e for e in doc["traceEvents"] if e.get("cat") == "python_function"]
        for i, e in enumerate(frames):
            e["name"] = odd[i % len(odd)]
        assert frames or "stacks" not in name  # the stacks companion holds the frames
        (tmp_path / name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    result = cli("analyze", tmp_path / "dataloader_starved.pt.trace.json.gz", "-o", tmp_path / "o")
    promise(result)
    assert result.exit_code == 0, result.output
    [finding] = json.loads((tmp_path / "o" / "report.json").read_text())["findings"]
    assert finding["rule"] == "num-workers"
    text = json.dumps(finding)
    assert finding["locations"] == [] and "toy.py:25" not in text and "weird name" not in text, text
