"""The run says who leads: the flow's own method against the other methods of the same run
on its test metric, worked by hand for every flow that names one (found from the registry)."""

from __future__ import annotations

import pandas as pd
import pytest

from scarce.flows.registry import FLOWS
from scarce.flows.runtime import lead_line

LEADING = {name: spec for name, spec in FLOWS.items() if spec.lead_metric}
assert {"leml", "strip"} <= set(LEADING), sorted(LEADING)  # an empty list tests nothing

OWN = {"leml": "leml-squared-k100", "strip": "strip-partial"}


def _metrics(metric: str, values: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"dataset": "d", "method": list(values), "metric": metric,
                         "value": list(values.values())})


@pytest.mark.parametrize("flow", sorted(LEADING))
def test_a_baseline_ahead_of_ours_is_named_first_with_its_margin(flow):
    spec = LEADING[flow]
    m = _metrics(spec.lead_metric, {OWN[flow]: 0.731, "other-a": 0.812, "other-b": 0.70})
    assert lead_line(m, spec) == (f"other-a leads {OWN[flow]} by 8.10 points of "
                                  f"{spec.lead_metric} on this data")


@pytest.mark.parametrize("flow", sorted(LEADING))
def test_ours_ahead_is_measured_against_the_best_other_method(flow):
    spec = LEADING[flow]
    m = _metrics(spec.lead_metric, {OWN[flow]: 0.8, "other-a": 0.75, "other-b": 0.79})
    assert lead_line(m, spec) == (f"{OWN[flow]} leads other-b (the best other method) by "
                                  f"1.00 points of {spec.lead_metric} on this data")


@pytest.mark.parametrize("flow", sorted(LEADING))
def test_no_line_for_one_method_or_without_the_metric(flow):
    spec = LEADING[flow]
    assert lead_line(_metrics(spec.lead_metric, {OWN[flow]: 0.8}), spec) is None
    assert lead_line(_metrics("something-else", {OWN[flow]: 0.8, "x": 0.9}), spec) is None
    level = _metrics(spec.lead_metric, {OWN[flow]: 0.8, "x": 0.8})
    assert "level" in lead_line(level, spec)
