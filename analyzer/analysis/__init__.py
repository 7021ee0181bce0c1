"""Stage 2, analysis: takes a `Trace` and gives its steps, the time of each step split into causes,
and the verdict.

`steps` finds the training iterations; `attribution` gives every nanosecond of every step to one
category with vectorised interval arithmetic (`intervals`); `tables` ranks kernels and ops; `verdict`
turns the category shares into one verdict. `hta_adapter` runs HolisticTraceAnalysis's analyses on
the same parsed trace. `forecast/` replays steps with a fix applied; `ranks/` works across ranks.
Numbers only: nothing here knows about rules or rendering.
"""
