"""The bootstrap of medians shared by the report's intervals and ``check-auto``."""

from __future__ import annotations

import numpy as np
import pytest

from ring.model.bootstrap import bootstrap_ratio, percentile_interval, resampled_medians


def test_ratio_interval_holds_the_true_ratio_and_narrows_with_more_calls():
    rng = np.random.default_rng(0)
    widths = []
    for calls in (20, 2000):
        fast = rng.lognormal(np.log(10.0), 0.3, calls)
        slow = rng.lognormal(np.log(15.0), 0.3, calls)
        low, high = bootstrap_ratio(fast, slow, rng)
        assert low < 1.5 < high
        widths.append(high - low)
    assert widths[1] < widths[0] / 4


def test_interval_cuts_the_same_share_from_each_tail():
    assert percentile_interval(np.arange(1001.0)) == pytest.approx((25.0, 975.0))


@pytest.mark.parametrize("calls", [[], [[1.0, 2.0]]])
def test_resampling_refuses_what_is_not_a_list_of_calls(calls):
    with pytest.raises(ValueError, match="non-empty 1-D"):
        resampled_medians(np.asarray(calls), np.random.default_rng(0))
