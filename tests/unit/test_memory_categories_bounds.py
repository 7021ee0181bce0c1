"""record/memory_categories.py's corrections of torch's labels at the peak, with exact numbers: no
category holds more than the bytes its tensors have (parameters, gradients and optimizer state are
known exactly from the live optimizers); the excess is temporary and the peak's total is kept."""

from perfsleuth.record.memory_categories import _bounded

KNOWN = {"parameter_bytes": 405_544, "gradient_bytes": 405_544, "optimizer_state_bytes": 811_112}


def test_gradient_bytes_above_the_gradients_are_temporary():
    """Lightning's peak as torch labelled it (benchmarks/memory_categories.py): 547,920 bytes of
    "gradient" against 405,544 bytes of gradients."""
    at_peak = {"parameter": 405_544, "gradient": 547_920, "optimizer_state": 811_112,
               "activation": 0, "input": 16_640, "temporary": 525_332, "other": 0}
    got = _bounded(at_peak, KNOWN)
    assert got == {**at_peak, "gradient": 405_544, "temporary": 525_332 + 142_376}
    assert sum(got.values()) == sum(at_peak.values()) == 2_306_548


def test_parameter_and_state_excess_too_and_nothing_below_the_known_sizes_moves():
    at_peak = {"parameter": 667_688, "gradient": 100, "optimizer_state": 900_000, "activation": 5,
               "input": 0, "temporary": 4, "other": 0}
    got = _bounded(at_peak, KNOWN)
    assert got == {"parameter": 405_544, "gradient": 100, "optimizer_state": 811_112,
                   "activation": 5, "input": 0, "other": 0,
                   "temporary": 4 + 262_144 + 88_888}


def test_without_known_sizes_or_with_a_zero_one_nothing_moves():
    at_peak = {"parameter": 10, "gradient": 20, "optimizer_state": 30, "activation": 0, "input": 0,
               "temporary": 0, "other": 0}
    assert _bounded(at_peak, None) == at_peak
    assert _bounded(at_peak, {"parameter_bytes": 5, "gradient_bytes": 0,
                              "optimizer_state_bytes": 0}) == {**at_peak, "parameter": 5,
                                                                "temporary": 5}
