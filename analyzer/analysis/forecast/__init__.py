"""Forecasts of fixes: takes a trace's steady steps and gives each fix's forecast step time, by
replaying a few steps' dependency graph with the fix's edits.

`forecaster` (`Forecaster`: choose the steps, replay, combine), `timeline` (the steps' dependency
graph), `replay` (the solver), `plan` (the replayed plan and the edits a fix makes to it),
`registry` (`@model`, `MODELS`, `Inputs`, `NoForecast`: what models import; nothing imports them
back), `models/` (one module per family of fixes), `withheld` (the forecast object when there is
none: no numpy), `throughput` (datasheet tables).
"""
