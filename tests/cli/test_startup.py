"""Start-up imports only what a command needs: `--version`, `rules` and `docs` never load pandas, numpy
or torch (they took 0.3 s of every start), and `run` is loaded only when it is used. Checked through
sys.modules in a fresh interpreter, not with a timer (benchmarks/startup.py measures the times)."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("pandas", "numpy", "torch", "jinja2")
REAL = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "real"

_CHILD = r"""
import json, sys
from perfsleuth.cli.main import main
try:
    main(sys.argv[1:], prog_name="perfsleuth")
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in %r),
                  "run": "perfsleuth.cli.run" in sys.modules}), file=sys.stderr)
""" % (HEAVY,)


def _start(*argv: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, timeout=120)
    result = json.loads(proc.stderr.strip().splitlines()[-1])
    result["stdout"] = proc.stdout
    return result


@pytest.mark.parametrize("argv", [("--version",), ("rules",), ("rules", "item-sync"), ("docs",), ("docs", "run"),
                                  ("--help",)])
def test_cheap_commands_import_no_pandas_numpy_torch_or_jinja2(argv):
    out = _start(*argv)
    assert out["code"] == 0 and out["stdout"].strip()
    assert out["loaded"] == [], f"perfsleuth {' '.join(argv)} imported {out['loaded']}"
    assert out["run"] == (argv == ("--help",))  # the help lists run's one-line summary: it loads the command


def test_the_rule_listing_still_says_what_it_used_to():
    out = _start("rules")
    assert "item-sync" in out["stdout"] and "`perfsleuth rules SLUG` prints a rule's docs." in out["stdout"]


def test_run_is_loaded_when_used():
    out = _start("run", "--help")
    assert out["code"] == 0 and "Profile a training script" in out["stdout"]
    assert out["run"] and "torch" not in out["loaded"]


def test_a_user_rule_file_is_still_checked_against_the_facts(tmp_path):
    """`rules --rules FILE` checks the user's names against the fact registry (which loads pandas); the
    built-in catalog is held to the same checks by tests/unit/test_engine.py."""
    rule = tmp_path / "mine.toml"
    rule.write_text("""
[[rule]]
slug = "mine"
title = "t"
category = "host"
severity = "low"
condition = "no_such_fact > 1"
saving_us = "0"
saving_basis = "b"
evidence = []
message = "m"
fix = "f"
thresholds = {}
docs = {what = "w", why = "w", example = "e", use_instead = "u", thresholds = "t", references = []}
""")
    out = _start("rules", "--rules", str(rule))
    assert out["code"] == 2 and "pandas" in out["loaded"]


_FORKS = r"""
import json, os, sys
forks = []
os.register_at_fork(before=lambda: forks.append(sorted(m for m in ("pandas", "jinja2") if m in sys.modules)))
from perfsleuth.trace import byteranges
byteranges.MIN_BYTES = 1000  # the parallel byte-range path for this small real trace
from perfsleuth.cli.main import main
try:
    main(["analyze", "-j", "2", "--json", sys.argv[2], sys.argv[1]], prog_name="perfsleuth")
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "forks": forks, "after": "pandas" in sys.modules}), file=sys.stderr)
"""


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("gz", [True, False])
def test_a_large_traces_decoding_workers_are_forked_before_the_analysis_is_imported(tmp_path, gz):
    """`analyze` forks the decoding workers first and imports pandas and the analysis while they decode
    (api.load_analysis as reading.read_events' idle): the workers carry only what decoding needs. The
    process that decodes the allocator's events (trace/memory_child.py) is forked before them from a plain
    file; from a .json.gz once they are done (its byte ranges are known only then), after the imports."""
    trace = REAL / "a100_trace_diff_control.json.gz"
    if not gz:
        trace = tmp_path / "t.json"
        trace.write_bytes(gzip.decompress((REAL / "a100_trace_diff_control.json.gz").read_bytes()))
    proc = subprocess.run([sys.executable, "-c", _FORKS, str(trace), str(tmp_path / "r.json")], capture_output=True,
                          text=True, timeout=300)
    out = json.loads(proc.stderr.strip().splitlines()[-1])
    assert out["code"] == 0, proc.stderr[-2000:]
    # the memory process and two workers, none with pandas or jinja2; from gzip the memory process comes last
    assert len(out["forks"]) == 3 and (out["forks"][:2] == [[], []] if gz else out["forks"] == [[], [], []])
    assert ("pandas" in out["forks"][2]) == gz  # from gzip: forked after the analysis was imported
    assert out["after"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["trace"]["events"] > 0 and report["verdict"]


_AFTER_LOAD = r"""
import json, sys
from perfsleuth import api
api.load_analysis()
before = set(sys.modules)
report = api.analyze_file(sys.argv[1])
print(json.dumps({"new": sorted(m for m in set(sys.modules) - before if m.startswith("perfsleuth")),
                  "verdict": report.verdict}))
"""


def test_load_analysis_imports_what_the_analysis_of_a_trace_needs():
    """api.ANALYSIS_MODULES is kept by hand: whatever it misses would be imported after the decode, on the
    critical path, instead of while the workers decode. Analysing a real trace after it imports nothing more."""
    trace = REAL / "a100_alexnet_small.json.gz"
    proc = subprocess.run([sys.executable, "-c", _AFTER_LOAD, str(trace)], capture_output=True, text=True, timeout=300)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["verdict"]
    assert out["new"] == []
