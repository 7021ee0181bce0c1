"""The command line: takes what a user types (argv) and gives output files, terminal text and exit
codes.

Thin click commands over the library, as pip's `commands/` are: `main` (the group: `analyze`,
`rules`, `docs`, `diff`; `run` is loaded from `run` only when used), `run` (`perfsleuth run`'s
options: the recording itself is record/, `--verify` is verify/), `diff` (two runs compared),
`gates` (CI exit codes), `progress` (a line per trace of a folder; `run`'s phases; on a terminal
only), `guides` (`perfsleuth docs TOPIC`).
"""
