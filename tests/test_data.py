"""Shipped data: parameter counts on the meta device, the dataset, the tokenizer, loss masking."""
import json

import pytest

from cookbook.data import IGNORE_INDEX, format_prompt, load_records, load_tokenizer, sample_order, tokenize
from cookbook.models import DATASET_PATH, ModelNotFoundError, model_spec, shipped_models


@pytest.mark.parametrize("name,count", [("qwen-14b", 14_167_290_880), ("llama-7b", 6_738_415_616),
                                        ("qwen2.5-7b", 7_615_616_512), ("qwen2.5-14b", 14_770_033_664)])
def test_shipped_parameter_counts(name, count):
    assert model_spec(name).num_params == count


def test_qwen14b_count_by_hand():
    h, f, L, V = 5120, 13696, 40, 152064
    per_layer = 3 * (h * h + h) + h * h + 3 * h * f + 2 * h  # q,k,v with bias; o; gate/up/down; 2 norms
    assert model_spec("qwen-14b").num_params == L * per_layer + 2 * V * h + h


def test_tiny_models_are_small_and_match_tokenizer():
    tok = load_tokenizer()
    for name in ("tiny-qwen2", "tiny-llama"):
        spec = model_spec(name)
        assert 100_000 < spec.num_params < 1_000_000
        assert spec.vocab_size == len(tok)
    assert set(shipped_models()) >= {"tiny-qwen2", "tiny-llama", "qwen-14b", "llama-7b", "qwen2.5-7b", "qwen2.5-14b"}


def test_unknown_model_clear_error():
    with pytest.raises(ModelNotFoundError, match="not a shipped name"):
        model_spec("nobody/nothing-7b")


def test_dataset_has_1000_varied_records():
    rows = [json.loads(l) for l in DATASET_PATH.read_text().splitlines()]
    assert len(rows) >= 1000
    assert all(set(r) == {"instruction", "input", "output"} for r in rows)
    assert len({r["instruction"] for r in rows}) >= 30
    assert len({(r["instruction"], r["input"]) for r in rows}) == len(rows)


def test_loss_only_on_response_tokens():
    tok = load_tokenizer()
    rec = {"instruction": "Reverse the letters of the word.", "input": "stone", "output": "enots"}
    data = tokenize([rec], tok, 512)
    ids, labels = data.input_ids[0], data.labels[0]
    n_prompt = len(tok(format_prompt(rec["instruction"], rec["input"]), add_special_tokens=False)["input_ids"]) + 1
    assert labels[:n_prompt] == [IGNORE_INDEX] * n_prompt
    assert labels[n_prompt:] == ids[n_prompt:]
    assert tok.decode(ids[n_prompt:-1]) == "enots" and ids[-1] == tok.eos_token_id


def test_truncation_counted():
    tok = load_tokenizer()
    data = tokenize(load_records(), tok, 24)
    assert data.num_truncated > 0 and max(len(x) for x in data.input_ids) == 24


def test_data_order_is_a_function_of_the_step():
    a = [sample_order(100, 7, s, m, r, 2, 2, 2) for s in range(3) for m in range(2) for r in range(2)]
    flat = [i for batch in a for i in batch]
    assert len(flat) == 24 and len(set(flat[:100])) == len(flat[:100])  # no repeats within an epoch
    assert sample_order(100, 7, 2, 1, 1, 2, 2, 2) == a[-1]
