"""`perfsleuth run`'s memory window (record/memory_window.py) on real CPU programs with known sizes.

fixtures/scripts/cpu/memory.py builds each case so that its bytes are known by construction: Adam over wide
layers (parameters, gradients and Adam's state, 4 bytes per element), a large batch through modest layers
(activations fill the peak), a loop that keeps each step's loss with its graph (memory grows by the
activations of a step, every step), checked against the process's own resident set size.
"""

import gzip
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main
from perfsleuth.record.memory_categories import CATEGORY_KEYS
from perfsleuth.trace.companion import main_of, memory_name, without_companions

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "fixtures" / "scripts" / "cpu" / "memory.py")
SMALL = ["--wait", "3", "--warmup", "1", "--active", "2", "--after", "1"]


def run(out: Path, *args):
    result = CliRunner().invoke(main, ["run", "-o", str(out), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result


def final(out: Path) -> dict:
    with gzip.open(out / "trace.pt.trace.json.gz") as f:
        return json.load(f)["perfsleuth_final"]


def step_ends(memory_trace: Path) -> list:
    """Total Allocated after the last [memory] event of each ProfilerStep, parsed here."""
    with gzip.open(memory_trace) as f:
        events = json.load(f)["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                   if e.get("name", "").startswith("ProfilerStep#"))
    mem = sorted((e["ts"], e["args"]["Total Allocated"]) for e in events if e.get("name") == "[memory]")
    return [(name, [a for t, a in mem if t <= end][-1]) for _, end, name in steps]


def test_adam_on_wide_layers_parameters_gradients_and_state_are_their_sizes(tmp_path):
    """Linear(1024, 1024) x 2 + Linear(1024, 10), Adam: every byte of the three known categories by
    construction. The default schedule's order: the memory window, then the stacks window (both
    companions written)."""
    run(tmp_path / "o", *SMALL, SCRIPT, "--case", "adam_wide")
    numel = (1024 * 1024 + 1024) * 2 + 1024 * 10 + 10
    params = 4 * numel
    # exp_avg and exp_avg_sq per parameter, plus a float32 `step` for each of 6
    state = 2 * params + 4 * 6
    facts = final(tmp_path / "o")
    memory = facts["memory"]
    assert facts["memory_trace"] == "trace.memory.pt.trace.json.gz"
    assert memory["device"] == "cpu" and memory["source"] == "export_memory_timeline"
    assert memory["unavailable"] is None
    assert memory["known"] == {"parameter_bytes": params, "gradient_bytes": params, "optimizer_state_bytes": state}
    cats = memory["categories_at_peak"]
    assert sorted(cats) == sorted(CATEGORY_KEYS)
    # the peak is inside Adam's step: parameters, their gradients and both moments alive, all of them
    assert (cats["parameter"], cats["gradient"], cats["optimizer_state"]) == (params, params, state)
    assert memory["peak_bytes"] == sum(cats.values())
    assert memory["peak_bytes"] >= 4 * params  # and more: Adam's temporaries at the peak
    cost = memory["cost"]
    assert cost["steps"] == 3 and cost["window_s"] > 0 and cost["unprofiled_window_s"] > 0
    assert cost["trace_bytes"] == (tmp_path / "o" / "trace.memory.pt.trace.json.gz").stat().st_size
    assert len(facts["clock"]["memory_us"]) == 3
    # the memory companion names its main trace; the stacks window came after it, both are there
    with gzip.open(tmp_path / "o" / "trace.memory.pt.trace.json.gz") as f:
        companion = json.load(f)
    assert companion["perfsleuth"]["role"] == "memory" and companion["perfsleuth"]["main_trace"] == \
        "trace.pt.trace.json.gz" and companion["profile_memory"] == 1
    assert (tmp_path / "o" / "trace.stacks.pt.trace.json.gz").is_file()
    assert [name for name, _ in step_ends(tmp_path / "o" / facts["memory_trace"])] == \
        ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]


def test_a_large_batch_through_modest_layers_activations_fill_the_peak(tmp_path):
    """A batch of 4096 through 6 x Linear(256, 256) + ReLU: the saved activations (about 24 MiB)
    outweigh the parameters (1.5 MiB), the input (4 MiB) and backward's temporaries at the peak."""
    run(tmp_path / "o", "--no-stack", *SMALL, SCRIPT, "--case", "big_batch", "--batch-size", "4096",
        "--features", "256", "--hidden", "256", "--layers", "6")
    memory = final(tmp_path / "o")["memory"]
    cats = memory["categories_at_peak"]
    assert max(cats, key=cats.get) == "activation"
    assert cats["activation"] > memory["peak_bytes"] / 2
    # SGD without momentum: no state; the parameters are known exactly
    params = 4 * ((256 * 256 + 256) * 6 + 256 * 10 + 10)
    assert memory["known"]["parameter_bytes"] == params == cats["parameter"]
    assert memory["known"]["optimizer_state_bytes"] == 0 == cats["optimizer_state"]


@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="RSS from /proc (Linux)")
def test_a_loop_that_keeps_each_loss_with_its_graph_grows_by_a_step_of_activations(tmp_path):
    """`kept.append(loss)` after `backward(retain_graph=True)`: each step keeps its 3 ReLU outputs (512
    x 512 floats, 1 MiB each) and the log-softmax it saved (512 x 10): 3,166,216 bytes a step in the
    memory trace. The process's RSS, read by the script itself over the unprofiled steps before the
    window, grows by the same (glibc told to give each block of 64 KiB or more its own mapping, so
    that RSS follows live blocks)."""
    rss = tmp_path / "rss.jsonl"
    # a process of its own: glibc reads MALLOC_MMAP_THRESHOLD_ when it starts
    proc = subprocess.run(
        [sys.executable, "-m", "perfsleuth", "run", "-o", str(tmp_path / "o"), "--no-stack", "--wait", "6",
         "--warmup", "1", "--active", "2", "--after", "1", SCRIPT, "--case", "keep_graph", "--batch-size", "512",
         "--features", "512", "--hidden", "512", "--layers", "3", "--rss-log", str(rss)],
        env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    facts = final(tmp_path / "o")
    ends = [level for _, level in step_ends(tmp_path / "o" / facts["memory_trace"])]
    per_step = 3 * 512 * 512 * 4 + 512 * 10 * 4 + 8
    assert [b - a for a, b in zip(ends, ends[1:])] == [per_step, per_step]
    levels = [json.loads(line)["rss"] for line in rss.read_text().splitlines()]
    # steps 1-5: unprofiled
    rss_slope = statistics.median(b - a for a, b in zip(levels[1:6], levels[2:6]))
    assert abs(rss_slope - per_step) / per_step < 0.15, (rss_slope, per_step)


def test_no_memory_leaves_it_out_and_says_so(tmp_path):
    """--no-memory: no memory window, no companion; the metadata says why there are no numbers."""
    run(tmp_path / "o", "--no-stack", "--no-memory", "--wait", "2", "--warmup", "1", "--active", "1",
        "--after", "1", SCRIPT, "--case", "clean", "--features", "64", "--hidden", "64")
    facts = final(tmp_path / "o")
    assert facts["memory_trace"] is None and facts["memory"]["peak_bytes"] is None
    assert facts["memory"]["unavailable"].startswith("not recorded")
    assert not (tmp_path / "o" / "trace.memory.pt.trace.json.gz").exists()


def test_the_memory_companion_is_named_after_its_main_trace_and_left_out_of_listings(tmp_path):
    assert memory_name("rank3.pt.trace.json.gz") == "rank3.memory.pt.trace.json.gz"
    assert main_of(tmp_path / "rank3.memory.pt.trace.json.gz") == tmp_path / "rank3.pt.trace.json.gz"
    files = [tmp_path / "trace.pt.trace.json.gz", tmp_path / "trace.memory.pt.trace.json.gz"]
    assert without_companions(files) == files[:1]


def test_profile_api_records_the_memory_window_too(tmp_path):
    """`perfsleuth.profile()` runs the same memory window: the companion beside the trace, the facts in
    it; SGD over Linear(64, 64) + Linear(64, 10): the parameters' bytes exactly."""
    import perfsleuth
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 64), torch.zeros(16, dtype=torch.long)
    with perfsleuth.profile(tmp_path, wait=1, warmup=1, active=2, after=1, stack_steps=0) as prof:
        for _ in range(12):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert prof.steps == 8  # 1 + 1 + 2 + 1, then the 3 memory steps
    memory = final(tmp_path)["memory"]
    params = 4 * (64 * 64 + 64 + 64 * 10 + 10)
    assert memory["known"] == {"parameter_bytes": params, "gradient_bytes": params, "optimizer_state_bytes": 0}
    assert memory["categories_at_peak"]["parameter"] == params
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.memory.pt.trace.json.gz", "trace.pt.trace.json.gz"]


def test_a_memory_window_over_the_size_limit_keeps_its_trace_and_skips_the_categories(tmp_path):
    """torch's memory profile costs 1-2.5 ms per op and memory event of the window: over
    `memory_categories_events` the categories are not computed, and `unavailable` says why; the
    trace and the exact optimizer bytes stay."""
    import perfsleuth
    import torch

    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with perfsleuth.profile(tmp_path, wait=1, warmup=1, active=1, after=1, stack_steps=0,
                            memory_categories_events=1):
        for _ in range(10):
            opt.zero_grad()
            model(torch.randn(4, 32)).sum().backward()
            opt.step()
    facts = final(tmp_path)
    memory = facts["memory"]
    assert memory["categories_at_peak"] is None and memory["peak_bytes"] is None
    assert memory["unavailable"].startswith("categories not computed: the memory window recorded ")
    assert memory["known"]["parameter_bytes"] == 4 * (32 * 32 + 32) and memory["cost"]["categories_s"] == 0.0
    assert facts["memory_trace"] == "trace.memory.pt.trace.json.gz"


def test_a_script_that_ends_inside_the_memory_window_keeps_what_it_recorded(tmp_path):
    """7 iterations: the window ends at boundary 4, the after step, the memory window starts at
    boundary 5 and has seen 2 of its 3 steps when the script ends: written, measured, named by the
    main trace."""
    run(tmp_path / "o", "--no-stack", "--wait", "2", "--warmup", "1", "--active", "1", "--after", "1", SCRIPT,
        "--case", "adam_wide", "--steps", "7", "--features", "64", "--hidden", "64")
    facts = final(tmp_path / "o")
    memory = facts["memory"]
    assert facts["memory_trace"] == "trace.memory.pt.trace.json.gz" and memory["unavailable"] is None
    assert memory["cost"]["steps"] == 2 and memory["categories_at_peak"]["parameter"] == memory["known"][
        "parameter_bytes"] == 4 * ((64 * 64 + 64) * 2 + 64 * 10 + 10)
    names = [name for name, _ in step_ends(tmp_path / "o" / facts["memory_trace"])]
    assert names[:2] == ["ProfilerStep#0", "ProfilerStep#1"]
