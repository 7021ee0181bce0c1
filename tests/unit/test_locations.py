"""Source locations: which line a frame names (function start, or the line it was on when tracing
started), the Dataset code under the DataLoader's __next__, and every renderer saying which it is."""

from perfsleuth.api import analyze_file
from perfsleuth.facts.locations import is_user_frame
from perfsleuth.render.html import render_html
from perfsleuth.render.markdown import render_markdown
from perfsleuth.report.present import location_text
from perfsleuth.render.terminal import render_terminal
from tracebuilder_rules import SINGLE_LOADER, RuleTraceBuilder, analyze, fired


def loader_trace() -> RuleTraceBuilder:
    """How `perfsleuth run` records a loop: train() and the script were running when the profiler started
    (inside torch/autograd/profiler.py _start_trace); each step's DataLoader __next__ calls the Dataset's
    __getitem__ (which calls a helper) and a custom collate_fn."""
    tb = RuleTraceBuilder(device=False, rank=None)
    module = tb.py("train.py(90): <module>", 0, 10_000)
    train = tb.py("train.py(42): train", 1, 9_999, parent=module)
    step = tb.py("torch/profiler/profiler.py(800): step", 2, 20, parent=train)
    tb.py("torch/autograd/profiler.py(358): _start_trace", 3, 10, parent=step)
    for i in range(2):
        t0 = 100 + i * 4000
        tb.step(i + 1, t0, 4000)
        tb.annotation(SINGLE_LOADER, t0 + 10, 2000)
        nxt = tb.py("torch/utils/data/dataloader.py(700): __next__", t0 + 11, 1990, parent=train)
        fetch = tb.py("torch/utils/data/_utils/fetch.py(49): fetch", t0 + 12, 1980, parent=nxt)
        for k in range(4):
            item = tb.py("data.py(20): __getitem__", t0 + 20 + k * 400, 390, parent=fetch)
            tb.py("data.py(8): tokenize", t0 + 25 + k * 400, 300, parent=item)
        tb.py("data.py(30): collate", t0 + 1700, 250, parent=fetch)
        tb.op("aten::mm", t0 + 2100, 1800)
    return tb


def test_dataloader_findings_point_at_the_dataset(tmp_path):
    report, facts = analyze(loader_trace(), tmp_path)
    sites = facts.tables["dataloader_sites"]
    assert [(s["file"], s["line"], s["function"], s["count"], s["us_per_step"], s["line_kind"]) for s in sites] == [
        ("data.py", 20, "__getitem__", 8, 1560.0, "function"), ("data.py", 30, "collate", 2, 250.0, "function")]
    f = fired(report)["num-workers"]
    assert [(loc["function"], loc["line_kind"]) for loc in f["locations"]] == [("__getitem__", "function"),
                                                                                ("collate", "function")]
    # one loader time per sentence (issue 37): the site's part of it as a share, 1560 of the loader's 2000 µs
    assert ("The loading time is spent in `__getitem__` (`data.py:20`), 78.0% of the loader's time; inside it: "
            "Python 100%.") in f["message"]  # tokenize is Python that calls nothing traced
    assert [s["inside"] for s in sites] == ["Python 100%", "Python 100%"]


def test_what_fills_the_dataset_code_is_said(tmp_path):
    """Issue 37: each __getitem__ (1000 µs) sleeps 500, opens an image with PIL 200, reads a file 100, calls
    torch.randn 100 and runs 100 µs of its own Python: said by share, largest first."""
    tb = RuleTraceBuilder(device=False, rank=None)
    for i in range(2):
        t0 = i * 4000
        tb.step(i + 1, t0, 4000)
        tb.annotation(SINGLE_LOADER, t0 + 10, 2100)
        nxt = tb.py("torch/utils/data/dataloader.py(700): __next__", t0 + 11, 2090)
        for k in range(2):
            a = t0 + 20 + k * 1030
            item = tb.py("data.py(20): __getitem__", a, 1000, parent=nxt)
            tb.py("<built-in function sleep>", a + 10, 500, parent=item)
            img = tb.py("PIL/Image.py(3200): open", a + 520, 200, parent=item)
            tb.py("<built-in method read of _io.BufferedReader object at 0x7f>", a + 530, 100, parent=img)
            tb.py("<built-in method randn of type object at 0x7f>", a + 730, 100, parent=item)
        tb.op("aten::mm", t0 + 2200, 1700)
    report, facts = analyze(tb, tmp_path)
    (site,) = facts.tables["dataloader_sites"]
    assert (site["function"], site["us_per_step"]) == ("__getitem__", 2000.0)
    # PIL's open: 100 µs of its own (decoding) and 100 µs in read (I/O); __getitem__'s own time 1000 - 800 Python
    assert site["inside"] == "sleeping or waiting 50%, Python 20%, tensor ops 10%, I/O 10%, decoding 10%"


