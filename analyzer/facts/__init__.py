"""Stage 3, facts: takes a `Trace`, its `Steps` and `Breakdown` and gives `Facts`: named numbers with
units for the rules, and evidence tables (call sites with source lines, GEMM dtypes, kernel families).

`core` holds the registry (`FACTS`: name -> unit and meaning) and `compute_facts`; `host` and
`device` are the providers; `common` their shared context and joins; `locations` maps events to the
user's source lines through the Python stacks.
"""
