"""The means, standard errors and intervals every table prints (eval/judges/aggregation.py), on numbers
worked by hand: each test pins one part of the rule so that a changed operator, count or index in it
changes a named figure (scripts/mutation.py's `aggregation` target runs these first)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from memloop.eval.judges.aggregation import (
    INCOMPLETE,
    JUDGED,
    NOT_APPLICABLE,
    RESAMPLES,
    SEED,
    ZERO,
    Unit,
    figure,
    mean_over_samples,
    mean_se,
    paired_difference,
    paired_mean_delta,
    paired_ratio_delta,
)


def test_the_mean_over_samples_leaves_out_none_and_nan() -> None:
    assert mean_over_samples([1.0, 3.0]) == 2.0
    assert mean_over_samples([None, 1.0, math.nan, 3.0]) == 2.0
    assert math.isnan(mean_over_samples([None, math.nan]))


def test_the_standard_error_over_repeats_is_the_sample_sd_over_root_n() -> None:
    assert mean_se([1.0, 3.0]) == (2.0, 1.0)  # sd 2**0.5 (n - 1 in the variance), over 2**0.5
    m, se = mean_se([1.0, 2.0, 6.0, None, math.nan])  # squares 4 + 1 + 9 = 14, variance 7
    assert m == 3.0 and se == pytest.approx(math.sqrt(7 / 3))
    assert mean_se([0.4]) == (0.4, None)  # one repeat has no spread
    nan_mean, no_se = mean_se([math.nan])
    assert math.isnan(nan_mean) and no_se is None


def test_the_interval_is_the_seeded_percentile_bootstrap_over_units() -> None:
    """The documented procedure, recomputed: RESAMPLES draws of n units with replacement from the
    generator seeded SEED, the mean of each, and their 2.5th and 97.5th percentiles."""
    d = np.random.default_rng(7).uniform(-1, 1, 12)
    point, lo, hi = paired_mean_delta(np.zeros(12), d)
    means = d[np.random.default_rng(SEED).integers(0, 12, size=(RESAMPLES, 12))].mean(axis=1)
    assert point == pytest.approx(d.mean())
    assert (lo, hi) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])), rel=1e-12, abs=1e-15)


def test_a_paired_delta_is_b_minus_a_and_a_single_pair_has_a_point_interval() -> None:
    point, lo, hi = paired_mean_delta(np.array([0.5, 0.1]), np.array([0.75, 0.6]))
    assert point == pytest.approx(0.375) and lo <= point <= hi
    assert paired_mean_delta(np.array([0.5]), np.array([0.75])) == (0.25, 0.25, 0.25)
    assert all(math.isnan(v) for v in paired_mean_delta(np.array([]), np.array([])))


def test_a_ratio_delta_is_the_difference_of_the_two_ratios_of_sums_in_percent() -> None:
    num_a, den_a = np.array([1.0, 2.0, 3.0]), np.array([10.0, 10.0, 20.0])  # 6 / 40 = 15%
    num_b, den_b = np.array([4.0, 4.0, 2.0]), np.array([10.0, 20.0, 10.0])  # 10 / 40 = 25%
    point, lo, hi = paired_ratio_delta(num_a, den_a, num_b, den_b)
    assert point == pytest.approx(10.0) and lo <= point <= hi


def _two_repeats() -> list[Unit]:
    return [
        Unit(0, "a", JUDGED, 0.2),
        Unit(0, "b", JUDGED, 0.4),
        Unit(0, "c", ZERO),
        Unit(1, "a", JUDGED, 0.6),
        Unit(1, "b", JUDGED, 0.8),
        Unit(1, "c", JUDGED, 1.0),
        Unit(0, "d", NOT_APPLICABLE),
        Unit(1, "e", INCOMPLETE),
    ]


def test_a_cell_is_the_mean_over_repeats_of_each_repeats_mean_over_samples() -> None:
    """Repeat 0: (0.2 + 0.4 + 0) / 3 = 0.2; repeat 1: 0.8. Mean 0.5, s.e. over the two repeats 0.3
    (over the three samples' means it would be 0.058)."""
    f = figure(_two_repeats())
    assert f["mean"] == pytest.approx(0.5) and f["se"] == pytest.approx(0.3)
    assert f["mean_judged"] == pytest.approx(0.6)  # the five judged values, the failure left out
    assert (f["judged"], f["zeroed"], f["n/a"], f["incomplete_units"]) == (5, 1, 1, 1)
    assert (f["total"], f["samples"], f["repeats"], f["repeats_without_result"]) == (7, 3, 2, 0)
    assert f["incomplete"] is True  # one unit's score is unknown, though every repeat has a result
    assert f["lo"] <= f["mean"] <= f["hi"] and f["lo"] < f["hi"]


def test_a_cell_with_a_zero_scores_it_as_the_metrics_zero_and_only_judged_units_in_mean_judged() -> None:
    f = figure([Unit(0, "a", JUDGED, 1.0), Unit(0, "b", ZERO)], zero=0.25)
    assert f["mean"] == pytest.approx(0.625) and f["mean_judged"] == 1.0 and f["incomplete"] is False


def test_a_ratio_cell_divides_the_sums_and_a_failed_unit_adds_no_denominator() -> None:
    units = [Unit(0, "a", JUDGED, 2.0, 10.0), Unit(0, "b", JUDGED, 4.0, 20.0), Unit(0, "c", ZERO)]
    assert figure(units)["mean"] == pytest.approx(6 / 30)


def test_a_judges_own_aggregate_is_applied_per_repeat() -> None:
    """A judge that aggregates by the median (not the mean): repeat 0's median 0.2, repeat 1's 0.7."""

    def median(values: object) -> float:
        return float(np.nanmedian(np.asarray(list(values), float)))

    units = [
        Unit(0, "a", JUDGED, 0.1),
        Unit(0, "b", JUDGED, 0.2),
        Unit(0, "c", JUDGED, 0.9),
        Unit(1, "a", JUDGED, 0.7),
        Unit(1, "b", JUDGED, 0.7),
        Unit(1, "c", JUDGED, 0.0),
    ]
    f = figure(units, aggregate=median)
    assert f["mean"] == pytest.approx(0.45) and f["se"] == pytest.approx(0.25)


def test_a_repeat_the_run_has_without_any_unit_leaves_the_cell_incomplete() -> None:
    f = figure([Unit(0, "a", JUDGED, 0.5), Unit(0, "b", JUDGED, 0.7)], repeats=[0, 1])
    assert f["mean"] == pytest.approx(0.6) and f["se"] is None
    assert (f["repeats"], f["repeats_without_result"], f["incomplete"]) == (2, 1, True)
    assert figure([], repeats=[0, 1])["repeats_without_result"] == 2


def test_one_sample_has_no_interval_and_two_have_one() -> None:
    one = figure([Unit(0, "a", JUDGED, 0.5)])
    assert one["mean"] == 0.5 and (one["lo"], one["hi"]) == (None, None)
    two = figure([Unit(0, "a", JUDGED, 0.5), Unit(0, "b", JUDGED, 0.9)])
    assert two["lo"] is not None and two["lo"] < two["hi"]


def test_an_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of"):
        figure([Unit(0, "a", "skipped", 1.0)])


def test_a_paired_difference_pairs_units_counted_on_both_sides_and_averages_repeats_per_sample() -> None:
    a = [
        Unit(0, "a", JUDGED, 0.5),
        Unit(1, "a", JUDGED, 0.7),
        Unit(0, "b", JUDGED, 0.2),
        Unit(0, "c", ZERO),
        Unit(0, "d", JUDGED, 0.9),
        Unit(0, "e", INCOMPLETE),
    ]
    b = [
        Unit(0, "a", JUDGED, 0.6),
        Unit(1, "a", JUDGED, 1.0),
        Unit(0, "b", ZERO),
        Unit(0, "c", JUDGED, 0.4),
        Unit(0, "d", NOT_APPLICABLE),
        Unit(0, "e", JUDGED, 0.3),
        Unit(0, "f", JUDGED, 0.1),
    ]
    got = paired_difference(a, b)
    xa, xb = np.array([np.mean([0.5, 0.7]), 0.2, 0.0]), np.array([np.mean([0.6, 1.0]), 0.0, 0.4])
    assert (got["n"], got["units"]) == (3, 4)  # d, e and f are not counted on both sides
    assert got["a"] == pytest.approx(0.8 / 3) and got["b"] == pytest.approx(0.4)
    assert (got["delta"], got["lo"], got["hi"]) == pytest.approx(paired_mean_delta(xa, xb))
    assert got["delta"] == pytest.approx(0.4 / 3)


def test_a_paired_difference_with_nothing_in_common_is_empty() -> None:
    empty = {"n": 0, "units": 0, "a": None, "b": None, "delta": None, "lo": None, "hi": None}
    assert paired_difference([], []) == empty
    assert paired_difference([Unit(0, "a", JUDGED, 1.0)], [Unit(0, "b", JUDGED, 1.0)]) == empty
