"""Shipped data and the data pipeline: parameter counts on the meta device, the datasets, the tokenizer
and its chat template, each format's tokenization against token lists written out independently,
packing (rows, labels, attention kept within examples), and every bad input's error."""
import json
import os
import statistics

import pytest

from cookbook.data import (IGNORE_INDEX, DataError, format_prompt, load_records, load_tokenizer, make_rows,
                           normalise, packing_attention, parse_fields, sample_order, tokenize)
from cookbook.models import (CHAT_DATASET_PATH, DATASET_PATH, INSTRUCTIONS_PATH, TOKENIZER_DIR, ModelNotFoundError,
                             model_spec, shipped_models)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def enc(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("name,count", [("qwen-14b", 14_167_290_880), ("llama-7b", 6_738_415_616),
                                        ("qwen2.5-7b", 7_615_616_512), ("qwen2.5-14b", 14_770_033_664)])
def test_shipped_parameter_counts(name, count):
    assert model_spec(name).num_params == count


def test_qwen14b_count_by_hand():
    h, f, L, V = 5120, 13696, 40, 152064
    per_layer = 3 * (h * h + h) + h * h + 3 * h * f + 2 * h  # q,k,v with bias; o; gate/up/down; 2 norms
    assert model_spec("qwen-14b").num_params == L * per_layer + 2 * V * h + h


def test_tiny_models_are_small_and_match_tokenizer(tok):
    for name in ("tiny-qwen2", "tiny-llama"):
        spec = model_spec(name)
        assert 100_000 < spec.num_params < 1_000_000
        assert spec.vocab_size == len(tok)
    assert set(shipped_models()) >= {"tiny-qwen2", "tiny-llama", "qwen-14b", "llama-7b", "qwen2.5-7b", "qwen2.5-14b"}


def test_unknown_model_clear_error():
    with pytest.raises(ModelNotFoundError, match="not a shipped name"):
        model_spec("nobody/nothing-7b")


def test_instruction_set_has_1000_varied_records():
    rows = [json.loads(l) for l in INSTRUCTIONS_PATH.read_text().splitlines()]
    assert len(rows) >= 1000
    assert all(set(r) == {"instruction", "input", "output"} for r in rows)
    assert len({r["instruction"] for r in rows}) >= 30
    assert len({(r["instruction"], r["input"]) for r in rows}) == len(rows)


def test_shipped_chats_fill_long_sequences(tok):
    assert DATASET_PATH == CHAT_DATASET_PATH  # the default dataset is the chat set
    assert CHAT_DATASET_PATH.stat().st_size < 4 * 2 ** 20  # a few MiB at most
    recs = load_records()
    assert recs.format == "messages" and len(recs) >= 1000
    roles = [[m["role"] for m in r["messages"]] for r in recs]
    assert sum(r[0] == "system" for r in roles) > 0.5 * len(roles)
    assert sum(r.count("assistant") >= 3 for r in roles) > 0.2 * len(roles)  # multi-turn
    lengths = tokenize(recs, tok, 8192, packing=True).lengths
    assert statistics.median(lengths) < 300 and max(lengths) > 4000  # a spread up to several thousand tokens
    assert sum(n > 2048 for n in lengths) >= 10


def test_tokenizer_has_chatml_and_ids_below_every_vocab(tok):
    assert len(tok) == 2048
    ids = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<|pad|>", "<|bos|>", "<|eos|>"])
    assert len(set(ids)) == 5 and max(ids) < 2048
    assert min(model_spec(n).vocab_size for n in shipped_models()) >= len(tok)
    text = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                                   tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert (TOKENIZER_DIR / "chat_template.jinja").is_file()
    assert enc(tok, "<|im_start|>") == [ids[0]]  # one special token, not split


# ------------------------------------------------------------------------------------------
# each format against a token list written out by hand

def _expected(tok, pieces):
    """(ids, labels) from (text, trained?) pieces, each tokenized on its own."""
    ids, labels = [], []
    for text, trained in pieces:
        t = [tok.bos_token_id] if text == "<BOS>" else [tok.eos_token_id] if text == "<EOS>" else enc(tok, text)
        ids += t
        labels += t if trained else [IGNORE_INDEX] * len(t)
    return ids, labels


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": "2 + 3 = 5"}, {"role": "user", "content": "Thanks!"},
        {"role": "assistant", "content": "You're welcome."}]
CHAT_PIECES = [("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nAdd 2 and 3.<|im_end|>\n"
                "<|im_start|>assistant\n", False), ("2 + 3 = 5<|im_end|>\n", True),
               ("<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n", False),
               ("You're welcome.<|im_end|>\n", True)]


