"""`perfsleuth.profile()`: the machinery of `perfsleuth run` around a loop or a step function."""

import json
import sys
from pathlib import Path

import perfsleuth
import pytest
import torch
from perfsleuth.record.profile import Profile, ProfiledReport
from perfsleuth.errors import UsageError
from perfsleuth.report.model import Report
from perfsleuth.trace.model import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "scripts" / "cpu"))
import toy  # noqa: E402

# boundary counting: no memory or stacks window (see below), no unprofiled steps after the window (but in the
# first test); the memory window's own test: tests/test_run_memory.py
SMALL = dict(wait=1, warmup=1, active=3, after=0, stack_steps=0, memory_steps=0)


def model_and_opt(features=32, lr=0.01):
    torch.manual_seed(0)
    model = toy.mlp(features, 32, 1)
    return model, torch.optim.SGD(model.parameters(), lr=lr)


def batches(n=20, features=32, delay=0.0):
    args = toy.parser("t", steps=n, batch_size=8, features=features, delay=delay).parse_args([])
    return toy.loader(args)


def train_step(model, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def test_with_block_steps_from_the_optimizer_and_runs_the_whole_loop(tmp_path, capsys):
    model, opt = model_and_opt()
    done = []
    with perfsleuth.profile(tmp_path, **dict(SMALL, after=2)) as prof:
        for x, y in batches():
            train_step(model, opt, x, y)
            done.append(1)
        done.append("after the loop")  # runs: profile() never ends the user's code early by default
    # boundaries: the first next() (start-up), then one per optimizer step; window = 1 + 1 + 3, then 2 steps
    # timed without the profiler; the other 14 iterations ran unprofiled, untimed
    assert prof.steps == 7 and len(done) == 21 and done[-1] == "after the loop"
    assert capsys.readouterr().err == ""
    assert not (tmp_path / "trace.pt.trace.json").exists()  # finished: gzipped with the times of those 2 steps
    assert len(load_trace(tmp_path / "trace.pt.trace.json.gz").run_metadata["clock"]["after_us"]) == 2
    rep = prof.report
    assert isinstance(rep, ProfiledReport) and isinstance(rep, Report)
    assert [s["name"] for s in rep.to_dict()["steps"]] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert rep.trace_file == tmp_path / "trace.pt.trace.json.gz" and rep.trace_file.is_file()
    # 3 recorded steps; the first may be set apart as warm-up on a busy machine (docs/attribution.md#steady-state)
    counts = rep.to_dict()["summary"]["steps"]
    shown = "3 steps" if counts["steady"] == 3 else f"{counts['steady']} steady steps + {counts['warmup']} warm-up"
    assert counts["partial"] == 0 and counts["steady"] + counts["warmup"] == 3
    assert repr(rep) == f"<ProfiledReport {rep.verdict}, {shown}, trace {rep.trace_file}>"
    assert str(rep).startswith("perfsleuth ") and f"verdict: {rep.verdict.upper()}" in str(rep)
    assert str(rep).endswith(f"\ntrace: {rep.trace_file}")  # the user's folder: kept
    written = rep.save(tmp_path)  # the folder that already holds the trace
    assert sorted(p.name for p in written) == ["report.html", "report.json", "summary.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.json", "summary.md",
                                                           "trace.pt.trace.json.gz"]


def test_report_renders_in_jupyter_and_saves_the_same_files(tmp_path):
    model, opt = model_and_opt()
    with perfsleuth.profile(**SMALL) as prof:
        for x, y in batches(delay=0.002):
            train_step(model, opt, x, y)
    rep = prof.report
    assert rep.verdict == "dataloader-bound"
    page = rep._repr_html_()
    assert page.startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;') and page.endswith("</iframe>")
    assert "dataloader-bound" in page and page.count('"') == 6  # the report's own quotes are escaped
    written = rep.save(tmp_path / "out")
    assert sorted(p.name for p in written) == ["report.html", "report.json", "summary.md", "trace.pt.trace.json.gz"]
    assert json.loads((tmp_path / "out" / "report.json").read_text())["verdict"] == "dataloader-bound"
    with pytest.raises(UsageError, match="trace.pt.trace.json.gz: exists; use force=True to overwrite"):
        rep.save(tmp_path / "out")
    assert len(rep.save(tmp_path / "out", force=True)) == 4
    assert prof.report is rep  # analysed once


def test_wrapped_step_function_counts_calls_and_keeps_working_after_the_window():
    model, opt = model_and_opt()
    prof = perfsleuth.profile(**SMALL)
    step = prof(lambda x, y: train_step(model, opt, x, y))
    assert step.profile is prof
    calls = sum(1 for x, y in batches(12) if step(x, y) is None)
    assert calls == 12  # no early stop for a wrapped function: it just stops being profiled
    assert prof.steps == 5  # 5 calls made the window; the optimizer hook did not add steps
    assert len(prof.report.to_dict()["steps"]) == 3


def test_stop_after_window_ends_the_block_and_says_so_on_stderr(tmp_path, capsys):
    model, opt = model_and_opt()
    done = []
    with perfsleuth.profile(tmp_path, stop_after_window=True, **SMALL) as prof:
        for x, y in batches():
            train_step(model, opt, x, y)
            done.append(1)
        done.append("after the loop")  # skipped: asked to end the block when the window is recorded
    assert prof.steps == 5 and len(done) == 3
    assert capsys.readouterr().err == ("perfsleuth: stopped the profiled block after step 5 (3 profiled), as "
                                       "stop_after_window=True asks: the rest of the `with` block did not run\n")
    assert len(prof.report.to_dict()["steps"]) == 3


def test_manual_steps_turn_the_automatic_boundaries_off():
    model, opt = model_and_opt()
    with perfsleuth.profile(wait=0, warmup=1, active=2, stack_steps=0, memory_steps=0, manual_steps=True) as prof:
        for i, (x, y) in enumerate(batches(10)):
            train_step(model, opt, x, y)
            train_step(model, opt, x, y)  # two optimizer steps per iteration: prof.step() decides
            prof.step()
    assert prof.steps == 7 and i == 9  # the loop ran whole; only the window (3) was profiled, 4 more timed after it


def test_first_manual_step_switches_from_automatic_boundaries():
    model, opt = model_and_opt()
    with perfsleuth.profile(wait=1, warmup=1, active=2, stack_steps=0, memory_steps=0) as prof:
        for i, (x, y) in enumerate(batches(10)):
            train_step(model, opt, x, y)
            prof.step()
    # iteration 0: the DataLoader (start-up), the optimizer and prof.step() each counted once;
    # from then on only prof.step(): 3 + 1 more = the window of 4, then 4 timed without the profiler
    assert prof.steps == 8 and i == 9


def test_only_the_first_optimizer_marks_steps():
    model_a, opt_a = model_and_opt()
    model_b, opt_b = model_and_opt()
    with perfsleuth.profile(wait=0, warmup=1, active=2, stop_after_window=False) as prof:
        for i in range(3):
            x = torch.randn(8, 32)
            train_step(model_a, opt_a, x, torch.zeros(8, dtype=torch.long))
            train_step(model_b, opt_b, x, torch.zeros(8, dtype=torch.long))
        after = prof.steps
    assert after == 3  # a GAN-like loop with two optimizers: one step per iteration


def test_eval_loop_without_optimizer_gets_steps_from_the_dataloader():
    model, _ = model_and_opt()
    with perfsleuth.profile(**SMALL) as prof, torch.no_grad():
        for x, _ in batches(10):
            model(x)
    assert prof.steps == 5 and len(prof.report.to_dict()["steps"]) == 3


def test_errors_say_what_to_do():
    with pytest.raises(RuntimeError, match="nothing profiled yet"):
        perfsleuth.profile().report
    with pytest.raises(RuntimeError, match=r"prof.step\(\) outside"):
        perfsleuth.profile().step()
    with pytest.raises(TypeError):
        perfsleuth.profile(actives=3)
    with pytest.raises(UsageError, match="^--active must be at least 1$"):
        perfsleuth.profile(active=0)
    model, opt = model_and_opt()
    with perfsleuth.profile(wait=5) as prof:
        for x, y in batches(3):
            train_step(model, opt, x, y)
    with pytest.raises(RuntimeError, match="no profiled step completed: 4 step"):
        prof.report  # the start-up and 3 optimizer steps: the window starts after 7
    with pytest.raises(RuntimeError, match="already been started"):
        prof.start()
    with perfsleuth.profile() as prof:
        sum(range(10))
    with pytest.raises(RuntimeError, match="^nothing to analyse: the profiled code ran no torch operation$"):
        prof.report


def test_profile_is_a_lazy_attribute():
    assert perfsleuth.profile is perfsleuth.record.profile.profile
    assert isinstance(perfsleuth.profile(), Profile)


# --- loops without optimizer and DataLoader ------------------------------------------------------------
def test_inference_loop_without_dataloader_gets_steps_from_the_model_call():
    model, _ = model_and_opt()
    head = torch.nn.Linear(10, 2)  # a second top-level module each iteration: not a boundary
    xs = [torch.randn(8, 32) for _ in range(12)]
    with perfsleuth.profile(**SMALL) as prof, torch.no_grad():
        for x in xs:
            head(model(x)).softmax(1)
    # boundaries at the model's 2nd, 3rd, ... outermost call: 11; the window of 5 is the first five
    assert prof.steps == 5 and prof._session.source == "module"
    rep = prof.report.to_dict()
    assert rep["steps_source"] == "ProfilerStep" and len(rep["steps"]) == 3


def test_custom_update_rule_without_optimizer():
    model, _ = model_and_opt()
    with perfsleuth.profile(**SMALL) as prof:
        for _ in range(10):
            loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 32)), torch.zeros(8, dtype=torch.long))
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
    assert prof.steps == 5
    assert len(prof.report.to_dict()["steps"]) == 3


