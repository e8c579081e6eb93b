"""Params decode to names for every kind that has them; params that do not fit their kind (the
shared signature rule) are listed raw, marked not valid."""

from __future__ import annotations

import pytest

from hexir_format import KernelKind as K
from hxb_dump.params import decode, render


@pytest.mark.parametrize("kind, params, named, text", [
    (K.GELU, (0.0,), {"approximate": "erf"}, "approximate=erf"),
    (K.GELU, (), {"approximate": "erf"}, "approximate=erf"),
    (K.GELU, (1.0,), {"approximate": "tanh"}, "approximate=tanh"),
    (K.SOFTMAX, (1.0,), {"axis": 1}, "axis=1"),
    (K.LAYER_NORM, (1e-5,), {"epsilon": 1e-5}, "epsilon=1e-05"),
    (K.TRANSPOSE, (0.0, 2.0, 1.0, 3.0), {"permutation": [0, 2, 1, 3]}, "permutation=0,2,1,3"),
    (K.REDUCE_SUM, (1.0, 0.0), {"keepdims": True, "axes": [0]}, "keepdims=true axes=0"),
    (K.REDUCE_MEAN, (0.0, 1.0, 2.0), {"keepdims": False, "axes": [1, 2]},
     "keepdims=false axes=1,2"),
    (K.REDUCE_MAX, (0.0,), {"keepdims": False, "axes": []}, "keepdims=false axes=none"),
    (K.MATMUL, (), {}, ""),
    (K.MAP, (), {}, ""),
])
def test_decode_and_render(kind, params, named, text):
    assert decode(kind, params) == named
    assert render(named) == text


def test_params_that_do_not_fit_are_listed_raw(tmp_path):
    import hexir_format as hf
    from hexir_format import Command, Device, DType, Executable, Function, Slot
    from hexir_format import TensorType as T
    from hxb_dump.facts import module_facts

    m2 = T(DType.F64, (2, 2))
    exe = Executable("softmax_0", K.SOFTMAX, Device.CPU, (m2, m2), (2.0,))
    module = hf.Module(4, (Function("main", (Command.input(0, 0), Command.alloc(1, 32),
                                             Command.dispatch(0, (0, 1)),
                                             Command.output(1, 0))),), b"", (exe,),
                       (Slot(Device.CPU, m2),) * 2)
    (facts,) = module_facts(module, values=False)["executables"]
    assert facts["params"] is None and facts["raw_params"] == [2.0]
