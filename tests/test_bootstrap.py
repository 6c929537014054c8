"""The bootstrap of medians shared by the report's intervals and ``check-auto``."""

from __future__ import annotations

import numpy as np
import pytest

from ring.model.bootstrap import bootstrap_ratio, percentile_bootstrap


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
    """A statistic that is the first call of each resample: its draws are uniform over the
    calls, so the interval is the 2.5th and 97.5th percentiles of the calls."""
    calls = np.random.default_rng(1).permutation(np.arange(1.0, 1002.0))
    low, high = percentile_bootstrap([calls], lambda s, axis: s[..., 0], np.random.default_rng(0))
    assert low == pytest.approx(26.0, abs=6) and high == pytest.approx(976.0, abs=6)


def test_one_call_is_its_own_interval():
    assert bootstrap_ratio([2.0], [6.0], np.random.default_rng(0)) == (3.0, 3.0)


@pytest.mark.parametrize("calls", [[], [[1.0, 2.0]]])
def test_resampling_refuses_what_is_not_a_list_of_calls(calls):
    with pytest.raises(ValueError, match="non-empty 1-D"):
        bootstrap_ratio(np.asarray(calls), np.ones(3), np.random.default_rng(0))
