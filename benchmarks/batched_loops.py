"""Loops of small modules as people write them, each with its batched rewrite (issue 39): the program that
`benchmarks/batched_rewrite.py` runs under `perfsleuth run` (the loop) and times without the profiler (loop
and rewrite, interleaved).

Patterns (--pattern):
- `grouped_mlp`: the issue's grouped MLP -- a comprehension over a ModuleList of 96 `nn.Linear(8, 8)` per
  layer, one slice `x[:, g]` each, `torch.stack` of the outputs; 3 layers; rewrite: one `einsum` per layer
  over a stacked (96, 8, 8) weight.
- `cat_loop`: an explicit `for` loop appending to a list, then `torch.cat`: 32 per-field projections
  (`nn.Linear(16, 16)` and a ReLU) of 32 feature fields, 2 layers; rewrite: one `torch.bmm` per layer.
- `heads`: per-head attention as in the "Let's build GPT" lecture's `MultiHeadAttention` (public: e.g.
  github.com/ChadBowman/ChadGPT `multi_head_attention.py` / `head.py`, github.com/ambujpawar/lets_learn_gpt
  `answers/load_multihead.py`): a ModuleList of `Head` modules (key, query, value `nn.Linear(bias=False)`,
  causal mask, softmax), `torch.cat([h(x) for h in self.heads], -1)`; rewrite: one qkv Linear and the heads
  as a batch dimension.
- `moe`: the per-expert loop of Mixtral-style MoE code (public: e.g. github.com/edadaltocg/research
  `research/nn/layers/moe.py`: `torch.where(selected == i)`, the expert on the selected rows, the weighted
  result added back into those rows), 16 small experts, top-2; rewrite: every expert on every token in one
  `einsum` per expert layer, weighted by the (zero outside the top-2) gate weights (8x the loop's arithmetic).
- `moe_dispatch`: the same loop; rewrite: the tokens sorted by expert, padded to the busiest expert's count,
  one `baddbmm` per expert layer (the loop's arithmetic and the padding).

Each step: zero_grad, forward, cross-entropy, backward, SGD step (foreach off: the CPU default).
`--times` prints {"median_ms": ..., "steps_ms": [...]} after `--warmup` steps, for the A/B.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


# --- grouped MLP (the issue's) ------------------------------------------------------------------------
class GroupedLoop(nn.Module):
    def __init__(self, groups=96, width=8):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(groups))

    def forward(self, x):  # (batch, groups, width)
        return torch.stack([torch.tanh(lin(x[:, g])) for g, lin in enumerate(self.blocks)], 1)


class GroupedBatched(nn.Module):
    def __init__(self, groups=96, width=8):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(groups, width, width) / width ** 0.5)
        self.bias = nn.Parameter(torch.zeros(groups, width))

    def forward(self, x):
        return torch.tanh(torch.einsum("bgi,goi->bgo", x, self.weight) + self.bias)


class GroupedNet(nn.Module):
    def __init__(self, batched, groups=96, width=8, layers=3):
        super().__init__()
        block = GroupedBatched if batched else GroupedLoop
        self.groups, self.width = groups, width
        self.layers = nn.Sequential(*[block(groups, width) for _ in range(layers)])
        self.head = nn.Linear(groups * width, 10)

    def forward(self, x):
        h = self.layers(x.view(x.shape[0], self.groups, self.width))
        return self.head(h.reshape(x.shape[0], -1))


# --- explicit for loop, append, cat ------------------------------------------------------------------
class FieldsLoop(nn.Module):
    def __init__(self, fields=32, width=16):
        super().__init__()
        self.fields, self.width = fields, width
        self.proj = nn.ModuleList([nn.Linear(width, width) for _ in range(fields)])

    def forward(self, x):  # (batch, fields * width)
        outs = []
        for i in range(self.fields):
            part = x[:, i * self.width:(i + 1) * self.width]
            outs.append(F.relu(self.proj[i](part)))
        return torch.cat(outs, dim=1)


class FieldsBatched(nn.Module):
    def __init__(self, fields=32, width=16):
        super().__init__()
        self.fields, self.width = fields, width
        self.weight = nn.Parameter(torch.randn(fields, width, width) / width ** 0.5)
        self.bias = nn.Parameter(torch.zeros(fields, 1, width))

    def forward(self, x):
        xs = x.view(x.shape[0], self.fields, self.width).transpose(0, 1)  # (fields, batch, width)
        out = F.relu(torch.baddbmm(self.bias, xs, self.weight))
        return out.transpose(0, 1).reshape(x.shape[0], -1)


class FieldsNet(nn.Module):
    def __init__(self, batched, fields=32, width=16, layers=2):
        super().__init__()
        block = FieldsBatched if batched else FieldsLoop
        self.layers = nn.Sequential(*[block(fields, width) for _ in range(layers)])
        self.head = nn.Linear(fields * width, 10)

    def forward(self, x):
        return self.head(self.layers(x))


# --- per-head attention ------------------------------------------------------------------------------
class Head(nn.Module):
    def __init__(self, n_embd, head_size, block):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(block, block)))

    def forward(self, x):
        T = x.shape[1]
        k, q = self.key(x), self.query(x)
        w = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        w = F.softmax(w.masked_fill(self.tril[:T, :T] == 0, float("-inf")), dim=-1)
        return w @ self.value(x)


class HeadsLoop(nn.Module):
    def __init__(self, n_embd, heads, block):
        super().__init__()
        self.heads = nn.ModuleList([Head(n_embd, n_embd // heads, block) for _ in range(heads)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class HeadsBatched(nn.Module):
    def __init__(self, n_embd, heads, block):
        super().__init__()
        self.n_heads = heads
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("tril", torch.tril(torch.ones(block, block)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        w = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        w = F.softmax(w.masked_fill(self.tril[:T, :T] == 0, float("-inf")), dim=-1)
        return self.proj((w @ v).transpose(1, 2).reshape(B, T, C))


class HeadsNet(nn.Module):
    def __init__(self, batched, n_embd=64, heads=16, block=16, layers=2, vocab=10):
        super().__init__()
        attn = HeadsBatched if batched else HeadsLoop
        self.embed = nn.Embedding(vocab, n_embd)
        self.blocks = nn.Sequential(*[attn(n_embd, heads, block) for _ in range(layers)])
        self.head = nn.Linear(n_embd, vocab)

    def forward(self, tokens):
        return self.head(self.blocks(self.embed(tokens))).mean(1)


# --- per-expert MoE loop -----------------------------------------------------------------------------
class Expert(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1, self.w2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.w2(F.relu(self.w1(x)))


class MoELoop(nn.Module):
    def __init__(self, dim, hidden, experts, k):
        super().__init__()
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList([Expert(dim, hidden) for _ in range(experts)])
        self.k = k

    def forward(self, x):  # (tokens, dim)
        weights, chosen = torch.topk(self.gate(x), self.k)
        weights = F.softmax(weights, dim=1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            rows, nth = torch.where(chosen == i)
            out[rows] += weights[rows, nth, None] * expert(x[rows])
        return out


class MoEBatched(nn.Module):
    def __init__(self, dim, hidden, experts, k):
        super().__init__()
        self.gate = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden) / dim ** 0.5)
        self.b1 = nn.Parameter(torch.zeros(experts, 1, hidden))
        self.w2 = nn.Parameter(torch.randn(experts, hidden, dim) / hidden ** 0.5)
        self.b2 = nn.Parameter(torch.zeros(experts, 1, dim))
        self.k = k

    def forward(self, x):
        weights, chosen = torch.topk(self.gate(x), self.k)
        dense = torch.zeros(x.shape[0], self.w1.shape[0]).scatter(1, chosen, F.softmax(weights, dim=1))
        h = F.relu(torch.einsum("nd,edh->enh", x, self.w1) + self.b1)
        y = torch.einsum("enh,ehd->end", h, self.w2) + self.b2  # every expert on every token
        return torch.einsum("end,ne->nd", y, dense)


class MoEDispatch(MoEBatched):
    """The same experts, the tokens sorted by expert and padded to the busiest expert's count: one `baddbmm`
    per expert layer over (experts, capacity, dim) -- the loop's arithmetic and the padding, where the dense
    rewrite computes every expert on every token (experts / k times the loop's)."""

    def forward(self, x):
        n, experts = x.shape[0], self.w1.shape[0]
        weights, chosen = torch.topk(self.gate(x), self.k)
        weights = F.softmax(weights, dim=1).reshape(-1)
        expert = chosen.reshape(-1)
        order = torch.argsort(expert, stable=True)
        counts = torch.bincount(expert, minlength=experts)
        sorted_expert, token = expert[order], order // self.k
        slot = torch.arange(n * self.k) - (torch.cumsum(counts, 0) - counts)[sorted_expert]
        buf = x.new_zeros(experts, int(counts.max()), x.shape[1]).index_put((sorted_expert, slot), x[token])
        h = F.relu(torch.baddbmm(self.b1, buf, self.w1))
        y = torch.baddbmm(self.b2, h, self.w2)[sorted_expert, slot]
        return torch.zeros_like(x).index_add(0, token, y * weights[order, None])


class MoENet(nn.Module):
    def __init__(self, batched, dim=16, hidden=32, experts=16, k=2, layers=2, dispatch=False):
        super().__init__()
        moe = (MoEDispatch if dispatch else MoEBatched) if batched else MoELoop
        self.layers = nn.ModuleList([moe(dim, hidden, experts, k) for _ in range(layers)])
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x)


