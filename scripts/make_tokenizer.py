"""Train the shipped byte-level BPE tokenizer (data/tokenizer/) on data/instructions.jsonl.

Uses Hugging Face `tokenizers`; saved through transformers' PreTrainedTokenizerFast so that
AutoTokenizer.from_pretrained("data/tokenizer") loads it. Vocabulary: 2,048 entries.
Run: python scripts/make_tokenizer.py
"""
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import sys
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cookbook.data import format_prompt  # noqa: E402
from cookbook.models import DATASET_PATH, TOKENIZER_DIR  # noqa: E402

SPECIAL = ["<|pad|>", "<|bos|>", "<|eos|>", "<|unk|>"]


def texts():
    for line in DATASET_PATH.read_text().splitlines():
        rec = json.loads(line)
        yield format_prompt(rec["instruction"], rec["input"]) + rec["output"]


def main() -> None:
    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=SPECIAL, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", bos_token="<|bos|>",
                                   eos_token="<|eos|>", unk_token="<|unk|>", model_max_length=4096)
    fast.save_pretrained(TOKENIZER_DIR)
    print("vocabulary", len(fast), "saved to", TOKENIZER_DIR)


if __name__ == "__main__":
    main()
