"""Hand-built traces with the step clock `perfsleuth run` records (the trace's `perfsleuth.clock`):
unprofiled and profiled step times beside two steps of a kernel each."""

import json

from tracebuilder_rules import RuleTraceBuilder


def clocked_trace(tb: RuleTraceBuilder, path, unprofiled, profiled, names, **meta):
    doc = tb.build()
    doc["perfsleuth"] = {"version": 1, "clock": {"unit": "us", "unprofiled_us": unprofiled, "profiled_us": profiled,
                                                 "profiled_steps": names}, **meta}
    path.write_text(json.dumps(doc))
    return path


def two_steps() -> RuleTraceBuilder:
    tb = RuleTraceBuilder()
    for i in range(2):
        tb.step(7 + i, i * 200, 200)
        tb.launch("k", host=(i * 200, 5), device=(i * 200 + 10, 180))
    return tb
