"""Stage 4, the rule engine: takes `Facts` and the rule catalogue (rules/*.toml, plus the user's) and
gives findings.

`catalog` loads, validates and compiles the rules once (a misspelt fact is a load error);
`evaluate` runs them over the facts and builds the finding dicts; `settings` reads the user's
overrides (`[tool.perfsleuth]`, `--set`); `docs` renders each rule's ruff-style documentation.
"""
