"""torch.compile's events on a hand-built trace (µs), with the names torch 2.13 records (trace/names.py,
checked against fixtures/traces/compile): a frame's compilation, compiled calls, eager calls, broken calls.

    tb = RuleTraceBuilder(device=False)
    tb.step(1, 0, 10_000)
    total = compile_frame(tb, 100, 0, 0, dynamo=1000, aot=2000, inductor=5000, guards=500)   # 8510 µs
    compiled_call(tb, 8_700, 0, 0, 200)
"""

from __future__ import annotations

from tracebuilder_rules import RuleTraceBuilder

LOOKUP = "TorchDynamo Cache Lookup"


def compile_frame(tb: RuleTraceBuilder, ts: float, frame: int, count: int, dynamo: float = 1000, aot: float = 2000,
                  inductor: float = 5000, guards: float = 500, gave_up: bool = False) -> float:
    """Frame `frame`'s (count+1)-th compilation from `ts`: `dynamo` root, `_data` annotation with its id,
    `entire_frame_compile`, bytecode tracing, the backend call (AOT autograd around inductor), guards. 5 µs
    of dynamo's own bookkeeping before the parts and 5 after. `gave_up`: the recompile limit: only the
    root and its 100 µs. Returns the compilation's duration."""
    cid = f"{frame}/{count}"
    if gave_up:
        tb.op("dynamo", ts, 100)
        tb.annotation(f"dynamo_data: compile_id={cid}", ts + 1, 1)
        tb.op("entire_frame_compile", ts + 2, 90)
        tb.annotation(f"entire_frame_compile_data: fn_name=_compile.compile_inner, compile_id={cid}", ts + 3, 1)
        return 100.0
    total = dynamo + aot + inductor + guards + 10
    tb.op("dynamo", ts, total)
    tb.annotation(f"dynamo_data: compile_id={cid}", ts + 1, 1)
    tb.op("entire_frame_compile", ts + 2, total - 4)
    tb.op("_compile.compile_inner (dynamo_timed)", ts + 3, total - 6)
    tb.annotation(f"entire_frame_compile_data: fn_name=_compile.compile_inner, compile_id={cid}", ts + 4, 1)
    t = ts + 5
    tb.op("compile_attempt_0", t, dynamo + aot + inductor)
    tb.op("bytecode_tracing", t, dynamo)
    tb.op("bytecode_tracing (dynamo_timed)", t + 1, dynamo - 2)
    tb.op("backend_compile", t + dynamo, aot + inductor)
    tb.op("create_aot_dispatcher_function", t + dynamo, aot + inductor)
    tb.op("inductor_compile", t + dynamo + aot, inductor)
    tb.op("compile_fx_inner (dynamo_timed)", t + dynamo + aot + 1, inductor - 2)
    tb.op("build_guards", t + dynamo + aot + inductor, guards)
    tb.annotation(f"build_guards_data: compile_id={cid}", t + dynamo + aot + inductor + 1, 1)
    return total


def compiled_call(tb: RuleTraceBuilder, ts: float, frame: int, count: int, dur: float) -> None:
    """One call of a compiled frame: the cache look-up [ts, ts+2), its region [ts+3, ts+3+dur) running
    the compiled graph [ts+4, ts+2+dur)."""
    tb.op(LOOKUP, ts, 2)
    tb.op(f"Torch-Compiled Region: {frame}/{count}", ts + 3, dur)
    tb.op("CompiledFunction", ts + 4, dur - 2)


def eager_call(tb: RuleTraceBuilder, ts: float, dur: float) -> None:
    """A call of a watched frame that ran eager: the look-up, then plain ops (no region)."""
    tb.op(LOOKUP, ts, 2)
    tb.op("aten::linear", ts + 3, dur)


def broken_call(tb: RuleTraceBuilder, ts: float) -> None:
    """A call with one graph break: region 0/0 [ts+3, ts+103) runs its graph [ts+4, ts+24), `.item()` eager
    [ts+30, ts+40), then the resume function (look-up [ts+45, ts+47), region 1/0 [ts+50, ts+100), graph
    [ts+51, ts+91)). Outside the graphs: 100 - 20 - 40 = 40 µs."""
    tb.op(LOOKUP, ts, 2)
    tb.op("Torch-Compiled Region: 0/0", ts + 3, 100)
    tb.op("CompiledFunction", ts + 4, 20)
    tb.op("aten::item", ts + 30, 10)
    tb.op(LOOKUP, ts + 45, 2)
    tb.op("Torch-Compiled Region: 1/0", ts + 50, 50)
    tb.op("CompiledFunction", ts + 51, 40)