def test_alpaca_loss_only_on_response_tokens(tok):
    rec = {"instruction": "Reverse the letters of the word.", "input": "stone", "output": "enots"}
    data = tokenize([rec], tok, 512)
    ids, labels = _expected(tok, [("<BOS>", False), ("### Instruction:\nReverse the letters of the word.\n\n"
                                                     "### Input:\nstone\n\n### Response:\n", False),
                                  ("enots", True), ("<EOS>", True)])
    assert data.format == "alpaca" and data.input_ids[0] == ids and data.labels[0] == labels
    assert tok.decode([t for t in data.labels[0] if t != IGNORE_INDEX]) == "enots<|eos|>"


def test_chat_messages_loss_on_assistant_turns(tok):
    data = tokenize([{"messages": CHAT}], tok, 512)
    ids, labels = _expected(tok, CHAT_PIECES)
    assert data.format == "messages" and data.input_ids[0] == ids and data.labels[0] == labels


def test_sharegpt_same_tokens_as_messages(tok):
    conv = [{"from": {"system": "system", "user": "human", "assistant": "gpt"}[m["role"]], "value": m["content"]}
            for m in CHAT]
    data = tokenize([{"conversations": conv}], tok, 512)
    assert data.format == "sharegpt" and (data.input_ids[0], data.labels[0]) == _expected(tok, CHAT_PIECES)


def test_prompt_completion_and_text(tok):
    data = tokenize([{"prompt": "Spell 7 in words:", "completion": " seven"}], tok, 512)
    assert (data.input_ids[0], data.labels[0]) == _expected(
        tok, [("<BOS>", False), ("Spell 7 in words:", False), (" seven", True), ("<EOS>", True)])
    data = tokenize([{"text": "one two three"}], tok, 512)
    assert data.format == "text"
    assert (data.input_ids[0], data.labels[0]) == _expected(tok, [("<BOS>", True), ("one two three", True),
                                                                  ("<EOS>", True)])


def test_other_chat_template_from_a_file(tmp_path):
    # a LLaMA-3-like layout (header lines, an end-of-turn marker, bos at the start), written here
    template = ("{{ bos_token }}{% for m in messages %}<|header|>{{ m['role'] }}<|/header|>\n\n{{ m['content'] }}"
                "<|eot|>{% endfor %}{% if add_generation_prompt %}<|header|>assistant<|/header|>\n\n{% endif %}")
    (tmp_path / "t.jinja").write_text(template)
    tok = load_tokenizer(chat_template=tmp_path / "t.jinja")
    data = tokenize([{"messages": CHAT[1:3]}], tok, 512)
    assert (data.input_ids[0], data.labels[0]) == _expected(
        tok, [("<|bos|><|header|>user<|/header|>\n\nAdd 2 and 3.<|eot|><|header|>assistant<|/header|>\n\n", False),
              ("2 + 3 = 5<|eot|>", True)])


def test_field_mapping(tok):
    rec = {"dialog": [{"speaker": {"system": "sys", "user": "customer", "assistant": "agent"}[m["role"]],
                       "text": m["content"]} for m in CHAT]}
    fields = "messages=dialog,role=speaker,content=text,system=sys,user=customer,assistant=agent"
    assert parse_fields(fields)["assistant"] == "agent"
    data = tokenize(normalise([rec], mapping=parse_fields(fields)), tok, 512)
    assert (data.input_ids[0], data.labels[0]) == _expected(tok, CHAT_PIECES)
    alpaca = normalise([{"question": "Q?", "answer": "A"}], mapping=parse_fields("instruction=question,output=answer"))
    assert alpaca.format == "alpaca" and alpaca[0] == {"instruction": "Q?", "input": "", "output": "A"}


def test_cached_hub_dataset_with_split(tmp_path, monkeypatch, tok):
    """A hub id already in the local datasets cache loads offline (the cache is built here with datasets'
    own json builder, in the layout datasets gives a hub dataset it has loaded)."""
    import glob
    import shutil

    import datasets
    src = tmp_path / "chats.jsonl"
    src.write_text("".join(json.dumps({"messages": CHAT}) + "\n" for _ in range(3)))
    datasets.load_dataset("json", data_files=str(src), cache_dir=str(tmp_path / "build"))
    built = glob.glob(str(tmp_path / "build" / "json" / "default-*" / "0.0.0" / "*" / ""))[0].rstrip("/")
    dst = tmp_path / "cache" / "cookbook-test___chats" / "default" / "0.0.0" / os.path.basename(built)
    shutil.copytree(built, dst)
    (dst / "json-train.arrow").rename(dst / "chats-train.arrow")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    recs = load_records("cookbook-test/chats", split="train")
    assert recs.format == "messages" and len(recs) == 3 and recs[0]["messages"] == CHAT
    with pytest.raises(DataError, match="no split 'test'.*--dataset-split"):
        load_records("cookbook-test/chats", split="test")
    with pytest.raises(DataError, match="not in the local datasets cache.*never downloads"):
        load_records("cookbook-test/not-there")


