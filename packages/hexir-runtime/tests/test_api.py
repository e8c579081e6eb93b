"""The Python API: load, run, entry points, signatures, inputs, lifetime."""

import mmap

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
import modules
from conftest import FIXTURES


def test_builtin_fixture_prints_the_product(builtin_hxb):
    with hr.load(builtin_hxb) as m:
        (printed,) = m.run("main")
        assert printed.tolist() == [[8.0, 17.0], [12.0, 14.0]]
        assert m.main() is None  # v3: no outputs
        assert m.version == 3 and [s.name for s in m.layout.sections] == [
            "symbols", "program", "rodata", "executables"]


def test_reprs(builtin_hxb, tmp_path):
    with hr.load(builtin_hxb) as m:
        assert repr(m) == f"<hexir_runtime.Module '{builtin_hxb}' v3 on cpu: main() -> ()>"
        assert repr(m.devices[0]) == "<hexir_runtime.hal.Device 'cpu' kind=cpu>"
    assert "closed" in repr(m)
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    with hr.load(path) as m:
        assert repr(m.main) == "<hexir_runtime.EntryPoint main(2x3xf32) -> (2x4xf32)>"
        assert "main(2x3xf32) -> (2x4xf32)" in repr(m)


@pytest.mark.parametrize("dtype", [hf.DType.F32, hf.DType.F64])
def test_inputs_and_outputs(tmp_path, dtype):
    module = modules.mlp(dtype=dtype)
    path = modules.write(tmp_path, "mlp.hxb", module)
    rng = np.random.default_rng(0)
    with hr.load(path) as m:
        for _ in range(3):
            x = rng.standard_normal((2, 3)).astype(dtype.numpy)
            y = m.main(x)
            assert y.dtype == np.dtype(dtype.numpy) and y.shape == (2, 4)
            np.testing.assert_allclose(y, modules.mlp_reference(x, module), rtol=1e-6)
            np.testing.assert_array_equal(m["main"](x), y)
            assert m.run("main", x)[0].tolist() == y.tolist()  # PRINT of the same slot


def test_several_outputs_are_a_tuple(tmp_path):
    from fake_driver import FakeDriver
    module = modules.hetero()
    path = modules.write(tmp_path, "hetero.hxb", module)
    with hr.load(path, device="cuda", driver=FakeDriver()) as m:
        relu, product = m.main(modules.A)
    assert product.tolist() == (modules.A @ modules.W).tolist()
    assert relu.tolist() == np.maximum(modules.A @ modules.W, 0).tolist()


@pytest.mark.parametrize("args,message", [
    ((), r"main takes 1 input \(2x3xf32\), got 0"),
    ((np.zeros((2, 3)), np.zeros(1)), "main takes 1 input"),
    ((np.zeros((2, 3)),), "input 0 of main: expected 2x3xf32, got a float64 array of shape 2x3"),
    ((np.zeros((2, 3), np.int32),), "expected 2x3xf32, got an int32 array of shape 2x3"),
    ((np.zeros((2, 3), np.uint8),), "expected 2x3xf32, got a uint8 array of shape 2x3"),
    ((np.zeros((3, 2), np.float32),), "input 0 of main: expected 2x3xf32, got shape 3x2"),
    ((["a", "b"],), "input 0 of main: expected 2x3xf32, got a list numpy cannot convert"),
])
def test_bad_inputs_are_one_line_errors(tmp_path, args, message):
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    with hr.load(path) as m, pytest.raises(hr.InputError, match=message) as info:
        m.main(*args)
    assert "\n" not in str(info.value)


def test_lists_are_converted_to_the_signature_dtype(tmp_path):
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    with hr.load(path) as m:
        assert m.main([[1, 2, 3], [4, 5, 6]]).dtype == np.float32


def test_an_input_of_the_other_byte_order_gives_the_same_values(tmp_path):
    """A big-endian float32 array is a float32 array to numpy (`dtype.name`), but its bytes
    are not this machine's: the runtime converts it rather than read its bytes as they are."""
    path = modules.write(tmp_path, "mlp.hxb", modules.mlp())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with hr.load(path) as m:
        np.testing.assert_array_equal(m.main(x.astype(">f4")), m.main(x))


