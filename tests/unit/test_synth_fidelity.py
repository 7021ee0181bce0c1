"""The synthetic GPU traces (fixtures/synth) are causally consistent and look like the real ones.

Causality is checked per scenario on integer nanoseconds; realism against every trace in
fixtures/traces/real (categories, arg keys per category, flow and metadata shapes, names).
"""

from __future__ import annotations

import ast
import collections
import gzip
import json
import re
from pathlib import Path

import msgspec
import pytest

from fixtures.synth import SCENARIOS
from fixtures.synth import kernels as K
from fixtures.synth import scenarios as S

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "fixtures" / "traces" / "gpu"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_RANGE_CATS = ("cpu_op", "user_annotation", "python_function")
# aten ops the generator emits that exist in PyTorch's AdamW but occur in none of the real traces.
UNSEEN_OPS = {"aten::_foreach_addcdiv_", "aten::_foreach_addcmul_", "aten::_foreach_div_", "aten::_foreach_lerp_",
              "aten::_foreach_sqrt", "aten::addcdiv_", "aten::lerp_"}
ANNOTATION_PATTERNS = (r"ProfilerStep#\d+", r"enumerate\(DataLoader\)#_(SingleProcess|MultiProcessing)DataLoaderIter\.__next__",
                       r"Optimizer\.step#\w+\.step", r"Optimizer\.zero_grad#\w+\.zero_grad", r"nccl:all_reduce")
PY_PATTERNS = (r"[\w/.<>]+\.py\(\d+\): [\w<>]+", r"<built-in method \w+ of \w+ object at 0x[0-9a-f]+>")


def ns(us: float) -> int:
    return round(us * 1000)


@pytest.fixture(scope="session")
def traces() -> dict:
    return {name: fn() for name, fn in SCENARIOS.items()}


@pytest.fixture(scope="session")
def real(real_traces) -> dict:
    """What the real traces contain: (ph, cat) pairs, arg keys per category, names, event key sets."""
    out = {"cats": set(), "args": collections.defaultdict(set), "names": collections.defaultdict(set),
           "shapes": collections.defaultdict(set), "meta": set(), "top": set(), "props": set(), "cbid": {}}
    for path in sorted(real_traces.glob("*.json.gz")):
        doc = msgspec.json.decode(gzip.open(path).read())
        if isinstance(doc, dict):
            out["top"] |= set(doc)
            for p in doc.get("deviceProperties") or []:
                out["props"] |= set(p)
        for e in doc["traceEvents"] if isinstance(doc, dict) else doc:
            cat, args = e.get("cat"), e.get("args") or {}
            out["cats"].add((e.get("ph"), cat))
            out["args"][cat] |= set(args)
            out["names"][cat].add(e.get("name"))
            out["shapes"][(e.get("ph"), cat)].add(frozenset(e))
            if e.get("ph") == "M":
                out["meta"].add((e.get("name"), frozenset(args)))
            if cat == "cuda_runtime" and "cbid" in args:
                out["cbid"][e["name"]] = args["cbid"]
    return out


def complete(trace: dict, cats=None) -> list:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cats is None or e["cat"] in cats)]


def by_corr(trace: dict) -> tuple[dict, dict]:
    rt = {e["args"]["correlation"]: e for e in complete(trace, ("cuda_runtime",))}
    dev = {e["args"]["correlation"]: e for e in complete(trace, DEVICE_CATS)}
    return rt, dev


def end(e: dict) -> int:
    return ns(e["ts"]) + ns(e["dur"])


# --- causality ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SCENARIOS)
def test_device_work_starts_after_its_launch(traces, name):
    rt, dev = by_corr(traces[name])
    assert dev and set(dev) <= set(rt)
    early = [c for c, d in dev.items() if ns(d["ts"]) < ns(rt[c]["ts"]) + 7000]
    assert early == []  # 7 µs launch latency at least (real traces: 7-10 µs median on an idle stream)


@pytest.mark.parametrize("name", SCENARIOS)
def test_no_overlap_within_a_stream(traces, name):
    streams = collections.defaultdict(list)
    for e in complete(traces[name], DEVICE_CATS):
        streams[(e["pid"], e["tid"])].append((ns(e["ts"]), end(e)))
    for spans in streams.values():
        spans.sort()
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("name", SCENARIOS)
def test_synchronize_lasts_until_the_queue_drains(traces, name):
    t = traces[name]
    rt, dev = by_corr(t)
    syncs = [e for e in complete(t, ("cuda_runtime",)) if e["name"].endswith("Synchronize")]
    for s in syncs:
        queued = [d for c, d in dev.items() if ns(rt[c]["ts"]) < ns(s["ts"])
                  and (s["name"] == "cudaDeviceSynchronize" or d["tid"] == 7)]
        assert end(s) >= max(end(d) for d in queued)
    expected = {"sync_bound": 4 * S.STEPS}
    assert len(syncs) == expected.get(name, 0)