# ------------------------------------------------------------------------------------------
# packing

def _small_chats(n=40):
    return load_records().select(range(n))


def test_packed_rows_hold_exactly_seq_len(tok):
    data = tokenize(_small_chats(), tok, 64, packing=True)
    rows = make_rows(data, 64, packing=True, seed=3, pad_id=tok.pad_token_id, drop_empty=False)
    total = sum(data.lengths)
    assert len(rows) == -(-total // 64)
    assert all(len(r) == 64 for r in rows.input_ids) and rows.real_tokens[:-1] == [64] * (len(rows) - 1)
    assert rows.real_tokens[-1] == total - 64 * (len(rows) - 1)
    assert rows.input_ids[-1][rows.real_tokens[-1]:] == [tok.pad_token_id] * (64 - rows.real_tokens[-1])
    s = rows.stats()
    assert s["packing_efficiency"] == pytest.approx(total / (64 * len(rows)), abs=1e-5)
    assert s["longer_than_seq_len"] == sum(n > 64 for n in data.lengths) > 0
    longer = s["longer_than_seq_len"]
    assert (f"{longer} example(s) longer than --seq-len 64 were split into pieces of at most 64 tokens in "
            "consecutive rows, every piece kept for training (none cut off)") in rows.describe()
    assert f"{rows.split - longer} shorter example(s) start near the end of a row" in rows.describe()
    assert rows.split > longer and "truncated" not in rows.describe()
    # position_ids restart at 0 for every example and every row
    for pos in rows.position_ids:
        assert pos[0] == 0 and all(b == a + 1 or b == 0 for a, b in zip(pos, pos[1:]))
    # without packing: one example per row, cut
    flat = make_rows(data, 64, packing=False)
    assert flat.cut == s["longer_than_seq_len"] and max(map(len, flat.input_ids)) == 64
    assert f"{flat.cut} example(s) longer than --seq-len were cut to their first 64 tokens" in flat.describe()
    assert "shorter than --seq-len" in flat.describe()
    # rows in which nothing is trained on (inside a long prompt) are left out by default, and counted
    kept = make_rows(data, 64, packing=True, seed=3, pad_id=tok.pad_token_id)
    empty = [y for y in rows.labels if all(t == IGNORE_INDEX for t in y)]
    assert kept.empty_rows == len(empty) > 0 and len(kept) == len(rows) - len(empty)
    assert all(any(t != IGNORE_INDEX for t in y) for y in kept.labels)
    assert f"{len(empty)} row(s) with no token to learn from" in kept.describe()


def test_packed_labels_equal_unpacked_labels_token_for_token(tok):
    import torch
    data = tokenize(_small_chats(), tok, 64, packing=True)
    rows = make_rows(data, 64, packing=True, seed=3, pad_id=tok.pad_token_id, drop_empty=False)
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(3)).tolist()
    ids = [t for i in order for t in data.input_ids[i]]
    # unpacked, the model never predicts an example's first token (labels shift by one): -100 there
    labels = [t for i in order for t in [IGNORE_INDEX] + data.labels[i][1:]]
    n = len(ids)
    packed_ids = [t for r in rows.input_ids for t in r][:n]
    packed_labels = [t for r in rows.labels for t in r][:n]
    assert packed_ids == ids
    starts = set(range(0, n, 64))  # a row's first token is never predicted either
    assert all(p == u for k, (p, u) in enumerate(zip(packed_labels, labels)) if k not in starts)
    assert all(packed_labels[k] == IGNORE_INDEX for k in starts)
    assert [t for r in rows.labels for t in r][n:] == [IGNORE_INDEX] * (64 * len(rows) - n)  # padding


