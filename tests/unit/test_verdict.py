"""The verdict from category shares, including the issue's V100 ResNet-50 acceptance numbers."""

import pytest
from perfsleuth.analysis.verdict import VERDICTS, decide
from perfsleuth.config import Config


def share(**kw):
    base = dict(dataloader=0.0, kernel=0.0, sync=0.0, transfer=0.0, host=0.0, communication=0.0, other=0.0)
    base.update(kw)
    return base


@pytest.mark.parametrize("dl", [0.23, 0.28, 0.33])
def test_v100_resnet50_num_workers_0_is_dataloader_bound(dl):
    # TensorBoard plugin breakdown: kernels ~55 %, DataLoader 23-33 %, CPU work with the GPU idle ~9 %
    verdict, reason = decide(share(kernel=0.55, dataloader=dl, host=0.09, other=0.36 - dl), Config())
    assert verdict == "dataloader-bound"
    assert "dataloader" in reason


@pytest.mark.parametrize("host", [0.17, 0.20, 0.24])
def test_v100_resnet50_4_workers_is_kernel_bound(host):
    # kernels ~70 %, CPU-side work while the GPU idles 17-24 %, DataLoader under 1 %
    verdict, _ = decide(share(kernel=0.70, host=host, dataloader=0.008, other=0.292 - host), Config())
    assert verdict == "kernel-bound"


def test_without_a_gpu_the_reason_speaks_of_ops_not_kernels():
    s = share(kernel=0.55, dataloader=0.30, other=0.15)
    assert decide(s, Config(), gpu=False)[1] == "dataloader takes 30% of step time (material from 10%); ops 55%"
    assert decide(s, Config())[1] == "dataloader takes 30% of step time (material from 10%); kernels 55%"
    assert decide(share(kernel=0.9, other=0.1), Config(), gpu=False)[1].startswith("ops take 90% of step time")


def test_largest_material_stall_wins():
    assert decide(share(kernel=0.5, sync=0.2, transfer=0.3), Config())[0] == "transfer-bound"


def test_material_threshold_is_inclusive():
    assert decide(share(kernel=0.9, sync=0.10), Config())[0] == "sync-bound"
    assert decide(share(kernel=0.9, sync=0.0999), Config())[0] == "kernel-bound"


def test_idle_device_without_a_material_stall_takes_the_largest_stall():
    # kernels only fill 40 %: not kernel-bound even though host (29 %) is under its 30 % bar
    assert decide(share(kernel=0.40, host=0.29, other=0.31), Config())[0] == "host-bound"


def test_thresholds_come_from_config():
    cfg = Config(material_share={**Config().material_share, "host": 0.15})
    assert decide(share(kernel=0.8, host=0.2), cfg)[0] == "host-bound"


def test_all_verdicts_are_known():
    for cat in ("dataloader", "sync", "transfer", "host", "communication"):
        assert decide(share(kernel=0.1, **{cat: 0.9}), Config())[0] in VERDICTS


# --- degree and words (issue 15) ------------------------------------------------------------------
from perfsleuth.analysis.verdict import degree, verdict_text  # noqa: E402


@pytest.mark.parametrize("dl, expected", [(0.0999, "low"), (0.10, "moderate"), (0.1999, "moderate"), (0.20, "high")])
def test_degree_bounds(dl, expected):
    assert degree("dataloader-bound", share(dataloader=dl, kernel=0.8)) == expected


def test_verdict_in_words():
    s = share(dataloader=0.14, kernel=0.83, host=0.03)
    assert decide(s, Config())[0] == "dataloader-bound"
    assert verdict_text("dataloader-bound", s, gpu=True) == \
        "moderately dataloader-bound: 14% of each step waits for data; kernels 83%"
    assert verdict_text("host-bound", share(host=0.62, kernel=0.35), gpu=False) == \
        "host-bound: 62% of each step is Python and framework code outside ops; ops 35%"
    assert verdict_text("host-bound", share(host=0.08, kernel=0.40), gpu=True) == \
        "slightly host-bound: 8% of each step the GPU waits for the host (Python, op dispatch, launches); kernels 40%"
    assert verdict_text("kernel-bound", share(kernel=0.74, host=0.23), gpu=False) == "kernel-bound: ops compute 74% of each step"
