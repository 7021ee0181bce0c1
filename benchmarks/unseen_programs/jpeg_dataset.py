# Written for issue 37 (item 4) by a helper who had not seen perfsleuth's code, as an unseen program for
# benchmarks/unseen.py; only the --threads option was added here.
"""Train a small CNN on a synthetic, in-memory JPEG image dataset (CPU).

The dataset mimics a real image pipeline: images are stored as encoded
JPEG bytes and decoded + augmented per sample in __getitem__.
"""
import argparse
import io
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class InMemoryJpegDataset(Dataset):
    """Random 96x96 RGB images, encoded once as JPEG, decoded on access."""

    def __init__(self, num_images=2048, num_classes=10, size=96, seed=0, transform=None):
        rng = np.random.default_rng(seed)
        self.transform = transform
        self.blobs = []
        self.labels = rng.integers(0, num_classes, size=num_images).tolist()
        # Give each class a slightly different mean colour so there is
        # something to learn; add smooth-ish noise so JPEG has real content.
        class_colors = rng.integers(40, 215, size=(num_classes, 3))
        for i in range(num_images):
            base = class_colors[self.labels[i]].astype(np.float32)
            low = rng.normal(0, 40, size=(12, 12, 3)).astype(np.float32)
            low = np.kron(low, np.ones((size // 12, size // 12, 1), dtype=np.float32))
            noise = rng.normal(0, 20, size=(size, size, 3)).astype(np.float32)
            arr = np.clip(base + low + noise, 0, 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(arr, mode="RGB").save(buf, format="JPEG", quality=90)
            self.blobs.append(buf.getvalue())

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, idx):
        img = Image.open(io.BytesIO(self.blobs[idx])).convert("RGB")
        if self.transform is not None:
            img = self.transform(img)
        return img, self.labels[idx]


class SmallCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            )

        self.features = nn.Sequential(
            block(3, 16),   # 64 -> 32
            block(16, 32),  # 32 -> 16
            block(32, 64),  # 16 -> 8
            block(64, 64),  # 8 -> 4
        )
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def parse_args():
    p = argparse.ArgumentParser(description="Small CNN on synthetic JPEG data (CPU)")
    p.add_argument("--steps", type=int, default=120, help="number of optimizer steps")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-images", type=int, default=512)
    # added by benchmarks/unseen_catalog.py's maintainers (the program's author left torch's threads as they are)
    p.add_argument("--threads", type=int, help="torch.set_num_threads(N) first")
    return p.parse_args()


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_tf = transforms.Compose([
        transforms.RandomResizedCrop(64, scale=(0.5, 1.0)),
        transforms.RandomHorizontalFlip(),
        transforms.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1),
        transforms.ToTensor(),
        normalize,
    ])

    t0 = time.perf_counter()
    dataset = InMemoryJpegDataset(num_images=args.num_images, seed=args.seed, transform=train_tf)
    print(f"built dataset of {len(dataset)} images in {time.perf_counter() - t0:.2f}s")

    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        drop_last=True,
        persistent_workers=args.workers > 0,
    )

    device = torch.device("cpu")
    model = SmallCNN(num_classes=10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    criterion = nn.CrossEntropyLoss()

    model.train()
    step_times = []
    global_step = 0
    t_prev = time.perf_counter()
    while global_step < args.steps:
        for step, (x, y) in enumerate(loader, start=global_step):
            # time from end of previous step, so batch wait is included
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss = criterion(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            t_now = time.perf_counter()
            step_times.append(t_now - t_prev)
            t_prev = t_now
            if step % 20 == 0:
                acc = (out.argmax(1) == y).float().mean().item()
                print(f"step {step:4d}  loss {loss.item():.4f}  acc {acc:.3f}  "
                      f"step_time {step_times[-1] * 1000:.1f} ms")
            global_step = step + 1
            if global_step >= args.steps:
                break

    measured = step_times[10:]
    mean_ms = 1000 * sum(measured) / max(len(measured), 1)
    print(f"mean step time (steps 10..{args.steps}): {mean_ms:.1f} ms "
          f"[workers={args.workers}, batch_size={args.batch_size}]")


if __name__ == "__main__":
    main()
