"""A PyTorch Lightning module trained on a Python-heavy Dataset (one of benchmarks/unseen.py's programs).
Only configures the public library: Trainer(max_epochs=1, accelerator="cpu", logger=False,
enable_checkpointing=False).

    python lightning_dataset.py [--steps 60] [--batch-size 32] [--workers 0] [--threads N] [--foreach]

Each item is built in Python -- a feature vector from a loop of float arithmetic, as a hand-written
parser or augmentation would -- so loading is a real share of the step. --workers is the DataLoader's
num_workers, --threads calls torch.set_num_threads(N) first, --foreach gives Adam foreach=True.
"""

import argparse
import math

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--batch-size", type=int, default=32)
ap.add_argument("--features", type=int, default=128)
ap.add_argument("--work", type=int, default=8, help="Python arithmetic per feature (the Dataset's weight)")
ap.add_argument("--workers", type=int, default=0)
ap.add_argument("--threads", type=int)
ap.add_argument("--foreach", action="store_true")
args = ap.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)

import lightning as L  # noqa: E402
from torch import nn  # noqa: E402


class Features(torch.utils.data.Dataset):
    def __init__(self, n: int, features: int, work: int):
        self.n, self.features, self.work = n, features, work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = []
        for j in range(self.features):
            v = (i * 31 + j * 7) % 97 / 97.0
            for _ in range(self.work):
                v = math.sin(v * 3.1) + 0.5 * math.cos(v)
            x.append(v)
        return torch.tensor(x), i % 10


class Classifier(L.LightningModule):
    def __init__(self, features: int, foreach: bool):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                 nn.Linear(256, 10))
        self.foreach = foreach

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3, foreach=True if self.foreach else None)


loader = torch.utils.data.DataLoader(Features(args.batch_size * (args.steps + 2), args.features, args.work),
                                     batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
trainer = L.Trainer(max_epochs=1, max_steps=args.steps, accelerator="cpu", logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Classifier(args.features, args.foreach), loader)
