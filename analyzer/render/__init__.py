"""Renderers: each takes the report document (`Report.to_dict()`, report/) and gives terminal text,
HTML, Markdown or JSON; outputs and safe_write put the files in place.

`terminal`, `html` (one report's page), `set_page` (a directory's page within its size budget),
`markdown`, `diff_view` (a diff of two runs), `ranks_text` / `ranks_html` (the cross-rank section),
`outputs` (which renderer for which file; the set page for a report set) and `safe_write` (a set of
files put in place, nothing a user has overwritten). They import nothing heavy (no pandas) and use
report/present.py for numbers and report/escape.py for every name from a trace.
"""
