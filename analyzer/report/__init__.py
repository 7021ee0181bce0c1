"""Stage 5, the report: takes an analysis and its findings and gives the `Report` (and `ReportSet`)
model with its stable JSON form, and renders it.

`model` is the JSON schema (`perfsleuth/report@1`, `report-set@1`); `terminal`, `html` and
`markdown` render a report dict, `diff_view` renders a diff; `present` and `escape` are the shared
formatting and escaping (names from traces are data); `outputs` writes files safely. Renderers work
from the dict alone and import nothing heavy.
"""