def test_unknown_entry(builtin_hxb):
    with hr.load(builtin_hxb) as m:
        with pytest.raises(hr.EntryNotFound, match=r"no entry point 'nosuchfunc' in .* \(it has: "
                                                   r"main\)"):
            m.run("nosuchfunc")
        with pytest.raises(hr.EntryNotFound, match=r"no entry point 'forward' in .* \(it has: "
                                                   r"main\)") as info:
            m.forward  # noqa: B018
        assert isinstance(info.value, AttributeError) and not hasattr(m, "forward")
        with pytest.raises(AttributeError, match="has no attribute '_secret'") as info:
            m._secret  # noqa: B018
        assert not isinstance(info.value, hr.EntryNotFound)
        assert "main" in m and "nosuchfunc" not in m


def test_a_module_loads_from_its_bytes_and_refuses_other_types_in_one_line(builtin_hxb):
    data = builtin_hxb.read_bytes()
    for source in (data, bytearray(data), memoryview(data)):
        with hr.load(source) as m:
            assert m.path == "<memory>" and m.run()[0].tolist() == [[8, 17], [12, 14]]
    for bad in (12, None, [data]):
        with pytest.raises(hr.LoadError) as info:
            hr.load(bad)
        assert "\n" not in str(info.value) and len(str(info.value)) < 100
    with pytest.raises(hr.LoadError, match="invalid module: bad magic") as info:
        hr.load(b"x" * 2_000_000)
    assert len(str(info.value)) < 200  # never the bytes themselves


def test_constants_are_views_of_the_mapping_bound_once(builtin_hxb):
    with hr.load(builtin_hxb) as m:
        m.run()
        m.run()
        constants = list(m._resident.constants.values())
        assert len(constants) == 2
        mapping = np.frombuffer(m._mapped._map, dtype=np.uint8)
        start = mapping.__array_interface__["data"][0]
        for buffer in constants:
            address = buffer.handle.__array_interface__["data"][0]
            assert start <= address < start + len(mapping)
            assert not buffer.handle.flags.writeable
        del mapping


def test_close_unmaps_and_refuses_to_run(builtin_hxb):
    m = hr.load(builtin_hxb)
    mapping = m._mapped._map
    (printed,) = m.run()
    m.close()
    m.close()
    assert m.closed and mapping.closed
    assert printed.tolist() == [[8.0, 17.0], [12.0, 14.0]]  # results are copies
    with pytest.raises(hr.ClosedError, match="is closed"):
        m.run()


def test_close_with_a_live_view_defers_the_unmap(builtin_hxb):
    m = hr.load(builtin_hxb)
    view = m._resident.plan.module.rodata[:8]  # a view that escaped
    mapping = m._mapped._map
    m.close()
    assert not mapping.closed and bytes(view) == np.float64(3.0).tobytes()
    view.release()


def test_load_errors(tmp_path):
    with pytest.raises(hr.LoadError, match="io error: No such file or directory"):
        hr.load(tmp_path / "missing.hxb")
    (tmp_path / "empty.hxb").write_bytes(b"")
    with pytest.raises(hr.LoadError, match="invalid module: the file is empty"):
        hr.load(tmp_path / "empty.hxb")
    with pytest.raises(hr.LoadError, match="io error: it is a directory, not a regular file"):
        hr.load(tmp_path)
    with pytest.raises(hr.DeviceError, match="'tpu' is not a device"):
        hr.load(tmp_path / "missing.hxb", device="tpu")


def test_allocation_cap_is_a_load_option(builtin_hxb):
    with pytest.raises(hr.ValidationError, match="more than the cap of 16 bytes"):
        hr.load(builtin_hxb, max_alloc_bytes=16)