def labels(n: int, g: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 10, (n,), generator=g)


PATTERNS = {  # name: (model, a batch of inputs and labels)
    "grouped_mlp": (GroupedNet, lambda g: (torch.randn(64, 768, generator=g), labels(64, g))),
    "cat_loop": (FieldsNet, lambda g: (torch.randn(64, 512, generator=g), labels(64, g))),
    "heads": (HeadsNet, lambda g: (torch.randint(0, 10, (16, 16), generator=g), labels(16, g))),
    "moe": (MoENet, lambda g: (torch.randn(256, 16, generator=g), labels(256, g))),
    "moe_dispatch": (lambda b: MoENet(b, dispatch=True), lambda g: (torch.randn(256, 16, generator=g), labels(256, g))),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pattern", choices=sorted(PATTERNS), required=True)
    p.add_argument("--batched", action="store_true", help="the rewrite")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of --times' median")
    p.add_argument("--times", action="store_true", help="print the median step time (ms) as JSON")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    make, batch = PATTERNS[args.pattern]
    model = make(args.batched)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    data = [batch(g) for _ in range(8)]
    marks = [time.perf_counter()]
    for i in range(args.steps):
        x, y = data[i % len(data)]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        marks.append(time.perf_counter())
    if args.times:
        steps = [(b - a) * 1e3 for a, b in itertools.pairwise(marks)][args.warmup:]
        print(json.dumps({"median_ms": statistics.median(steps), "steps_ms": [round(s, 3) for s in steps]}))


if __name__ == "__main__":
    main()
