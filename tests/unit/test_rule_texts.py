"""Advice fits the device: every rule, forced to fire on a CPU-only trace's facts, renders a title,
message, fix and ceiling basis without GPU-only words; on a GPU trace the GPU advice is still there."""

import dataclasses
import re

import pytest
from perfsleuth.engine.catalog import TABLES, load_catalog
from perfsleuth.engine.evaluate import evaluate_rule
from perfsleuth.facts.core import FACTS, Facts

# Words a CPU-only run must never read (issue 15: "no pin_memory, DALI, cuDNN or 'per GPU', and 'the
# training loop waits', not 'the device waits'").
GPU_ONLY = [r"pin_memory", r"\bpinned\b", r"\bDALI\b", r"cu[Dd][Nn][Nn]", r"\bGPUs?\b", r"CUDA", r"\bcuda\b",
            r"\.cuda\(", r"NCCL", r"\bthe device\b", r"\bdevice (?:idle|time|waits|values|fills)", r"per GPU",
            r"tensor cores?", r"non_blocking", r"HtoD", r"\bkernels?\b", r"MIOpen", r"\bHIP\b", r"\bhip[A-Z]",
            r"\bcu[A-Z]\w+\(", r"host-to-device", r"memsets?"]

SITE = {"file": "train.py", "line": 57, "function": "train_step", "count": 3, "count_per_step": 1.0,
        "us_per_step": 120.0, "line_kind": "function"}


def facts_for(device: str, with_sites: bool) -> Facts:
    """Every registered fact with a plausible value for a CPU or a CUDA trace; rules are forced anyway."""
    values = {}
    for name, (unit, _) in FACTS.items():
        values[name] = {"bool": True, "text": "x"}.get(unit, 3.0)
    values.update(step_us=1000.0, step_source="ProfilerStep", optimizer_name="SGD", optimizer_fused=False,
                  has_stacks=with_sites, has_run_metadata=True, loader_dataset="MyDataset",
                  loader_collate_fn="my_collate", cpu_gemm_spread=30.0,
                  machine_busy=False, machine_busy_reason="")  # a quiet machine, as most runs are
    if device == "cpu":
        values.update(device_is_gpu=False, device_type="cpu", device_vendor="unknown", device_compute_capability=0.0,
                      device_generation="", device_generation_source="unknown", device_generation_known=False)
    else:
        values.update(device_is_gpu=True, device_type="cuda", device_vendor="nvidia", device_compute_capability=8.0,
                      device_generation="ampere", device_generation_source="deviceProperties",
                      device_generation_known=True)
    tables = {t: [dict(SITE)] if with_sites and t.endswith("_sites") else [] for t in TABLES}
    return Facts(values=values, tables=tables)


def forced(rule, facts: Facts) -> dict:
    finding = evaluate_rule(dataclasses.replace(rule, condition="true"), facts)
    assert finding is not None
    return finding


@pytest.mark.parametrize("with_sites", [False, True])
@pytest.mark.parametrize("rule", load_catalog(), ids=lambda r: r.slug)
def test_every_rule_reads_right_on_a_cpu_trace(rule, with_sites):
    f = forced(rule, facts_for("cpu", with_sites))
    text = "\n".join((f["title"], f["message"], f["fix"], f["ceiling"]["basis"]))
    assert f["message"] and f["fix"], rule.slug
    bad = [p for p in GPU_ONLY if re.search(p, text)]
    assert not bad, f"{rule.slug}: GPU-only words {bad} in the CPU text:\n{text}"


@pytest.mark.parametrize("slug, words", [
    ("num-workers", ["pin_memory=True", "The GPU waits", "per GPU"]),
    ("dataloader-slow", ["DALI", "pin_memory=True"]),
    ("step-outliers", ["cuDNN autotuning"]),
    ("fused-optimizer", ["fused=True", "kernels per step"]),
    ("amp", ['device_type="cuda"', "ampere"]),
    ("allocator-churn", ["cudaMalloc/cudaFree", "expandable_segments", "PYTORCH_NO_CUDA_MEMORY_CACHING"]),
])
def test_gpu_traces_keep_the_gpu_advice(slug, words):
    rule = next(r for r in load_catalog() if r.slug == slug)
    facts = facts_for("cuda", with_sites=False)
    if slug == "step-outliers":
        facts.values["step_slowest_index"] = 0
    if slug == "dataloader-slow":  # its workers branch (the other: tests/unit/test_rules_dataloader.py)
        facts.values["dataloader_single_process"] = False
    f = forced(rule, facts)
    text = "\n".join((f["title"], f["message"], f["fix"]))
    for w in words:
        assert w in text, (slug, w)


def test_cpu_advice_says_what_to_do_on_the_cpu():
    rules = {r.slug: r for r in load_catalog()}
    cpu = facts_for("cpu", with_sites=True)
    assert "The training loop waits" in forced(rules["num-workers"], cpu)["message"]
    assert "foreach=True" in forced(rules["fused-optimizer"], cpu)["fix"]
    assert forced(rules["fused-optimizer"], cpu)["title"] == "The optimizer step runs a loop of small ops over the parameters"
    assert 'device_type="cpu"' in forced(rules["amp"], cpu)["fix"]
    assert "MyDataset.__getitem__" in forced(rules["dataloader-slow"], cpu)["message"]
    rocm = facts_for("cuda", with_sites=False)
    rocm.values["device_type"] = "rocm"
    assert "hipMalloc/hipFree" in forced(rules["allocator-churn"], rocm)["message"]


def test_the_docs_of_a_gpu_only_rule_give_no_cpu_wording():
    """item-sync never fires on a CPU-only trace (its condition starts with device_is_gpu): its docs say so once,
    and show none of the CPU title kept for rule files that drop the gate (issue 29)."""
    from perfsleuth.engine.docs import gpu_only, rule_markdown

    rules = {r.slug: r for r in load_catalog(())}
    text = rule_markdown(rules["item-sync"])
    assert gpu_only(rules["item-sync"]) and "Never fires on CPU-only traces" in text
    assert "On CPU-only traces: never fires (its condition requires `device_is_gpu`)." in text
    assert rules["item-sync"].cpu["title"] not in text
    assert rules["item-sync"].cpu["saving_basis"] not in text
    assert not gpu_only(rules["num-workers"])  # a rule that fires on the CPU keeps its CPU wording in the docs
    basis = rules["num-workers"].cpu["saving_basis"]
    assert f'On CPU-only traces: saving basis "{basis}".' in rule_markdown(rules["num-workers"])
