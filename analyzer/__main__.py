"""`python -m perfsleuth ...`: the console script, e.g. `torchrun --nproc-per-node 2 -m perfsleuth run train.py`."""

from .cli.main import main

main(prog_name="perfsleuth")
