"""A Python-heavy DataLoader (issue 40): each sample is a line of text that `__getitem__` normalises,
tokenises, maps to vocabulary ids through a dict, extends with hashed bigrams and pads, all in pure Python;
the model (an EmbeddingBag and two small linear layers) computes for a fraction of that time. num_workers=0
unless --workers says otherwise. On a 2-core machine the loading dominates: one worker only moves it to
another process, two use both cores.

    python benchmarks/python_loader.py [--steps 200] [--workers 0] [--times]

--times prints one JSON line: the mean step (ms) after the first --skip steps, the steps timed, the load.
Written for issue 40 while tuning (a "fitted" program in docs/accuracy.md's sense).
"""

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WORDS = ("the model loads a batch of tokens while the optimizer steps and every worker parses its lines "
         "into lists of ids then pads them before the collate stacks them into one tensor").split()
PUNCT = str.maketrans({c: " " for c in ",.;:!?()[]\"'"})


class Lines(Dataset):
    def __init__(self, n: int, words: int, length: int, vocab: int):
        self.n, self.words, self.length, self.vocab = n, words, length, vocab
        self.ids: dict = {}

    def __len__(self):
        return self.n

    def line(self, i: int) -> str:
        x = (i * 2654435761 + 7) & 0x7FFFFFFF
        out = []
        for k in range(self.words):
            x = (1103515245 * x + 12345) & 0x7FFFFFFF
            w = WORDS[(x >> 5) % len(WORDS)]
            out.append(w.capitalize() + "," if k % 7 == 0 else w)
        return " ".join(out) + "."

    def __getitem__(self, i: int):
        text = self.line(i).lower().translate(PUNCT)
        tokens = [t for t in text.split() if t]
        ids = []
        for t in tokens:
            if t not in self.ids:
                self.ids[t] = 1 + len(self.ids) % (self.vocab - 1)
            ids.append(self.ids[t])
        ids += [1 + hash((a, b)) % (self.vocab - 1) for a, b in zip(tokens, tokens[1:])]
        ids = (ids + [0] * self.length)[: self.length]
        return torch.tensor(ids), i % 10


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--words", type=int, default=400)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--skip", type=int, default=10)
    p.add_argument("--times", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    vocab, length = 4096, 2 * args.words
    model = nn.Sequential(nn.EmbeddingBag(vocab, 64, mode="mean"), nn.Linear(64, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Lines(args.steps * args.batch, args.words, length, vocab), batch_size=args.batch,
                        shuffle=False, num_workers=args.workers)
    stamps = []
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        stamps.append(time.perf_counter())
    if args.times:
        timed = stamps[args.skip:]
        mean = (timed[-1] - timed[0]) / (len(timed) - 1) * 1e3
        print(json.dumps({"workers": args.workers, "step_ms": round(mean, 3), "steps": len(timed) - 1,
                          "load": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