@pytest.mark.parametrize("name", SCENARIOS)
def test_pageable_copies_block_the_host(traces, name):
    rt, dev = by_corr(traces[name])
    pageable = {c: d for c, d in dev.items() if "Pageable" in d["name"] and d["args"]["bytes"] > 64 * 1024
                or "-> Pageable" in d["name"]}
    for c, d in pageable.items():
        assert rt[c]["name"] == "cudaMemcpyAsync" and end(rt[c]) >= end(d)
        earlier = [o for o in dev.values() if o["tid"] == d["tid"] and ns(o["ts"]) < ns(d["ts"])]
        assert all(end(o) <= ns(d["ts"]) for o in earlier)  # the stream drained before the copy
    counts = {"sync_bound": 4 * S.STEPS, "transfer_bound": S.STEPS}  # transfer_bound's 10 kB labels: staged
    assert len(pageable) == counts.get(name, 0)


@pytest.mark.parametrize("name", SCENARIOS)
def test_host_ranges_nest_and_runtime_calls_sit_in_their_op(traces, name):
    t = traces[name]
    ranges = sorted(complete(t, HOST_RANGE_CATS), key=lambda e: (ns(e["ts"]), -ns(e["dur"])))
    stack: list = []
    for e in ranges:
        while stack and end(stack[-1]) <= ns(e["ts"]):
            stack.pop()
        assert not stack or end(e) <= end(stack[-1]), (e["name"], stack[-1]["name"])
        stack.append(e)
    ops = {e["args"]["External id"]: e for e in complete(t, ("cpu_op",))}
    for r in complete(t, ("cuda_runtime",)):
        op = ops[r["args"]["External id"]]
        assert ns(op["ts"]) <= ns(r["ts"]) and end(r) <= end(op)


@pytest.mark.parametrize("name", SCENARIOS)
def test_steps_timestamps_and_determinism(traces, name):
    t = traces[name]
    steps = [e for e in complete(t, ("user_annotation",)) if e["name"].startswith("ProfilerStep#")]
    assert [e["name"] for e in steps] == [f"ProfilerStep#{S.FIRST_STEP + i}" for i in range(S.STEPS)]
    assert all(end(a) <= ns(b["ts"]) for a, b in zip(steps, steps[1:]))
    for e in t["traceEvents"]:
        for key in ("ts", "dur"):
            if isinstance(e.get(key), float):
                assert abs(e[key] * 1000 - round(e[key] * 1000)) < 1e-3
    assert SCENARIOS[name]() == t


@pytest.mark.parametrize("name", SCENARIOS)
def test_gpu_user_annotations_span_the_work_of_their_host_annotation(traces, name):
    t = traces[name]
    rt, dev = by_corr(t)
    host = {e["args"]["External id"]: e for e in complete(t, ("user_annotation",))}
    gpu = complete(t, ("gpu_user_annotation",))
    for g in gpu:
        h = host[g["args"]["External id"]]
        work = [d for c, d in dev.items() if d["tid"] == g["tid"] and ns(h["ts"]) <= ns(rt[c]["ts"]) <= end(h)]
        assert g["name"] == h["name"] and g["pid"] == 0 and work
        assert (ns(g["ts"]), end(g)) == (min(ns(d["ts"]) for d in work), max(end(d) for d in work))
    steps = {g["name"] for g in gpu if g["tid"] == 7 and g["name"].startswith("ProfilerStep#")}
    assert len(steps) == S.STEPS


# --- the intended bottleneck dominates ---------------------------------------------------------------
def _window(t: dict) -> tuple[int, int]:
    steps = [e for e in complete(t, ("user_annotation",)) if e["name"].startswith("ProfilerStep#")]
    return ns(steps[0]["ts"]), max(end(e) for e in complete(t, DEVICE_CATS + ("user_annotation",)))


def _union(spans: list) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0)


def _share(t: dict, predicate) -> float:
    lo, hi = _window(t)
    return _union([(ns(e["ts"]), end(e)) for e in complete(t) if predicate(e)]) / (hi - lo)


def test_intended_stall_dominates(traces):
    dev = lambda e: e["cat"] in DEVICE_CATS  # noqa: E731
    assert _share(traces["transfer_bound"], lambda e: e["cat"] == "gpu_memcpy" and "HtoD" in e["name"]) > 0.6
    assert _share(traces["dataloader_bound"], lambda e: e["name"].startswith("enumerate(DataLoader)#")) > 0.9
    assert _share(traces["communication_bound"], lambda e: e["name"].startswith("ncclDevKernel_")) > 0.6
    assert _share(traces["host_bound"], dev) < 0.2
    for name in ("kernel_bound_fp32", "kernel_bound_bf16"):
        assert _share(traces[name], dev) > 0.97


