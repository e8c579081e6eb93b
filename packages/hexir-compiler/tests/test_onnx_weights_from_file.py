"""A model file's weights are read from disk one initializer at a time: `load_model` parses
the file with its big initializers as external-data references to their own bytes, a model
saved with external data keeps its references, and the importer reads each tensor when it
makes its constant (`frontend.onnx_external`). The values are those `onnx.load` gives, and
every damaged file or reference is one line."""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data

import hexir_compiler
import hexir_runtime
from hexir_compiler import cli
from hexir_compiler.frontend import onnx as frontend
from hexir_compiler.frontend import onnx_external

BIG = frontend._IN_PLACE  # the bytes from which an initializer stays on disk


def _values(model, path) -> dict[str, np.ndarray]:
    """Each initializer's values as the importer reads them (`Importer._initializer`)."""
    return {t.name: onnx_external.read(t, frontend.DTYPES[t.data_type], path)
            if t.data_location == TensorProto.EXTERNAL else numpy_helper.to_array(t)
            for t in model.graph.initializer}


def _expected(path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def _same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert got.keys() == expected.keys()
    for name, array in expected.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array, err_msg=name)


def _weights():
    rng = np.random.default_rng(7)
    return [numpy_helper.from_array(rng.standard_normal((128, 256)).astype(np.float32), "w1"),
            numpy_helper.from_array(np.arange(3), "shape"),
            numpy_helper.from_array(rng.standard_normal((256, 64)).astype(np.float32), "w2"),
            numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "small"),
            numpy_helper.from_array(rng.integers(-9, 9, 9000), "ints"),
            numpy_helper.from_array(rng.standard_normal(9000), "doubles"),
            numpy_helper.from_array(rng.integers(0, 2, 70000).astype(bool), "flags"),
            numpy_helper.from_array(np.zeros((0, 4), np.float32), "empty")]


def _mlp(initializers, opset=18):
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("MatMul", ["h", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 128])],
                              [helper.make_tensor_value_info("y", 1, [2, 64])],
                              list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(path, x):
    return hexir_runtime.load(hexir_compiler.compile(path)).main(x)