def test_module_boundaries_give_way_to_the_optimizer():
    """A loop whose model call comes before the optimizer step: once the optimizer steps, it marks the
    steps and the module hooks are gone (a training loop pays nothing for them)."""
    from torch.nn.modules import module as nn_module

    model, opt = model_and_opt()
    before = len(nn_module._global_forward_pre_hooks)
    with perfsleuth.profile(wait=0, warmup=1, active=2, stack_steps=0, memory_steps=0) as prof:
        assert len(nn_module._global_forward_pre_hooks) == before + 1
        for _ in range(6):
            train_step(model, opt, torch.randn(8, 32), torch.zeros(8, dtype=torch.long))
            assert len(nn_module._global_forward_pre_hooks) == before
    assert prof._session.source == "optimizer" and prof.steps == 6  # the window of 3, 3 of the 4 steps after it
    assert len(nn_module._global_forward_pre_hooks) == before


def test_no_repeated_step_is_one_window_and_the_report_says_so():
    model, _ = model_and_opt()
    with perfsleuth.profile() as prof:
        a = torch.randn(256, 256)
        for _ in range(4):
            a = a @ a / 16
        model(torch.randn(64, 32))  # called once: not a repeated step
    rep = prof.report.to_dict()
    assert prof.steps == 0 and rep["steps_source"] == "whole-trace" and len(rep["steps"]) == 1
    assert rep["trace"]["has_stacks"] is False
    assert [w for w in rep["warnings"] if "one window" in w] == [
        "no step boundary was seen (no optimizer.step(), DataLoader batch, repeated model call or prof.step()): "
        "everything profiled is analysed as one window, recorded without Python stacks or input shapes"]
    ops = {o["name"]: o["count"] for o in rep["top_ops"]}
    assert ops["aten::mm"] == 4 and ops["aten::addmm"] == 2  # the 4 matmuls and the model's 2 Linear layers