def test_sync_bound_idles_the_device_after_each_item(traces):
    t = traces["sync_bound"]
    starts = sorted(ns(e["ts"]) for e in complete(t, DEVICE_CATS))
    syncs = [end(e) for e in complete(t, ("cuda_runtime",)) if e["name"] == "cudaStreamSynchronize"]
    idle = sum(min(s for s in starts if s >= x) - x for x in syncs if any(s >= x for s in starts))
    lo, hi = _window(t)
    assert idle / (hi - lo) > 0.4


def test_sync_bound_names_the_source_line(traces):
    t = traces["sync_bound"]
    frames = {e["args"]["Python id"]: e for e in complete(t, ("python_function",))}
    gpu_items = [e for e in frames.values() if e["name"].startswith("<built-in method item")
                 and frames[e["args"]["Python parent id"]]["name"] == S.SYNC_STEP_FRAME]
    assert len(gpu_items) == 4 * S.STEPS
    assert S.SYNC_SOURCE_LINE == "fixtures/scripts/gpu/sync_bound.py:57"


def test_script_frames_match_the_scripts(traces):
    """Every `fixtures/scripts/gpu/F.py(N): fn` frame: fn is defined in F and N is a line of fn."""
    names = {e["name"] for t in traces.values() for e in complete(t, ("python_function",))}
    ours = sorted(n for n in names if n.startswith(S.SCRIPTS))
    assert len(ours) == 3
    for frame in ours:
        path, line, fn = re.fullmatch(r"(.+)\((\d+)\): (\w+)", frame).groups()
        tree = ast.parse((ROOT / path).read_text())
        defs = [d for d in ast.walk(tree) if isinstance(d, ast.FunctionDef) and d.name == fn]
        assert len(defs) == 1 and defs[0].lineno <= int(line) <= defs[0].end_lineno
    step_def = (ROOT / S.SCRIPTS / "sync_bound.py").read_text().splitlines()[56]
    assert step_def.startswith("def train_step(")


def test_gemm_dtypes(traces):
    for name, dtype, marker in (("kernel_bound_fp32", "float", "sgemm"), ("kernel_bound_bf16", "c10::BFloat16", "bf16")):
        t = traces[name]
        rt, dev = by_corr(t)
        ops = {e["args"]["External id"]: e for e in complete(t, ("cpu_op",))}
        gemms = [d for d in dev.values() if "gemm" in d["name"]]
        assert len(gemms) == 11 * S.STEPS and all(marker in d["name"] for d in gemms)
        launching = {ops[d["args"]["External id"]]["name"] for d in gemms}
        assert launching == {"aten::addmm", "aten::mm"}
        assert {ops[d["args"]["External id"]]["args"]["Input type"][0] for d in gemms} == {dtype}


def test_host_bound_has_hundreds_of_tiny_kernels(traces):
    kernels = complete(traces["host_bound"], ("kernel",))
    per_step = len(kernels) / S.STEPS
    durs = sorted(e["dur"] for e in kernels)
    assert per_step >= 130 and durs[len(durs) // 2] < 5.0


def test_communication_is_not_overlapped(traces):
    t = traces["communication_bound"]
    nccl = [e for e in complete(t, ("kernel",)) if e["tid"] == S.NCCL_STREAM]
    compute = [e for e in complete(t, ("kernel",)) if e["tid"] == 7]
    assert len(nccl) == 6 * S.STEPS
    spans = sorted([(ns(e["ts"]), end(e)) for e in nccl + compute])
    assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))
    assert t["distributedInfo"]["backend"] == "nccl" and t["distributedInfo"]["world_size"] == 8


# --- realism against the real traces ------------------------------------------------------------------
@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_categories_and_arg_keys_occur_in_real_traces(traces, real):
    for t in traces.values():
        for e in t["traceEvents"]:
            assert (e["ph"], e.get("cat")) in real["cats"], (e["ph"], e.get("cat"))
            assert set(e.get("args", {})) <= real["args"][e.get("cat")], (e.get("cat"), e.get("args"))
            assert frozenset(e) in real["shapes"][(e["ph"], e.get("cat"))], e


