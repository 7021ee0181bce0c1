"""Recording: takes a training script (`perfsleuth run`) or a loop (`perfsleuth.profile()`) and
gives its trace, with what the trace alone cannot say (cores, loaders, compile, code sites) in its
metadata, and the report of it.

`session` runs the script under torch.profiler (`profile` is the `perfsleuth.profile()` API over the
same session); `step_clock` and `step_hooks` (where steps come from and when the window records),
`target` (the script, its argv and traceback), `forks` (the script's child processes), `signals`
(SIGTERM/SIGHUP like Ctrl-C), `other_profilers` (a script that starts its own profiler),
`code_sites` (where the user's optimizer and zero_grad are), `compile_facts` and `trace_metadata`
(what is recorded into the trace), `config`, `paths` and `outputs` (where and what it writes),
`ranks` (rank 0 under torchrun waits for the others), `outcome` (exit code, message, report). With
verify/, the only code that imports torch, and only when profiling starts.
"""
