"""A Hugging Face `Trainer` fine-tune of a tiny, randomly initialised BERT on a synthetic Dataset (one of
benchmarks/unseen.py's programs). Only configures the public libraries; no model or data set is
downloaded.

    python hf_bert.py [--steps 40] [--batch-size 16] [--seq 64] [--workers 0] [--threads N] [--foreach | --fused]

The optimizer is Trainer's own, `optim="adamw_torch"`, as scripts written before transformers made the
fused AdamW its default (on torch >= 2.8) set it. --workers is TrainingArguments.dataloader_num_workers;
--threads calls torch.set_num_threads(N) first; --fused is `optim="adamw_torch_fused"`; --foreach has
Trainer create its optimizer first and sets foreach=True in its parameter groups (what the constructor's
foreach=True would have put there; Trainer has no option for it).
"""

import argparse
import tempfile

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--batch-size", type=int, default=16)
ap.add_argument("--seq", type=int, default=64)
ap.add_argument("--workers", type=int, default=0)
ap.add_argument("--threads", type=int)
ap.add_argument("--foreach", action="store_true")
ap.add_argument("--fused", action="store_true")
args = ap.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)

from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments  # noqa: E402


class Synthetic(torch.utils.data.Dataset):
    """Random token ids and labels, made per item as a tokenised text data set would hand them out."""

    def __init__(self, n: int, seq: int, vocab: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, vocab, (n, seq), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.labels[i]}


config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                    vocab_size=1000, max_position_embeddings=max(128, args.seq), num_labels=2)
model = BertForSequenceClassification(config)
data = Synthetic(args.batch_size * (args.steps + 2), args.seq, config.vocab_size)
out = tempfile.mkdtemp(prefix="hf-bert-")
targs = TrainingArguments(output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                          learning_rate=5e-4, report_to=[], use_cpu=True, save_strategy="no",
                          logging_strategy="no", disable_tqdm=True, dataloader_num_workers=args.workers,
                          optim="adamw_torch_fused" if args.fused else "adamw_torch")
trainer = Trainer(model=model, args=targs, train_dataset=data)
if args.foreach:
    for group in trainer.create_optimizer().param_groups:
        group["foreach"] = True
trainer.train()
