"""`run --verify` test of a fix that frees memory: one parameter of --numel float32 elements (64 MiB
by default) trained with SGD, its gradient zeroed in place every step
(`zero_grad(set_to_none=False)`, the zero-grad finding). Each step's forward keeps as many bytes
again (the input and `x * w`, saved for backward), so with the gradient kept from step to step the
step's peak holds the parameter, its gradient and those activations; with set_to_none=True the
gradient is freed before the forward and made again in backward, when the activations are being
freed.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
p.add_argument("--numel", type=int, default=16 * 1024 * 1024)
args = p.parse_args()

w = torch.nn.Parameter(torch.ones(args.numel))
opt = torch.optim.SGD([w], lr=1e-6)
for step in range(args.steps):
    opt.zero_grad(set_to_none=False)
    x = torch.rand(args.numel)
    loss = (x * w).sin().sum()
    loss.backward()
    opt.step()
