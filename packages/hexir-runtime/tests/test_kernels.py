"""Validation applies the kernel kinds' signature rule (hexir_format.signatures) before any
kernel runs: what the rule accepts loads, what it refuses is refused naming the executable."""

import pytest

import hexir_format as hf
from hexir_format import (
    Command,
    Device,
    DType,
    Executable,
    Function,
    KernelKind,
    Slot,
    signature_problem,
)
from hexir_format import TensorType as T
from hexir_runtime import validate
from hexir_runtime.errors import ValidationError

K = KernelKind


# ---- validation applies the shared signature rule (hexir_format.signatures) ------------------

def one_kernel(kind, args, params):
    """A v4 module: the inputs -> one kernel -> its destination as the output. The kernel is a
    cuda one, where any kind may be, with an image that only names it: validation touches no
    device and never launches it."""
    *ins, out = args
    commands = (*(Command.input(i, i) for i in range(len(ins))),
                Command.alloc(len(ins), out.nbytes), Command.dispatch(0, tuple(range(len(args)))),
                Command.output(len(ins), 0))
    exe = Executable(f"{kind}_0", kind, Device.CUDA, tuple(args), params,
                     f"// names the kernel only\n.entry {kind}_0\n".encode(), (1, 1, 1),
                     (32, 1, 1))
    return hf.Module(4, (Function("main", commands),), b"", (exe,),
                     tuple(Slot(Device.CUDA, a) for a in args))


X, V = T(DType.F64, (2, 3)), T(DType.F64, (3,))


@pytest.mark.parametrize("kind,args,params", [
    (K.LAYER_NORM, [X, V, V, X], (0.0,)),  # epsilon 0 is allowed
    (K.REDUCE_SUM, [X, T(DType.F64, ())], (0.0,)),  # no axes: every axis
    (K.REDUCE_MAX, [X, T(DType.F64, (1, 1))], (1.0,)),
    (K.GELU, [V, V], ()),  # erf when the param is absent
    (K.SOFTMAX, [X, X], (1.0,)),
])
def test_validation_accepts_what_the_rule_accepts(kind, args, params):
    assert signature_problem(kind, args, params) is None
    assert validate.check_module(one_kernel(kind, args, params)).entries["main"].executables == (0,)


@pytest.mark.parametrize("kind,args,params,message", [
    (K.SOFTMAX, [X, X], (), "softmax has 0 params; expected 1 (the axis)"),  # axis required
    (K.LAYER_NORM, [X, V, V, X], (-1.0,), "layer_norm epsilon is -1"),
    (K.REDUCE_MEAN, [X, X], (0.0,), "reduce_mean of 2x3xf64 gives scalar"),
    (K.GELU, [V, V], (2.0,), "gelu approximate is 2"),
    (K.MATMUL, [X, T(DType.F64, (2, 2)), T(DType.F64, (2, 2))], (),
     "matmul inner dimensions differ: 3 vs 2"),
])
def test_validation_refuses_what_the_rule_refuses(kind, args, params, message):
    problem = signature_problem(kind, args, params)
    assert problem is not None and problem.startswith(message)
    with pytest.raises(ValidationError) as caught:
        validate.check_module(one_kernel(kind, args, params))
    assert str(caught.value) == f"executable 0 ('{kind}_0'), args: {problem}"
