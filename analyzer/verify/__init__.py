"""Verification (`perfsleuth run --verify`): takes a report and the script it came from and gives
each fix's measured speed-up, by running the script again without the profiler with and without the
fix.

`experiment` (which fixes to try, the run of pairs), `fixes` (the registry of fixes it can apply),
`apply` (how the child applies one), `child` (`python -m perfsleuth.verify.child`: the script run
again, windows timed), `server` (the parent's handle on a child), `stats` (pair ratios, the
outcome), `config`.
"""
