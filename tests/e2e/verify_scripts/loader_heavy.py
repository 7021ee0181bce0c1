"""`run --verify` tests: a Python-heavy Dataset (real Python work per sample, num_workers=0) and a model
that computes about as long as a batch takes to load, so one worker process can overlap the two."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Tokens(Dataset):
    def __init__(self, n, work):
        self.n, self.work = n, work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = (i * 2654435761 + 1) & 0x7FFFFFFF
        counts = [0.0] * 32
        for _ in range(self.work):
            x = (1103515245 * x + 12345) & 0x7FFFFFFF
            counts[(x >> 7) % 32] += 1.0
        return torch.tensor(counts) / self.work, i % 10


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--work", type=int, default=4000)
p.add_argument("--hidden", type=int, default=1536)
p.add_argument("--time", action="store_true")
args = p.parse_args()
print("loader_heavy: started", flush=True)  # the script's own output: on the terminal once, in the log after
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                      nn.Linear(args.hidden, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Tokens(args.steps * 8, args.work), batch_size=8, num_workers=0)
t_load = t_comp = 0.0
t0 = time.perf_counter()
for x, y in loader:
    t1 = time.perf_counter()
    t_load += t1 - t0
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    t0 = time.perf_counter()
    t_comp += t0 - t1
if args.time:
    print(f"load {t_load / args.steps * 1e3:.2f} ms, compute {t_comp / args.steps * 1e3:.2f} ms per step")
