"""`run --verify` tests: 60 Linear(4, 4) layers (120 parameter tensors) trained with Adam(foreach=False),
so the optimizer step is a Python loop of small ops over the parameters (the fused-optimizer finding).

--out DIR: each run writes DIR/report.json and DIR/verify/children.log of its own (files named like
perfsleuth's, which must never replace them) and appends a line to DIR/runs.txt.
--fail-in-worker: the Dataset raises in a DataLoader worker process (a variant with workers fails).
--sleep S: each step also sleeps S seconds (a slow step, for the budget).
"""
import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Inputs(Dataset):
    def __init__(self, n, fail_in_worker):
        self.n, self.fail_in_worker = n, fail_in_worker

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.fail_in_worker and get_worker_info() is not None:
            raise RuntimeError("this Dataset cannot run in a worker process")
        return torch.full((4,), float(i % 7))


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
p.add_argument("--out")
p.add_argument("--fail-in-worker", action="store_true")
p.add_argument("--sleep", type=float, default=0.0)
args = p.parse_args()
if args.out:
    os.makedirs(os.path.join(args.out, "verify"), exist_ok=True)
    for name in ("report.json", os.path.join("verify", "children.log")):
        with open(os.path.join(args.out, name), "w") as f:
            f.write(json.dumps({"written_by": "the script"}))
    with open(os.path.join(args.out, "runs.txt"), "a") as f:
        f.write("run\n")
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(60)])
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
for x in DataLoader(Inputs(args.steps * 8, args.fail_in_worker), batch_size=8):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    if args.sleep:
        time.sleep(args.sleep)