def test_a_files_big_initializers_are_references_to_their_bytes_in_it(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_mlp(_weights()), str(path))
    model = frontend.load_model(path)
    size = 0
    for t in model.graph.initializer:
        big = t.name in ("w1", "w2", "ints", "doubles", "flags")
        # the protobuf holds none of a big initializer's bytes: they are read when imported
        assert t.HasField("raw_data") != big and (t.data_location == TensorProto.EXTERNAL) == big
        size += len(numpy_helper.to_array(t).tobytes()) if not big else 0
    assert model.ByteSize() < size + 4096
    _same(_values(model, path), _expected(path))
    # ONNX's own loader reads the references as the same values
    load_external_data_for_model(model, str(tmp_path))
    _same({t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, _expected(path))
    x = np.random.default_rng(1).standard_normal((2, 128)).astype(np.float32)
    w = _expected(path)
    np.testing.assert_allclose(_run(path, x), x @ w["w1"] @ w["w2"], rtol=1e-4, atol=1e-4)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def _field(number: int, payload: bytes, length: int | None = None) -> bytes:
    """A length-delimited field; `length`: the length its prefix claims instead."""
    return _varint(number << 3 | 2) + _varint(len(payload) if length is None else length) + \
        payload


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _tensor_fields(array: np.ndarray, name: str, raw: list[bytes]) -> list[bytes]:
    """A float TensorProto's fields, name and dims after its raw_data fields (the last of
    which protobuf keeps)."""
    return [*(_field(9, r) for r in raw), _field(8, name.encode()),
            *(_varint_field(1, d) for d in array.shape), _varint_field(2, 1)]


def test_fields_in_any_order_parse_as_protobuf_parses_them(tmp_path):
    """raw_data before the tensor's name and dims, and twice (the last holds); initializers
    among the nodes and inputs; the graph in two parts (protobuf merges them) before the
    model's versions; a tensor's doc_string and an unknown varint field kept."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 256)).astype(np.float32)
    b = rng.standard_normal((256, 64)).astype(np.float32)
    decoy = rng.standard_normal(40000).astype(np.float32)
    first = _tensor_fields(a, "w1", [decoy.tobytes(), a.tobytes()])
    second = [_field(12, b"the second weight"), _varint_field(99, 5),
              *_tensor_fields(b, "w2", [b.tobytes()])]
    model = _mlp([])
    node1, node2 = (n.SerializeToString() for n in model.graph.node)
    x, y = model.graph.input[0].SerializeToString(), model.graph.output[0].SerializeToString()
    part1 = _field(1, node1) + _field(5, b"".join(first)) + _field(11, x)
    part2 = _field(5, b"".join(reversed(second))) + _field(1, node2) + _field(2, b"g") + \
        _field(12, y)
    opset = model.opset_import[0].SerializeToString()
    data = _field(7, part1) + _varint_field(1, 8) + _field(7, part2) + _field(8, opset)
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    loaded = frontend.load_model(path)
    assert [t.HasField("raw_data") for t in loaded.graph.initializer] == [False, False]
    assert loaded.graph.initializer[1].doc_string == "the second weight"
    got = _values(loaded, path)
    _same(got, _expected(path))
    np.testing.assert_array_equal(got["w1"], a)
    # and the rest of the model is what protobuf made of the whole file
    whole = onnx.ModelProto.FromString(data)
    for t in (*whole.graph.initializer, *loaded.graph.initializer):
        t.ClearField("raw_data")
        t.ClearField("data_location")
        del t.external_data[:]
    assert loaded == whole


def test_a_model_saved_with_external_data_is_read_from_it_when_imported(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save_model(_mlp(_weights()), str(path), save_as_external_data=True,
                    location="weights.bin", size_threshold=0)
    model = frontend.load_model(path)
    assert all(t.data_location == TensorProto.EXTERNAL and not t.HasField("raw_data")
               for t in model.graph.initializer if t.name != "empty")
    _same(_values(model, path), _expected(path))
    x = np.ones((2, 128), np.float32)
    w = _expected(path)
    np.testing.assert_allclose(_run(path, x), x @ w["w1"] @ w["w2"], rtol=1e-4, atol=1e-4)


def test_an_old_opset_model_keeps_its_references_through_the_upgrade(tmp_path):
    """The version converter copies an external tensor as it is; the importer then reads it
    from the model's file."""
    w = np.arange(128 * 256, dtype=np.float32).reshape(128, 256) / 1e4
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Unsqueeze", ["h"], ["y"], axes=[0])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 128])],
                              [helper.make_tensor_value_info("y", 1, [1, 2, 256])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    path = tmp_path / "old.onnx"
    onnx.save(model, str(path))
    x = np.ones((2, 128), np.float32)
    np.testing.assert_allclose(_run(path, x), (x @ w)[None], rtol=1e-5)


def test_a_constants_external_data_is_loaded_next_to_the_model(tmp_path, monkeypatch):
    c = np.arange(20000, dtype=np.float32)
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c)),
             helper.make_node("Add", ["x", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [20000])],
                              [helper.make_tensor_value_info("y", 1, [20000])])
    path = tmp_path / "m.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]),
                    str(path), save_as_external_data=True, location="c.bin", size_threshold=0,
                    convert_attribute=True)
    assert frontend.load_model(path).graph.node[0].attribute[0].t.HasField("raw_data")
    monkeypatch.chdir(tmp_path.parent)
    np.testing.assert_array_equal(_run(path, np.ones(20000, np.float32)), c + 1)


def _refused(path, capsys) -> str:
    out = path.parent / "out.hxb"
    assert cli.main(["-emit=hxb", "-o", str(out), str(path)]) == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and not out.exists()
    return err


