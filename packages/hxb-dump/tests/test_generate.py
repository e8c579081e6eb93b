"""A module's generate entry point (`fixtures/generate.hxb`): the loop, the step's roles by
index and name, and the cache pairs the loop keeps as its state; `--json` holds the same."""

from __future__ import annotations

import json

from conftest import block
from dump_samples import FIXTURES

MODULE = FIXTURES / "generate.hxb"


def test_the_loop_its_roles_and_its_state_are_listed(dump):
    r = dump(MODULE)
    assert r.rc == 0, r.err
    assert block(r.out, "generate  (1)") == [
        "generate  (1)",
        "  generate(input_ids, max_new_tokens) -> (sequences): greedy decode loop over main, "
        "eos 6, at most 32 positions",
        "    prefill    main on the prompt (past 0)",
        "    loop       argmax of the last logits; main on it (seq 1); until max_new_tokens or "
        "eos",
        "    ids        input 0 'input_ids'",
        "    mask       input 1 'attention_mask'",
        "    positions  input 2 'position_ids'",
        "    logits     output 0 'logits'",
        "    state      cache 0: input 3 'past_key_values.0.key' <- output 1 'present.0.key'",
        "    state      cache 1: input 4 'past_key_values.0.value' <- output 2 "
        "'present.0.value'",
        "    state      cache 2: input 5 'past_key_values.1.key' <- output 3 'present.1.key'",
        "    state      cache 3: input 6 'past_key_values.1.value' <- output 4 "
        "'present.1.value'",
    ]


def test_json_holds_the_generation(dump):
    (g,) = json.loads(dump(MODULE, "--json").out)["generations"]
    assert (g["name"], g["step"], g["eos"], g["max_length"]) == ("generate", "main", 6, 32)
    assert g["positions"] == {"index": 2, "name": "position_ids"}
    assert g["cache"][3] == {"past": {"index": 6, "name": "past_key_values.1.value"},
                             "present": {"index": 4, "name": "present.1.value"}}
