"""The -placement option and the hexir-partition pass, through the Python API."""

import pytest

from hexir_compiler.dialects import context
from hexir_compiler.mlir import ir
from hexir_compiler.placement import PlacementError, parse_placement
from hexir_compiler.transforms import hexir_insert_transfers, hexir_partition


def test_entries_split_on_commas_and_gpu_is_cuda():
    assert parse_placement(["hexir.linear=gpu,hexir.relu=cpu", "hexir.add=cuda"]) == {
        "hexir.linear": "cuda",
        "hexir.relu": "cpu",
        "hexir.add": "cuda",
    }


FORM = "is not of the form <op-name>=<device> or <device>"


@pytest.mark.parametrize(
    "entry, message",
    [
        ("hexir.linear", f"invalid -placement entry 'hexir.linear' {FORM}"),
        ("hexir.linear=", f"invalid -placement entry 'hexir.linear=' {FORM}"),
        ("=cuda", f"invalid -placement entry '=cuda' {FORM}"),
        (
            "hexir.linear=tpu",
            (
                "invalid -placement entry 'hexir.linear=tpu': 'tpu' is not a device; "
                "expected cpu, cuda or gpu"
            ),
        ),
        (
            "hexir.frob=cpu",
            "invalid -placement entry 'hexir.frob=cpu': 'hexir.frob' is not a placeable op",
        ),
        (
            "hexir.print=cuda",
            "invalid -placement entry 'hexir.print=cuda': 'hexir.print' is not a placeable op",
        ),
    ],
)
def test_bad_entries(entry, message):
    with pytest.raises(PlacementError) as err:
        parse_placement([entry])
    assert str(err.value) == message


PROGRAM = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = "hexir.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %b = "hexir.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %c = "hexir.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %d = "hexir.add"(%b, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %d : tensor<4xf32>
}
"""


def devices(module: ir.Module) -> list[tuple[str, str]]:
    body = module.body.operations[0].regions[0].blocks[0]
    out = []
    for op in body.operations:
        op = op.operation
        if op.name == "hexir.transfer":
            out.append((op.name, f"{op.attributes['src'].value}->{op.attributes['dst'].value}"))
        elif "device" in op.attributes:
            out.append((op.name, op.attributes["device"].value))
    return out


def test_partition_then_transfers_move_each_value_once_per_device():
    with context():
        module = ir.Module.parse(PROGRAM)
        hexir_partition.run(module, {"hexir.exp": "cuda", "hexir.neg": "cuda"})
        hexir_insert_transfers.run(module)
        module.operation.verify()
        assert devices(module) == [
            ("hexir.relu", "cpu"),
            ("hexir.transfer", "cpu->cuda"),  # %a feeds exp and neg on cuda: one upload
            ("hexir.exp", "cuda"),
            ("hexir.transfer", "cuda->cpu"),  # each copy right after its producer
            ("hexir.neg", "cuda"),
            ("hexir.transfer", "cuda->cpu"),
            ("hexir.add", "cpu"),
        ]
        assert str(module.operation.attributes["hexir.targets"]) == '["cpu", "cuda"]'


def test_the_passes_run_in_an_mlir_pass_manager_next_to_upstream_passes():
    from hexir_compiler.mlir import passmanager

    with context():
        module = ir.Module.parse(PROGRAM)
        pm = passmanager.PassManager()
        pm.add(hexir_partition.make_pass({"hexir.exp": "cuda"}), name=hexir_partition.PASS_NAME)
        pm.add(hexir_insert_transfers.make_pass(), name=hexir_insert_transfers.PASS_NAME)
        pm.add("cse")
        pm.run(module.operation)
        assert [d for _, d in devices(module)] == [
            "cpu",
            "cpu->cuda",
            "cuda",
            "cuda->cpu",
            "cpu",
            "cpu",
        ]


@pytest.mark.parametrize("entry", ["cuda", "*=cuda", "gpu", "*=gpu"])
def test_a_bare_device_or_star_is_the_default_for_every_op_not_named(entry):
    placement = parse_placement([f"{entry},hexir.add=cpu"])
    assert placement == {"*": "cuda", "hexir.add": "cpu"}
    with context():
        module = ir.Module.parse(PROGRAM)
        hexir_partition.run(module, placement)
        placed = {name: device for name, device in devices(module)}
        assert placed == {"hexir.relu": "cuda", "hexir.exp": "cuda", "hexir.neg": "cuda",
                          "hexir.add": "cpu"}


def test_a_device_written_in_the_program_beats_the_default_but_not_a_named_op():
    program = PROGRAM.replace('"hexir.exp"(%a)', '"hexir.exp"(%a) {device = "cpu"}')
    with context():
        module = ir.Module.parse(program)
        hexir_partition.run(module, {"*": "cuda", "hexir.neg": "cpu"})
        placed = {name: device for name, device in devices(module)}
        assert placed == {"hexir.relu": "cuda", "hexir.exp": "cpu", "hexir.neg": "cpu",
                          "hexir.add": "cuda"}
