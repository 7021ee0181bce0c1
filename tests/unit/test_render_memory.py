"""The memory section in the terminal, Markdown and HTML: numbers in binary units, trace names
escaped, the level plot with step boundaries and the peak, the categories as a stacked bar; one
line without events."""

from memorybuilder import leaky
from perfsleuth.render.html import render_html
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.terminal import render_terminal
from tracebuilder_rules import analyze

EVIL = "aten::add<script>alert(1)</script>\x1b[31m"
MiB = 1 << 20


def _report(tmp_path, cats=None):
    tb = leaky(steps=4, leak=MiB, temp=100, base=0, capacity=1 << 30)
    for e in tb.events:
        if e.get("name") == "aten::add":
            e["name"] = EVIL
    if cats:
        tb.run_metadata = {"version": 1, "memory": {"device": "cuda:0", "categories_at_peak": cats}}
    return analyze(tb, tmp_path)[0]


def test_a_few_bytes_of_growth_are_not_worded_as_a_leak():
    """4 B a step, rising over 3 steps: said as measured, under the memory-leak rule's 64 KiB, with no 'full in'
    forecast (a helper read it as a leak warning); 1 MiB a step keeps its forecast (the test below)."""
    from perfsleuth.render.memory_text import _growth_text

    small = {"growth_bytes_per_step": 4, "growth_steps": 3, "growth_monotone": True, "steps_until_full": 10**9}
    assert _growth_text(small) == ("growth 4 B/step over 3 steady steps, rising every step (under the 64.00 KiB a "
                                   "step from which memory-leak reports growth)")
    from perfsleuth.render.memory_text import _kept_text

    kept = {"kept_across_steps_bytes": 8, "kept_across_steps": [{"op": "aten::empty", "bytes": 8}]}
    assert _kept_text(kept, str) == ("kept across steps, never freed: 8 B (aten::empty 8 B), under the 64.00 KiB a "
                                     "step from which memory-leak reports growth")
    kept = {"kept_across_steps_bytes": 64 << 10, "kept_across_steps": [{"op": "aten::empty", "bytes": 64 << 10}]}
    assert _kept_text(kept, str) == "kept across steps, never freed: 64.00 KiB (aten::empty 64.00 KiB)"
    from perfsleuth.engine.catalog import load_catalog
    from perfsleuth.render.memory_text import LEAK_FROM_BYTES

    leak = next(r for r in load_catalog() if r.slug == "memory-leak")
    assert leak.thresholds["min_bytes_per_step"] == LEAK_FROM_BYTES  # the words follow the rule's default


def test_terminal_and_markdown_show_peak_growth_and_what_keeps_it(tmp_path):
    report = _report(tmp_path)
    text = render_terminal(report)
    assert (
        "cuda:0: peak allocated 4.00 MiB (in ProfilerStep#4), reserved 4.00 MiB; capacity 1.00 GiB,"
        " headroom 1020.00 MiB (measured)"
        in text
    )
    assert (
        "kept across steps, never freed: 3.00 MiB (aten::add<script>" in text
        and "cached" not in text
    )
    assert (
        "growth 1.00 MiB/step over 4 steady steps, rising every step: full in about 1,019 more"
        " steps"
        in text
    )
    assert "\x1b[31m" not in text and "\\x1b[31m" in text  # the escape sequence shown, never sent
    md = render_markdown(report)
    section = md[md.index("#### Memory (from the trace)") : md.index("#### Findings")]
    assert (
        "growth 1.00 MiB/step" in section
        and "<script>" not in section
        and "\\<script\\>" in section
    )


def test_html_plots_the_level_with_steps_and_peak_and_the_categories(tmp_path):
    cats = {
        "parameter": 100,
        "gradient": 100,
        "optimizer_state": 200,
        "activation": 600,
        "input": 0,
        "temporary": 0,
        "other": 0,
    }
    html = render_html(_report(tmp_path, cats))
    section = html[html.index('<section id="memory">') :]
    section = section[: section.index("</section>")]
    assert 'class="chart memory-plot"' in section and section.count('class="step-edge"') == 4
    assert '<circle class="mem-peak"' in section and "peak 4.00 MiB in ProfilerStep#4" in section
    assert section.count('<rect class="m-') == 4 and "activation 600 B (60%)" in section
    assert "<script>" not in section and "&lt;script&gt;" in section


def test_a_trace_without_memory_events_says_how_in_one_line(tmp_path):
    tb = leaky(steps=2)
    tb.events = [e for e in tb.events if e["ph"] != "i"]
    tb.profile_memory = None
    report = analyze(tb, tmp_path)[0]
    lines = [x for x in render_terminal(report).splitlines() if x.startswith("memory")]
    assert lines == [
        "memory: not recorded — record with profile_memory=True (or use perfsleuth run)"
    ]
    assert "Not recorded: record with profile_memory=True" in render_html(report)


def test_categories_on_relative_cpu_levels_say_what_they_add_up_to():
    """An unseen DLRM (issue 39): "peak allocated 3.68 MiB" (CPU levels: allocated since profiling began) above
    "parameter 14.47 MiB (77%)" at the memory window's peak read as a contradiction. The categories' line says
    their total and that the peak above leaves out what was made before profiling; on absolute levels, nothing."""
    from perfsleuth.render.memory_html import category_bar
    from perfsleuth.render.memory_text import categories_total, device_lines
    cats = {"parameter": 3 * MiB, "gradient": MiB, "activation": MiB // 2, "other": 0}
    d = {"device": "cpu", "levels": "relative", "peak_allocated_bytes": 2 * MiB, "categories_at_peak": cats}
    lines = device_lines(d, str)
    assert lines[-1] == ("at the peak, by category (run): activation 512.00 KiB (11%), parameter 3.00 MiB (67%), "
                         "gradient 1.00 MiB (22%); 4.50 MiB in all, with the tensors made before profiling "
                         "began (parameters), which the peak allocated above leaves out")
    assert category_bar(cats, categories_total(d))["text"] == lines[-1].removeprefix("at the peak, by category (run): ")
    assert categories_total({**d, "levels": "absolute"}) == ""
    assert categories_total({**d, "categories_at_peak": {}}) == ""