# --- the trace's folder ---------------------------------------------------------------------------------
def test_temporary_trace_folder_is_removed_once_the_report_is_gone(tmp_path):
    import gc

    model, opt = model_and_opt()
    with perfsleuth.profile(**SMALL) as prof:
        for x, y in batches(8):
            train_step(model, opt, x, y)
    rep = prof.report
    folder = rep.trace_file.parent
    assert folder.name.startswith("perfsleuth-") and rep.trace_file.is_file()
    assert "(temporary)" in repr(rep) and "trace: " + str(rep.trace_file) + " (temporary:" in str(rep)
    written = rep.save(tmp_path / "saved")  # the copy survives the temporary folder
    saved = json.loads((tmp_path / "saved" / "report.json").read_text())
    assert saved["trace"]["path"] == str(tmp_path / "saved" / "trace.pt.trace.json.gz")
    del prof, rep
    gc.collect()
    assert not folder.exists()
    assert all(p.is_file() for p in written)


def test_keep_trace_keeps_the_temporary_folder_and_the_report_names_it():
    import shutil

    model, opt = model_and_opt()
    with perfsleuth.profile(keep_trace=True, **SMALL) as prof:
        for x, y in batches(8):
            train_step(model, opt, x, y)
    rep = prof.report
    trace = rep.trace_file
    try:
        assert str(rep).endswith(f"\ntrace: {trace}") and "(temporary" not in repr(rep)
        assert rep.to_dict()["trace"]["path"] == str(trace)
        del prof, rep
        import gc

        gc.collect()
        assert trace.is_file()
    finally:
        shutil.rmtree(trace.parent)
