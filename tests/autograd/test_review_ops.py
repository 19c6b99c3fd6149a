"""Regressions from an ops review: negative transpose axes, integer leaves, 1-D matmul transposes, tensor
exponents, and capture dumps of tensors whose names Graphviz must not read as syntax."""

from __future__ import annotations

import re

import numpy as np
import pytest

import distvlog as dv

from gradcheck import check_gradients

rng = np.random.default_rng(7)


def r(*shape: int) -> np.ndarray:
    return rng.uniform(-2.0, 2.0, shape)


# -- transpose: negative axes in perm --------------------------------------------------------------------
@pytest.mark.parametrize("shape,perm", [((3, 3), [-1, 0]), ((3, 3, 3), [0, -1, 1]), ((2, 3, 4), [0, -1, 1]),
                                        ((2, 3, 4), [-1, 0, 1]), ((4, 2), [-1, 0])], ids=str)
def test_transpose_with_negative_axes(shape, perm):
    check_gradients(lambda x: dv.transpose(x, perm), r(*shape))
    check_gradients(lambda x: x.transpose(perm), r(*shape))


@pytest.mark.parametrize("perm", [[0, 1], [0, 0, 1], [0, -3, 1], [0, 1, 3], [2, -1, 0]], ids=str)
def test_transpose_refuses_a_perm_that_is_not_a_permutation_of_the_axes(perm):
    with pytest.raises(ValueError, match=r"transpose: perm must be a permutation of the 3 axes of x .*got perm="
                                         + re.escape(str(perm))):
        dv.transpose(dv.to_tensor(r(2, 3, 4)), perm)