def test_frames_running_when_tracing_started_carry_that_line(tmp_path):
    """train() was running: its line 42 is where it was, not its first line; the renderers say so."""
    tb = loader_trace()
    report, facts = analyze(tb, tmp_path)
    hot = {s["function"]: s["line_kind"] for s in facts.tables["host_sites"]}
    assert hot["train"] == "running"
    site = next(s for s in facts.tables["small_op_sites"] + facts.tables["host_sites"] if s["function"] == "train")
    assert location_text(site) == "train.py:42 in train (the line it was on when tracing started, not the call)"
    assert location_text({"file": "data.py", "line": 20, "function": "__getitem__", "line_kind": "function"}) == \
        "data.py:20 in __getitem__ (first line of the function)"
    assert "at data.py:20 in __getitem__ (first line of the function)" in render_terminal(report)
    assert "data.py:20 in __getitem__ (first line of the function)" in render_markdown(report)
    assert "data.py:20 in __getitem__ (first line of the function)" in render_html(report)


def test_profiler_and_perfsleuth_frames_are_not_user_code():
    import perfsleuth

    own = perfsleuth.__file__.rsplit("/", 1)[0] + "/record/trace_metadata.py(24): host_facts"
    assert not is_user_frame(own)
    assert not is_user_frame("site-packages/perfsleuth/record/session.py(134): step")
    assert not is_user_frame("torch/autograd/profiler.py(358): _start_trace")
    assert is_user_frame("data.py(20): __getitem__")
    assert not is_user_frame("perfsleuth(8): <module>")  # the console script (bin/ is first on sys.path)


def test_library_frames_are_not_the_users_even_when_written_relative():
    """The profiler writes a library's frames relative to its site-packages folder: a frame whose top folder
    or module is one the run saw loaded from a library folder is not the user's, nor one in site-packages."""
    from perfsleuth.facts.locations import library_roots
    from perfsleuth.trace.model import Trace

    lightning = "lightning/pytorch/plugins/precision/precision.py(113): optimizer_step"
    roots = frozenset({"lightning", "six"})
    assert is_user_frame(lightning) and not is_user_frame(lightning, roots)
    assert not is_user_frame("six.py(10): f", roots) and is_user_frame("train.py(34): <module>", roots)
    assert not is_user_frame("/venv/lib/python3.11/site-packages/lightning/x.py(3): g")
    assert not is_user_frame("/usr/lib/python3/dist-packages/yaml/x.py(3): g")
    trace = Trace(path="t.json", events=None, run_metadata={"code": {"user_dir": "/p", "library_roots": ["lightning", 3]}})
    assert library_roots(trace) == frozenset({"lightning"})


def test_html_top_finding_is_the_largest_saving_on_a_real_trace(real_traces):
    """mi300: no forecast saves time. exposed-communication and step-outliers have no number: they keep
    their rules' severity (high capped at medium; low) and rank by ceiling; channels-last is forecast at
    1.00x (nothing to gain): low, and last."""
    report = analyze_file(real_traces / "mi300_resnet_act_checkpoint.json.gz").to_dict()
    assert [(f["rule"], f["severity"], f["severity_from"]) for f in report["findings"]] == [
        ("exposed-communication", "medium", "rule"), ("step-outliers", "low", "rule"),
        ("channels-last", "low", "forecast")]
    assert report["findings"][2]["forecast"]["speedup"] == 1.0
    html = render_html(report)
    top = html.split('<div class="label">Top finding</div>', 1)[1][:600]
    assert "Collectives are not hidden behind compute" in top and "no forecast" in top


def test_the_largest_saving_heads_the_report_whatever_the_rules_said(tmp_path):
    """Steps of 1000, 1000 and 2000 µs (step-outliers: removing the outlier is forecast at 1.33x, 333 µs
    per step: high) and a num_workers=0 loader taking 100 µs per step (num-workers: a worker's handoff
    costs more than the 100 µs it hides, forecast 0.68x: low). The largest saving is on top."""
    tb = RuleTraceBuilder(device=False, rank=None)
    t0 = 0
    for i, dur in enumerate((1000, 1000, 2000)):
        tb.step(i + 1, t0, dur)
        tb.annotation(SINGLE_LOADER, t0 + 1, 100)
        tb.op("aten::mm", t0 + 110, dur - 120)
        t0 += dur
    report, _ = analyze(tb, tmp_path)
    assert [(f["rule"], f["severity"], f["forecast"]["speedup"], f["forecast"]["saving_us"])
            for f in report["findings"]] == [("step-outliers", "high", 1.333, 333.333),
                                             ("num-workers", "low", 0.682, -622.222)]
    top = render_html(report).split('<div class="label">Top finding</div>', 1)[1][:600]
    assert "Some steps are much slower" in top and "est. 1.33×" in top
    md = render_markdown(report)
    assert "**Top finding:** Some steps are much slower" in md
    assert "costs 622 µs per step" in md  # a negative saving is a cost, never "saves -622 µs"
