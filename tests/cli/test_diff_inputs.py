"""issue 18: `diff` on damaged report.json files. Every field diff reads is checked against the typed
report@1 schema at the boundary (report/schema.py): one line naming the file and the bad field, exit 2."""

import json

import pytest
from cli_promise import cli
from perfsleuth.cli.diff import diff_reports
from perfsleuth.errors import TraceError
from report_factory import make_report


def _set(doc, path, value):
    *parents, last = path
    for key in parents:
        doc = doc[key]
    doc[last] = value


# (where, value, the field the message names): each crashed diff.py before the typed schema
DAMAGE = [
    (("steps", 0), "x", "$.steps[0]"),
    (("steps", 0, "duration_us"), "12", "$.steps[0].duration_us"),
    (("steps", 0, "time_us"), "x", "$.steps[0].time_us"),
    (("steps", 0, "time_us", "kernel"), "x", "$.steps[0].time_us.kernel"),
    (("summary",), "x", "$.summary"),
    (("summary", "time_share"), [1, 2], "$.summary.time_share"),
    (("summary", "time_share", "host"), "x", "$.summary.time_share.host"),
    (("trace",), "x", "$.trace"),
    (("trace", "device"), {"a": 1}, "$.trace.device"),
    (("findings",), {"rule": "x"}, "$.findings"),
    (("findings", 0, "rule"), 5, "$.findings[0].rule"),
    (("top_kernels", 0, "total_us"), "x", "$.top_kernels[0].total_us"),
    (("top_ops", 0, "count"), "x", "$.top_ops[0].count"),
    (("top_ops", 0, "name"), None, "$.top_ops[0].name"),
    (("verdict",), 7, "$.verdict"),
    (("steps", 1, "duration_us"), -1.0, "$.steps[1].duration_us"),
    (("steps", 1, "duration_us"), 1e300, "$.steps[1].duration_us"),
    (("steps",), [], "$.steps"),
]


@pytest.mark.parametrize("where,value,field", DAMAGE, ids=[d[2] for d in DAMAGE])
def test_a_damaged_report_is_one_line_naming_the_field(tmp_path, where, value, field):
    good = tmp_path / "base.json"
    good.write_text(json.dumps(make_report(steps=4)))
    doc = make_report(steps=4)
    _set(doc, where, value)
    bad = tmp_path / "head.json"
    bad.write_text(json.dumps(doc))
    result = cli("diff", good, bad)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output, result.output
    assert result.stderr.startswith(f"perfsleuth: error: {bad}: not a valid perfsleuth report (")
    assert f"- at `{field}`)" in result.stderr, result.stderr


def test_the_library_checks_dicts_too():
    doc = make_report(steps=4)
    doc["steps"][2]["duration_us"] = "slow"
    with pytest.raises(TraceError, match=r"head report: not a valid perfsleuth report .*\$\.steps\[2\]\.duration_us"):
        diff_reports(make_report(steps=4), doc)


def test_a_deeply_nested_report_is_one_line(tmp_path):
    doc = make_report(steps=2)
    doc["extra"] = "@"
    text = json.dumps(doc).replace('"@"', "[" * 5000 + "]" * 5000)
    bad = tmp_path / "deep.json"
    bad.write_text(text)
    result = cli("diff", bad, bad)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr == f"perfsleuth: error: {bad}: JSON nested too deeply\n"


def test_a_report_saved_with_sorted_keys_is_still_a_report(tmp_path):
    doc = make_report(steps=200, findings=5)
    doc["findings"] *= 3  # the findings alone fill the first 4 KB
    text = json.dumps(doc, sort_keys=True, indent=2)
    assert text.index('"schema"') > 4096  # findings, steps, summary ... come first
    base = tmp_path / "sorted.json"
    base.write_text(text)
    out = tmp_path / "d.json"
    result = cli("diff", base, base, "--json", out)
    assert result.exit_code == 0, result.output
    d = json.loads(out.read_text())
    assert d["step_time"]["change_us"] == 0.0 and d["base"]["steps"] == 200


def test_a_json_without_schema_or_traceevents_near_the_start_is_read_as_a_trace(tmp_path):
    doc = {"deviceProperties": [{"name": "x" * 5000}], "traceEvents": []}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    result = cli("diff", p, p)
    assert result.exit_code == 2
    assert result.stderr == f"perfsleuth: error: {p}: the trace has no complete events to analyze\n"
