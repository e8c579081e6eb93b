"""The shape rules of indexing by data and of top_k (the compiler's gather_elements,
scatter_elements, scatter_nd and top_k): what they give, and what they refuse in one line."""

from __future__ import annotations

import pytest

from hexir_format import ShapeError, signatures


def refused(rule, *args) -> str:
    with pytest.raises(ShapeError) as caught:
        rule(*args)
    return str(caught.value)


def test_gather_elements_gives_the_indices_shape_and_bounds_the_other_axes():
    assert signatures.gather_elements((3, 4), (7, 2), 0) == (7, 2)  # any extent on the axis
    assert signatures.gather_elements((3, 4), (2, 4), -1) == (2, 4)
    assert refused(signatures.gather_elements, (3, 4), (2, 5), 0) == (
        "indices 2x5 exceed data 3x4 on axis 1, which is not the indexed axis 0")
    assert refused(signatures.gather_elements, (3, 4), (3,), 0) == (
        "indices 3 and data 3x4 differ in rank")
    assert refused(signatures.gather_elements, (), (), 0) == "cannot index a scalar along an axis"


def test_scatter_elements_needs_updates_shaped_as_the_indices():
    assert signatures.scatter_elements((3, 4), (5, 2), (5, 2), 0) == (3, 4)
    assert refused(signatures.scatter_elements, (3, 4), (2, 2), (2, 3), 1) == (
        "indices 2x2 and updates 2x3 differ in shape")


def test_scatter_nd_updates_are_the_tuples_then_the_slice():
    assert signatures.scatter_nd((4, 5, 6), (2, 3, 2), (2, 3, 6)) == (4, 5, 6)
    assert signatures.scatter_nd((4, 5), (7, 0), (7, 4, 5)) == (4, 5)  # k = 0: whole tensor
    assert refused(signatures.scatter_nd, (4, 5), (2, 3), (2,)) == (
        "index tuples of 3 coordinates do not fit the rank-2 data")
    assert refused(signatures.scatter_nd, (4, 5), (2, 1), (2, 4)) == (
        "updates have shape 2x4; indices 2x1 into data 4x5 expect 2x5")
    assert refused(signatures.scatter_nd, (4, 5), (), ()) == (
        "indices must have rank 1 or more: [..., k]")


def test_top_k_takes_0_to_the_extent():
    assert signatures.top_k((2, 9), 3, -1) == (2, 3)
    assert signatures.top_k((2, 9), 0, 1) == (2, 0)
    assert refused(signatures.top_k, (2, 9), 10, 1) == "k = 10 is not in 0..9, the extent of axis 1"
    assert refused(signatures.top_k, (), 1, 0) == "cannot take the top k of a scalar"
