"""Stage 5, the report document: takes an analysis and its findings and gives the `Report` (and
`ReportSet`) model with its stable JSON form, and the wording of its numbers.

`model` is the JSON schema (`perfsleuth/report@1`, `report-set@1`), `schema` the same as typed
Structs for readers; `numbers` (a finding's one number, its severity), `figures` (that number as
text, for every output), `present` and `escape` are the shared formatting and escaping (names from
traces are data). The renderers that turn it into files are render/; the engine depends on this,
never on them.
"""
