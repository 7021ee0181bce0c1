"""The forecast models: each takes a fix's settings and a replay plan and gives the plan edited as
the fix would, with its assumptions. One module per family of fixes; each registers its functions
with `registry.model`; forecaster.py imports them, so `forecaster.MODELS` is the full registry.
(This file imports none of them: `perfsleuth rules` reads `compile`'s names without numpy.)

`host` (host-side fixes: fewer syncs, fused ops, ...), `batched` (loops of short ops batched),
`device` (device work: AMP, pinned copies, ...), `loader` (DataLoader workers), `loader_work`
(a cheaper Dataset in the training process: its decoding or I/O cached), `compile`
(torch.compile's fixes, from the recorded window's numbers: no replay).
"""
