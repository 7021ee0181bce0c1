"""A new user's own training loop around pytorch/examples' MNIST model, on synthetic tensors (one of
benchmarks/unseen.py's programs). The model is imported from the checkout (mnist/main.py's `Net`),
not copied; MNIST itself would be downloaded, which is not possible here.

    python mnist_loop.py --examples DIR [--steps 200] [--batch-size 64] [--workers 0] [--threads N] [--foreach]

The loop is the one mnist/main.py's train() runs: DataLoader, zero_grad, forward, nll_loss, backward,
Adadelta step; the data a TensorDataset of random 1x28x28 images, normalised per item as
transforms.Normalize would. --workers is the DataLoader's num_workers, --threads calls
torch.set_num_threads(N) first, --foreach gives Adadelta foreach=True.
"""

import argparse
import sys
from pathlib import Path

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--examples", required=True, help="a checkout of pytorch/examples")
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--batch-size", type=int, default=64)
ap.add_argument("--workers", type=int, default=0)
ap.add_argument("--threads", type=int)
ap.add_argument("--foreach", action="store_true")
args = ap.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)
sys.path.insert(0, str(Path(args.examples) / "mnist"))
from main import Net  # noqa: E402  (pytorch/examples mnist/main.py)


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 1, 28, 28, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return (self.x[i] - 0.1307) / 0.3081, self.y[i]


model = Net()
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0, foreach=True if args.foreach else None)
loader = torch.utils.data.DataLoader(Images(args.batch_size * (args.steps + 2)), batch_size=args.batch_size,
                                     shuffle=True, num_workers=args.workers)
model.train()
for data, target in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.nll_loss(model(data), target)
    loss.backward()
    optimizer.step()
