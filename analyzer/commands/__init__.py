"""The commands on top: each takes what a user types or calls and gives reports, files and exit codes.

`cli` holds the thin click commands (`analyze`, `run`, `rules`, `diff`); `run` profiles a script
under torch.profiler (with `run_paths` for where it writes); `profile` is the `perfsleuth.profile()`
API; `diff` compares two runs and `gates` decides CI exit codes. `run` and `profile` are the only
modules that import torch, and only when profiling starts.
"""