def test_validation_error_names_entry_command_and_field(tmp_path):
    module = modules.builtin()
    main = module.functions[0]
    bad = hf.Function("main", (*main.commands[:4], hf.Command.print(7, 2, 2)))
    path = modules.write(tmp_path, "bad.hxb", hf.Module(3, (bad,), module.rodata,
                                                         module.executables))
    with pytest.raises(hr.ValidationError) as info:
        hr.load(path)
    e = info.value
    assert (e.entry, e.command, e.field, e.offset) == ("main", 4, "slot", 296)
    assert isinstance(e, hf.ValidationError)  # the format's verdict, which hxb-dump shares
    assert str(e) == ("main: command 4 (print at offset 296), slot: slot 7 is read before "
                      "anything is bound to it")


def test_mapping_is_read_only(builtin_hxb):
    with hr.load(builtin_hxb) as m:
        assert m._mapped._map.__class__ is mmap.mmap
        with pytest.raises(TypeError):
            m._mapped._map[0] = 0


def test_a_buffer_placed_on_cuda_without_any_kernel_there_is_refused(tmp_path):
    t = hf.TensorType(hf.DType.F64, (2,))
    slots = (hf.Slot(hf.Device.CPU, t), hf.Slot(hf.Device.CUDA, t), hf.Slot(hf.Device.CPU, t))
    main = hf.Function("main", (hf.Command.input(0, 0), hf.Command.copy(1, 0),
                                hf.Command.copy(2, 1), hf.Command.output(2, 0)))
    path = modules.write(tmp_path, "copy.hxb", hf.Module(4, (main,), b"", (), slots))
    with hr.load(path) as m, pytest.raises(hr.PlacementError) as info:
        m.main(np.ones(2))
    assert str(info.value) == ("slot 1 (command 1, copy) is placed on cuda but the active device "
                               "is cpu: run it with --device=cuda (device='cuda' in Python), or "
                               "compile it for the cpu")


def test_cuda_is_made_available_not_imposed(builtin_hxb):
    """A module that never needs cuda runs on the cpu with device="cuda", and asks nothing of
    the cuda driver; one that does needs it (the fake driver counts the context made)."""
    from fake_driver import FakeDriver

    fake = FakeDriver()
    with hr.load(builtin_hxb, device="cuda", driver=fake) as m:
        assert [d.kind for d in m.devices] == [hf.Device.CPU]
        assert m.run()[0].tolist() == [[8, 17], [12, 14]]
    assert sum(fake.calls.values()) == 0
    cuda = builtin_hxb.parent / "builtin-cuda.hxb"
    fake = FakeDriver()
    with hr.load(cuda, device="cuda", driver=fake) as m:
        assert [d.kind for d in m.devices] == [hf.Device.CPU, hf.Device.CUDA]
    assert fake.calls["cuInit"] == fake.calls["cuDevicePrimaryCtxRetain"] == 1


class _Raises:
    """An input whose own array protocol raises."""

    def __init__(self, protocol: str):
        self.protocol = protocol

    def __getattr__(self, name):
        if name == self.protocol:
            raise RuntimeError(f"{name} is broken")
        raise AttributeError(name)

    def __array__(self, dtype=None, copy=None):
        if self.protocol == "__array__":
            raise RuntimeError("__array__ is broken")
        return np.zeros((2, 2))


@pytest.mark.parametrize("protocol", ["__array__", "__cuda_array_interface__",
                                      "__dlpack_device__"])
def test_an_input_whose_own_protocol_raises_is_an_input_error_naming_it(protocol):
    with hr.load(FIXTURES / "mlp-f32.hxb") as m:
        with pytest.raises(hr.InputError) as e:
            m.main(_Raises(protocol))
        assert str(e.value).startswith("input 0 of main: ") and \
            f"RuntimeError: {protocol} is broken" in str(e.value), str(e.value)
        if protocol != "__array__":  # an out= array is never converted, only asked
            x = np.zeros(m.main.signature.inputs[0].shape, np.float32)
            with pytest.raises(hr.InputError, match=rf"^out\[0\] of main: .*RuntimeError: "
                                                     rf"{protocol} is broken"):
                m.main(x, out=[_Raises(protocol)])
