"""Params decode to names for every kind that has them, and refuse what does not fit."""

from __future__ import annotations

import pytest
from hexir_format import KernelKind as K

from hxb_dump.errors import DumpError
from hxb_dump.params import decode, render


@pytest.mark.parametrize("kind, params, rank, named, text", [
    (K.GELU, (0.0,), 2, {"approximate": "erf"}, "approximate=erf"),
    (K.GELU, (1.0,), 2, {"approximate": "tanh"}, "approximate=tanh"),
    (K.SOFTMAX, (1.0,), 2, {"axis": 1}, "axis=1"),
    (K.LAYER_NORM, (1e-5,), 3, {"epsilon": 1e-5}, "epsilon=1e-05"),
    (K.TRANSPOSE, (0.0, 2.0, 1.0, 3.0), 4, {"permutation": [0, 2, 1, 3]},
     "permutation=0,2,1,3"),
    (K.REDUCE_SUM, (1.0, 0.0), 2, {"keepdims": True, "axes": [0]}, "keepdims=true axes=0"),
    (K.REDUCE_MEAN, (0.0, 1.0, 2.0), 3, {"keepdims": False, "axes": [1, 2]},
     "keepdims=false axes=1,2"),
    (K.REDUCE_MAX, (0.0,), 2, {"keepdims": False, "axes": []}, "keepdims=false axes=none"),
    (K.MATMUL, (), 2, {}, ""),
    (K.RESHAPE, (), 3, {}, ""),
])
def test_decode_and_render(kind, params, rank, named, text):
    assert decode(kind, params, rank) == named
    assert render(named) == text


@pytest.mark.parametrize("kind, params, rank, message", [
    (K.GELU, (2.0,), 2, "gelu approximate is 2; expected 0 (erf) or 1 (tanh)"),
    (K.GELU, (), 2, "gelu has 0 params; expected 1"),
    (K.SOFTMAX, (2.0,), 2, "softmax axis 2 is not an axis of its rank-2 input"),
    (K.SOFTMAX, (-1.0,), 2, "softmax axis -1 is not an axis"),
    (K.SOFTMAX, (0.5,), 2, "softmax axis 0.5 is not an axis"),
    (K.LAYER_NORM, (float("inf"),), 2, "layer_norm epsilon is inf; expected a finite value >= 0"),
    (K.TRANSPOSE, (0.0, 1.0), 3, "transpose has 2 params; expected 3"),
    (K.TRANSPOSE, (0.0, 0.0), 2, "transpose permutation 0,0 is not a permutation of 0..1"),
    (K.REDUCE_SUM, (), 2, "reduce_sum has no params"),
    (K.REDUCE_MAX, (0.0, 1.0, 1.0), 2, "reduce_max axes 1,1 name an axis twice"),
    (K.ADD, (1.0,), 2, "add has 1 params; expected 0"),
    (K.GELU, (1.0, 0.0), 2, "gelu has 2 params; expected 1"),
])
def test_refuses(kind, params, rank, message):
    with pytest.raises(DumpError) as caught:
        decode(kind, params, rank)
    assert str(caught.value).startswith(message)
