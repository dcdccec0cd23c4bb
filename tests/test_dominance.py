"""core/dominance: crowding distance (Deb et al. 2002, Sec. III-B) on hand-computed cases;
the non-dominated sort itself is tested through its re-export in tests/test_pareto.py."""

from __future__ import annotations

import numpy as np
import pytest

from lipsweep.core.dominance import crowding_distance, non_dominated_ranks
from lipsweep.decide import pareto


def test_the_sort_is_the_one_decide_pareto_uses():
    assert pareto.non_dominated_ranks is non_dominated_ranks


def test_crowding_distance_by_hand():
    # x sorted 0,1,2,4 (range 4); y sorted 0,1.5,2,4 (range 4)
    # row 1: x gap (2 - 0)/4 = 0.5,  y gap (4 - 1.5)/4 = 0.625 -> 1.125
    # row 2: x gap (4 - 1)/4 = 0.75, y gap (2 - 0)/4   = 0.5   -> 1.25
    v = np.array([[0.0, 4.0], [1.0, 2.0], [2.0, 1.5], [4.0, 0.0]])
    d = crowding_distance(v)
    assert np.isinf(d[[0, 3]]).all()
    np.testing.assert_allclose(d[1:3], [1.125, 1.25], rtol=1e-12)


def test_crowding_distance_small_sets_and_flat_objectives():
    assert np.isinf(crowding_distance(np.array([[1.0, 2.0], [3.0, 0.0]]))).all()
    assert crowding_distance(np.zeros((0, 2))).shape == (0,)
    # the second objective is constant: it adds nothing; the first gives (2 - 0)/2 = 1
    d = crowding_distance(np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0]]))
    assert d[1] == pytest.approx(1.0) and np.isinf(d[[0, 2]]).all()
    with pytest.raises(ValueError, match="2-D"):
        crowding_distance(np.zeros(3))