def test_flows_have_the_real_shape(traces):
    for t in traces.values():
        rt, dev = by_corr(t)
        flows = [e for e in t["traceEvents"] if e.get("cat") == "ac2g"]
        assert len(flows) == 2 * len(dev)
        for f in flows:
            assert f["name"] == "ac2g" and f["ph"] in "sf"
            target = rt[f["id"]] if f["ph"] == "s" else dev[f["id"]]
            assert (f["pid"], f["tid"], f["ts"]) == (target["pid"], target["tid"], target["ts"])
            assert f.get("bp") == ("e" if f["ph"] == "f" else None)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_metadata_and_top_level_have_the_real_shape(traces, real):
    for t in traces.values():
        meta = [e for e in t["traceEvents"] if e["ph"] == "M"]
        assert {(e["name"], frozenset(e["args"])) for e in meta} <= real["meta"]
        assert {e["args"]["name"] for e in meta if e["name"] == "thread_name" and e["pid"] == 0} >= {"stream 7 "}
        assert set(t) <= real["top"] and {"schemaVersion", "deviceProperties", "traceName", "displayTimeUnit"} <= set(t)
        assert all(set(p) <= real["props"] for p in t["deviceProperties"])
        assert t["deviceProperties"][0]["computeMajor"] == 8 and t["deviceProperties"][0]["numSms"] == 108


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_names_follow_the_real_patterns(traces, real):
    gen = collections.defaultdict(set)
    for t in traces.values():
        for e in complete(t):
            gen[e["cat"]].add(e["name"])
    assert gen["gpu_memcpy"] == {"Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pinned -> Device)",
                                 "Memcpy DtoH (Device -> Pageable)"}
    assert gen["gpu_memcpy"] <= real["names"]["gpu_memcpy"]
    assert gen["gpu_memset"] == {"Memset (Device)"} <= real["names"]["gpu_memset"]
    assert gen["cuda_runtime"] <= real["names"]["cuda_runtime"]
    assert gen["kernel"] - real["names"]["kernel"] <= K.MODELLED
    assert not K.MODELLED & real["names"]["kernel"]  # what we call modelled really is not in the traces
    assert gen["cpu_op"] - real["names"]["cpu_op"] == UNSEEN_OPS
    for pattern in ANNOTATION_PATTERNS:
        assert any(re.fullmatch(pattern, n) for n in real["names"]["user_annotation"]), pattern
    assert all(any(re.fullmatch(p, n) for p in ANNOTATION_PATTERNS) for n in gen["user_annotation"])
    assert all(any(re.fullmatch(p, n) for p in PY_PATTERNS) for n in gen["python_function"])
    assert all(any(re.fullmatch(p, n) for n in real["names"]["python_function"]) for p in PY_PATTERNS)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_runtime_callback_ids_match_the_real_ones(traces, real):
    for t in traces.values():
        for e in complete(t, ("cuda_runtime",)):
            assert e["args"]["cbid"] == real["cbid"][e["name"]]


# --- committed fixtures -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SCENARIOS)
def test_committed_trace_equals_the_generator(traces, name):
    path = COMMITTED / f"{name}.json.gz"
    assert path.stat().st_size < 300 * 1024
    assert json.loads(gzip.open(path).read()) == traces[name], (
        f"{path} is stale: regenerate with `python -m fixtures.synth fixtures/traces/gpu`")


def test_cases_toml_lists_every_gpu_scenario():
    import tomllib

    cases = tomllib.loads((ROOT / "fixtures" / "cases.toml").read_text())["case"]
    gpu = {c["name"]: c for c in cases if c["trace"].startswith("fixtures/traces/gpu/")}
    assert set(gpu) == set(SCENARIOS)
    verdicts = {n: c["expected_verdict"] for n, c in gpu.items()}
    assert verdicts == {"sync_bound": "sync-bound", "transfer_bound": "transfer-bound",
                        "dataloader_bound": "dataloader-bound", "kernel_bound_fp32": "kernel-bound",
                        "kernel_bound_bf16": "kernel-bound", "host_bound": "host-bound",
                        "communication_bound": "communication-bound"}
    for name, case in gpu.items():
        assert case["trace"] == f"fixtures/traces/gpu/{name}.json.gz" and (ROOT / case["trace"]).is_file()
        assert not set(case["must_fire"]) & set(case["must_not_fire"])
    assert gpu["sync_bound"]["source_line"] == S.SYNC_SOURCE_LINE
    assert "amp" in gpu["kernel_bound_fp32"]["must_fire"] and "amp" in gpu["kernel_bound_bf16"]["must_not_fire"]


def test_cli_writes_reproducible_files(tmp_path, traces):
    from fixtures.synth.__main__ import main

    assert main([str(tmp_path / "a"), "host_bound", "sync_bound"]) == 0
    assert main([str(tmp_path / "b"), "host_bound"]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["host_bound.json.gz", "sync_bound.json.gz"]
    first, second = (tmp_path / "a" / "host_bound.json.gz"), (tmp_path / "b" / "host_bound.json.gz")
    assert first.read_bytes() == second.read_bytes()
    assert json.loads(gzip.open(first).read()) == traces["host_bound"]