@pytest.mark.parametrize("model", ["tiny-qwen2", "tiny-llama"])
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_attention_stays_within_packed_examples(tok, model, impl):
    """Per-token losses of a packed row equal those of each example run alone (no example sees another)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(model_spec(model).path)
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl).eval()
    att = packing_attention(m)
    assert att["within_examples"] and not att["flatten"] and att["implementation"] == impl
    data = tokenize(normalise([{"messages": CHAT}, {"messages": CHAT[1:3]}, {"messages": CHAT[:3]}]), tok, 512)
    width = sum(data.lengths)
    rows = make_rows(data, width, packing=True, seed=0, pad_id=tok.pad_token_id)
    order = torch.randperm(3, generator=torch.Generator().manual_seed(0)).tolist()
    examples = [(data.input_ids[i], data.labels[i]) for i in order]
    assert len(rows) == 1 and rows.real_tokens == [width]
    batch = rows.batch([0], tok.pad_token_id)
    assert set(batch) == {"input_ids", "labels", "position_ids"}
    with torch.no_grad():
        packed = torch.log_softmax(m(**{k: v for k, v in batch.items() if k != "labels"}).logits[0], -1)
        alone = [torch.log_softmax(m(input_ids=torch.tensor([x])).logits[0], -1) for x, _ in examples]
    alone = torch.cat(alone)
    assert torch.allclose(packed, alone, atol=1e-5), (packed - alone).abs().max()


def test_packing_attention_not_claimed_for_foreign_model_code():
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(model_spec("tiny-llama").path)
    base = AutoModelForCausalLM.from_config(cfg)
    Foreign = type("Foreign", (type(base),), {"__module__": "my_models.modeling"})
    res = packing_attention(Foreign(cfg))
    assert not res["within_examples"] and "not checked" in res["how"]


def test_data_order_is_a_function_of_the_step():
    a = [sample_order(100, 7, s, m, r, 2, 2, 2) for s in range(3) for m in range(2) for r in range(2)]
    flat = [i for batch in a for i in batch]
    assert len(flat) == 24 and len(set(flat[:100])) == len(flat[:100])  # no repeats within an epoch
    assert sample_order(100, 7, 2, 1, 1, 2, 2, 2) == a[-1]


def test_packing_is_a_function_of_the_seed(tok):
    data = tokenize(_small_chats(), tok, 64, packing=True)
    a = make_rows(data, 64, packing=True, seed=5, pad_id=0)
    b = make_rows(data, 64, packing=True, seed=5, pad_id=0)
    assert a.input_ids == b.input_ids and a.labels == b.labels and a.position_ids == b.position_ids
    assert make_rows(data, 64, packing=True, seed=6, pad_id=0).input_ids != a.input_ids


def test_truncation_counted(tok):
    data = tokenize(load_records().select(range(200)), tok, 24)
    assert data.num_truncated > 0 and max(len(x) for x in data.input_ids) == 24


# ------------------------------------------------------------------------------------------
# bad input: file, line, field, fix

def _file(tmp_path, lines, name="d.jsonl"):
    p = tmp_path / name
    p.write_bytes(b"\n".join(l if isinstance(l, bytes) else json.dumps(l).encode() for l in lines) + b"\n")
    return p


GOOD = {"messages": CHAT}


@pytest.mark.parametrize("lines,pattern", [
    ([GOOD, {"instruction": "a", "output": "b"}],
     r"mixed formats: line 1 is chat `messages`.*line 2 is Alpaca.*one format per file"),
    ([GOOD, {"messages": []}], r"line 2: field 'messages' is an empty list"),
    ([{"messages": [{"role": "user", "content": "hi"}]}], r"line 1: the conversation has no assistant turn"),
    ([GOOD, GOOD, {"messages": [{"role": "bot", "content": "hi"}]}],
     r"line 3: messages\[0\].role='bot' is not a known role.*--dataset-fields.*assistant=bot"),
    ([GOOD, b'{"messages": "\xff\xfe"}'], r"line 2: not UTF-8 \(byte 0xff at column \d+\); save the file as UTF-8"),
    ([GOOD, GOOD, b'{"messages": [oops]}'], r"line 3: not JSON .*each line must be one JSON object"),
    ([GOOD, [1, 2]], r"line 2: a JSON list, not an object"),
    ([{"question": "q", "answer": "a"}], r"line 1: fields \['answer', 'question'\] match no accepted format.*"
                                         r"--dataset-fields"),
    ([{"messages": [{"speaker": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}],
     r"line 1: messages\[0\] has no field 'role'.*--dataset-fields role=yourname"),
    ([{"prompt": "p", "completion": 3.5}], None),  # a number is text enough
    ([{"text": ["a"]}], r"line 1: field 'text' is a list, not text"),
])
def test_bad_records_named_by_line_and_field(tmp_path, lines, pattern):
    p = _file(tmp_path, lines)
    if pattern is None:
        assert load_records(p)[0]["completion"] == "3.5"
        return
    with pytest.raises(DataError, match=pattern) as err:
        load_records(p)
    assert str(p) in str(err.value)


def test_bad_mapping_and_options(tmp_path, tok):
    p = _file(tmp_path, [GOOD])
    with pytest.raises(DataError, match=r"maps messages=dialog, but no record has a field 'dialog'.*fix the mapping"):
        load_records(p, fields="messages=dialog")
    with pytest.raises(DataError, match=r"messages\[0\] has no field 'speaker' \(fields: \['content', 'role'\]\)"):
        load_records(p, fields="role=speaker")
    with pytest.raises(DataError, match="unknown key 'dialogue'"):
        parse_fields("dialogue=x")
    with pytest.raises(DataError, match="standard=yours"):
        parse_fields("messages")
    with pytest.raises(DataError, match="not found"):
        load_records(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match="the file is empty"):
        load_records(tmp_path / "empty.jsonl")
    with pytest.raises(DataError, match=r"--chat-template=.*not a file"):
        load_tokenizer(chat_template=tmp_path / "nope.jinja")


def test_chat_data_with_a_tokenizer_without_template(tmp_path, tok):
    bare = load_tokenizer()
    bare.chat_template = None
    with pytest.raises(DataError, match=r"has none\. Pass --chat-template FILE.*chat_template\.jinja"):
        tokenize(load_records(_file(tmp_path, [GOOD])), bare, 128)


def test_template_that_rewrites_history_is_refused(tmp_path):
    # renders only the last assistant turn's content in full: earlier renderings are not prefixes
    (tmp_path / "t.jinja").write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] if loop.last else '...' }}\n"
                                      "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
    tok = load_tokenizer(chat_template=tmp_path / "t.jinja")
    with pytest.raises(DataError, match=r"line 1: the chat template renders the conversation differently"):
        tokenize(load_records(_file(tmp_path, [GOOD])), tok, 128)


def test_examples_longer_than_seq_len_counted_split_or_cut(tmp_path, tok):
    recs = load_records(_file(tmp_path, [GOOD, {"messages": CHAT[:3]}, {"messages": [
        {"role": "user", "content": "Count."}, {"role": "assistant", "content": " ".join(["seven"] * 200)}]}]))
    data = tokenize(recs, tok, 32, packing=True)
    assert data.num_longer == 2  # the 5-turn conversation (~40 tokens) and the long answer (~210)
    packed = make_rows(data, 32, packing=True, seed=0, pad_id=tok.pad_token_id)
    assert packed.longer == 2 and "2 example(s) longer than --seq-len 32 were split into pieces of at most 32 tokens" \
        in packed.describe()
    cut = make_rows(tokenize(recs, tok, 32), 32, packing=False)
    assert cut.cut == 2 and "2 example(s) longer than --seq-len were cut to their first 32 tokens" in cut.describe()
    # zero counts are left out, not shown as "0 cut" beside a split count
    short = make_rows(tokenize(load_records(_file(tmp_path, [GOOD])), tok, 512), 512, packing=False)
    assert short.cut == 0 and "cut" not in short.describe() and "longer than" not in short.describe()
    one = make_rows(tokenize(load_records(_file(tmp_path, [GOOD])), tok, 512, packing=True), 512, packing=True,
                    pad_id=tok.pad_token_id)
    assert one.longer == one.split == 0 and "split" not in one.describe() and "continue" not in one.describe()
    assert format_prompt("a") == "### Instruction:\na\n\n### Response:\n"


def test_packed_sdpa_cost_note_only_where_it_applies():
    """The GPU note for packed rows on sdpa's masked path: only with packing, on a GPU, sdpa keeping examples apart
    without flattening; it names the measured range and both ways out."""
    from cookbook.data import SDPA_PACKED_COST, packed_attention_cost_note
    sdpa = {"implementation": "sdpa", "within_examples": True, "flatten": False}
    note = packed_attention_cost_note(sdpa, packing=True, on_gpu=True)
    assert SDPA_PACKED_COST == (0.66, 0.71) and "0.66–0.71×" in note
    assert "flash-attn" in note and "--no-packing" in note
    assert packed_attention_cost_note(sdpa, packing=False, on_gpu=True) is None
    assert packed_attention_cost_note(sdpa, packing=True, on_gpu=False) is None  # the CPU rehearsal: no such kernel
    flash = {"implementation": "flash_attention_2", "within_examples": True, "flatten": True}
    assert packed_attention_cost_note(flash, packing=True, on_gpu=True) is None
    leaky = dict(sdpa, within_examples=False)  # its own WARNING says more than a speed note
    assert packed_attention_cost_note(leaky, packing=True, on_gpu=True) is None
