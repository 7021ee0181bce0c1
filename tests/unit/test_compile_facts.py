"""What `perfsleuth run` records of torch.compile (record/compile_facts.py), from torch's own bookkeeping:
a stand-in for `torch._dynamo.utils` and `torch._dynamo.config` gives exact records."""

import types

from perfsleuth.record.compile_facts import CompileWatch

LIMIT = ("Dynamo recompile limit exceeded\n  Explanation: Dynamo attempted to recompile the code object too many "
         "times")


def record(cid, start_us, us, frame="forward", reason=None, fail=None):
    return types.SimpleNamespace(compile_id=cid, start_time_us=start_us, duration_us=us, co_name=frame,
                                 co_filename="/src/train.py" if frame else None, co_firstlineno=12 if frame else None,
                                 recompile_reason=reason, fail_reason=fail)


def dynamo(monkeypatch, records, counters):
    utils = types.ModuleType("torch._dynamo.utils")
    utils.get_compilation_metrics = lambda: list(records)
    utils.counters = counters
    config = types.ModuleType("torch._dynamo.config")
    config.recompile_limit, config.automatic_dynamic_shapes, config.suppress_errors = 8, True, False
    monkeypatch.setitem(__import__("sys").modules, "torch._dynamo.utils", utils)
    monkeypatch.setitem(__import__("sys").modules, "torch._dynamo.config", config)


def watch_with_steps() -> CompileWatch:
    """Steps starting at 1000, 2000, ... µs: two wait steps, a warm-up step, two active ones."""
    times = iter(t * 1000 for t in (1000, 2000, 3000, 4000, 5000))  # ns
    w = CompileWatch(clock=lambda: next(times))
    for phase in ("wait", "wait", "warmup", "active", "active"):
        w.boundary(phase)
    return w


def test_compilations_go_to_the_steps_they_started_in(monkeypatch):
    records = [record("0/0", 500, 7000),  # before the first boundary: the script's start
               record("0/1", 1200, 300, reason="0/0: tensor 'x' size mismatch at index 0. expected 16, actual 17"),
               record("0/1", 1600, 200, frame=None),  # its lazy backward: the same compilation
               record("0/2", 3100, 400, reason="0/1: tensor 'x' size mismatch at index 0. expected 17, actual 18"),
               record("0/3", 4500, 10, frame=None, reason="0/2: tensor 'x' size mismatch at index 0. expected 18, "
                                                          "actual 19", fail=LIMIT)]
    counters = {"frames": {"total": 4, "ok": 3}, "stats": {"unique_graphs": 3},
                "graph_break": {"Unsupported Tensor.item() call\n  Explanation: ...": 2, "print\nmore": 1},
                "unimplemented": {LIMIT: 1}}
    dynamo(monkeypatch, records, counters)
    facts = watch_with_steps().facts()
    assert facts["steps"] == {"wait": [500, 0], "warmup": [400], "active": [10, 0]}
    assert [(c["id"], c["phase"], c["step"], c["us"]) for c in facts["compiles"]] == [
        ("0/0", "start", -1, 7000), ("0/1", "wait", 0, 500), ("0/2", "warmup", 2, 400), ("0/3", "active", 3, 10)]
    assert facts["compiles"][1]["reason"] == "0/0: tensor 'x' size mismatch at index 0. expected 16, actual 17"
    assert facts["compiles"][3]["failed"] == "Dynamo recompile limit exceeded"
    assert facts["graph_breaks"] == [{"reason": "Unsupported Tensor.item() call", "count": 2},
                                     {"reason": "print", "count": 1}]
    assert facts["counters"] == {"frames": 4, "frames_ok": 3, "graphs": 3, "graph_breaks": 3, "recompile_limit_hits": 1}
    assert facts["config"] == {"recompile_limit": 8, "automatic_dynamic_shapes": True, "suppress_errors": False}


def test_nothing_is_recorded_without_torch_compile(monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch._dynamo.utils", raising=False)
    assert watch_with_steps().facts() is None
    dynamo(monkeypatch, [], {})
    assert watch_with_steps().facts() is None  # dynamo imported, nothing compiled


def test_a_record_torch_changed_the_shape_of_costs_the_run_nothing(monkeypatch):
    dynamo(monkeypatch, [object()], {"frames": {"total": 1}})
    utils = __import__("sys").modules["torch._dynamo.utils"]
    utils.get_compilation_metrics = lambda: 1 / 0
    assert watch_with_steps().facts() is None
