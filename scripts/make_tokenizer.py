"""Train the shipped byte-level BPE tokenizer (data/tokenizer/) on the shipped data.

Trained on data/instructions.jsonl (Alpaca layout) and data/chats.jsonl (rendered with the ChatML
template below), with Hugging Face `tokenizers`; saved through transformers'
PreTrainedTokenizerFast so that AutoTokenizer.from_pretrained("data/tokenizer") loads it.

Vocabulary: 2,048 entries, special tokens included (<|pad|> <|bos|> <|eos|> <|unk|> <|im_start|>
<|im_end|>, ids 0-5), so every id stays below the vocab_size 2048 of the tiny model configs.

Chat template: ChatML, the format Qwen's chat models use (``<|im_start|>{role}\\n{content}<|im_end|>\\n``
per message; ``<|im_start|>assistant\\n`` as the generation prompt). Unlike Qwen2.5's template it adds no
default system message. Saved as data/tokenizer/chat_template.jinja (a file ``--chat-template`` also takes).
Run: python scripts/make_tokenizer.py   (after scripts/make_dataset.py and scripts/make_chats.py)
"""
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cookbook.data import format_prompt  # noqa: E402
from cookbook.models import CHAT_DATASET_PATH, INSTRUCTIONS_PATH, TOKENIZER_DIR  # noqa: E402

SPECIAL = ["<|pad|>", "<|bos|>", "<|eos|>", "<|unk|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{%- for message in messages %}\n"
          "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
          "{%- endfor %}\n"
          "{%- if add_generation_prompt %}\n"
          "{{- '<|im_start|>assistant\\n' }}\n"
          "{%- endif %}\n")


def chatml(messages: list[dict]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def texts():
    for line in INSTRUCTIONS_PATH.read_text().splitlines():
        rec = json.loads(line)
        yield format_prompt(rec["instruction"], rec["input"]) + rec["output"]
    for line in CHAT_DATASET_PATH.read_text().splitlines():
        yield chatml(json.loads(line)["messages"])


def main() -> None:
    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=SPECIAL, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", bos_token="<|bos|>",
                                   eos_token="<|eos|>", unk_token="<|unk|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"],
                                   model_max_length=16384)
    fast.chat_template = CHATML
    fast.save_pretrained(TOKENIZER_DIR)
    assert len(fast) == 2048, len(fast)
    print("vocabulary", len(fast), "saved to", TOKENIZER_DIR)


if __name__ == "__main__":
    main()
