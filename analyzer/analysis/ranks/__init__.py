"""Cross-rank analysis: takes per-rank summaries (never whole event tables) and gives each job's
matched collectives, clocks, stragglers and verdict.

`summary` (one rank's summary, made inside its own analysis), `jobs` (which traces are one job),
`collectives` (matching collectives across ranks, clock offsets, transfer and wait), `p2p`
(send/recv pairs), `who_arrives_last` (which rank is last, and how consistently), `stragglers` (the
cross-rank report of a job).
"""