def test_a_truncated_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    data = _mlp(_weights()).SerializeToString()
    path.write_bytes(data[:len(data) // 2])  # in the middle of the weights
    err = _refused(path, capsys)
    assert "m.onnx: not an ONNX model (the protobuf does not parse: field 7's value" in err
    assert "past the end of its message" in err


def test_a_length_past_its_message_is_one_line(tmp_path, capsys):
    a = np.ones(20000, np.float32)
    tensor = _field(8, b"w") + _varint_field(1, 20000) + _varint_field(2, 1) + \
        _field(9, a.tobytes(), length=a.nbytes + 16)
    path = tmp_path / "m.onnx"
    path.write_bytes(_varint_field(1, 8) + _field(7, _field(5, tensor) + _field(2, b"g")))
    err = _refused(path, capsys)
    assert "not an ONNX model (the protobuf does not parse: field 9's value at byte" in err
    assert "past the end of its message" in err


def _external_model(tmp_path, location, offset=0, length=64, dims=(4, 4)):
    """m.onnx in tmp_path/model whose 'w' is at `location`; w.bin (64 bytes) beside it."""
    directory = tmp_path / "model"
    directory.mkdir()
    (tmp_path / "w.bin").write_bytes(np.ones(16, np.float32).tobytes())
    (directory / "w.bin").write_bytes(np.ones(16, np.float32).tobytes())
    w = numpy_helper.from_array(np.ones(dims, np.float32), "w")
    set_external_data(w, location, offset, length)
    w.ClearField("raw_data")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", 1, list(dims))],
        [helper.make_tensor_value_info("y", 1, list(dims))], [w]),
        opset_imports=[helper.make_opsetid("", 18)])
    path = directory / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("where, message", [
    (dict(location="../w.bin"),
     "initializer 'w' (shape [4, 4]): its external data location '../w.bin' has '..' in "
     "it"),
    (dict(location="sub/../../w.bin"), "has '..' in it"),
    (dict(location="w\0.bin"), "has a NUL character"),
    (dict(location="escape/w.bin"),
     "its external data location 'escape/w.bin' leads out of the model's directory (through a "
     "symbolic link)"),
    (dict(location="."), "its external data location '.' is not a regular file"),
    (dict(location="absolute"), "is an absolute path; it must be relative to the model's "
                                "directory"),
    (dict(location="link.bin"), "its external data location 'link.bin' is a symbolic link"),
    (dict(location="w.bin", offset=32, length=64),
     "its external data (bytes 32-96) lies past the end of 'w.bin', which has 64 bytes"),
    (dict(location="w.bin", offset=80, length=None),
     "its external data (byte 80 on) lies past the end of 'w.bin', which has 64 bytes"),
    (dict(location="w.bin", length=60),
     "its external data is 60 bytes; shape [4, 4] of float32 needs 64"),
    (dict(location="w.bin", length=64, dims=(4, 8)),
     "its external data is 64 bytes; shape [4, 8] of float32 needs 128"),
    (dict(location="gone.bin"),
     "cannot read its external data 'gone.bin': No such file or directory"),
])
def test_a_bad_external_reference_is_one_line(tmp_path, capsys, where, message):
    if where["location"] == "absolute":
        where = {**where, "location": str(tmp_path / "w.bin")}
    path = _external_model(tmp_path, **where)
    os.symlink(tmp_path / "w.bin", path.parent / "link.bin")
    os.symlink(tmp_path, path.parent / "escape")
    err = _refused(path, capsys)
    assert f"{path}: initializer 'w' (shape [" in err and message in err


def test_a_reference_to_a_second_hard_link_is_refused(tmp_path, capsys):
    path = _external_model(tmp_path, "w.bin")
    os.link(path.parent / "w.bin", tmp_path / "elsewhere.bin")
    assert "its external data location 'w.bin' is a file with 2 hard links" in \
        _refused(path, capsys)


def test_a_models_own_file_may_hold_its_data_even_through_a_symbolic_link(tmp_path):
    """As a model hub's cache links its files: the file named on the command line is the
    model's own, wherever it lies."""
    blob = tmp_path / "blobs" / "0123"
    blob.parent.mkdir()
    onnx.save(_mlp(_weights()), str(blob))
    path = tmp_path / "m.onnx"
    path.symlink_to(blob)
    model = frontend.load_model(path)
    assert {e.value for t in model.graph.initializer for e in t.external_data
            if e.key == "location"} == {"m.onnx"}
    _same(_values(model, path), _expected(blob))
