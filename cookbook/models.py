"""Model specs: architecture numbers and parameter counts from a config, without weights.

A model is named by one of:
  * a shipped name (``tiny-qwen2``, ``tiny-llama``, ``qwen-14b``, ``llama-7b``, ``qwen2.5-7b``,
    ``qwen2.5-14b``): ``data/models/<name>/config.json``; trained from random weights;
  * a local folder holding ``config.json`` (and weights, if any), or a path to a ``config.json``;
  * a hub id (``Qwen/Qwen2.5-7B``) already present in the local Hugging Face cache. Nothing is
    downloaded: the cookbook runs with ``HF_HUB_OFFLINE=1`` (``hf download ID --local-dir DIR`` first).

Parameter counts come from instantiating the architecture on PyTorch's ``meta`` device
(shapes only, no memory), so they are exact for the architecture.
"""
from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

#: Root of the shipped data (chat and instruction sets, tokenizer, model configs).
DATA_DIR = Path(os.environ.get("COOKBOOK_DATA", Path(__file__).resolve().parent.parent / "data"))
MODELS_DIR = DATA_DIR / "models"
TOKENIZER_DIR = DATA_DIR / "tokenizer"
#: The shipped Alpaca-format instruction set (short single-turn records).
INSTRUCTIONS_PATH = DATA_DIR / "instructions.jsonl"
#: The shipped chat set (multi-turn ``messages``, lengths up to several thousand tokens).
CHAT_DATASET_PATH = DATA_DIR / "chats.jsonl"
#: What ``--dataset`` defaults to: the chat set, so packed rows fill ``--seq-len``.
DATASET_PATH = CHAT_DATASET_PATH

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


#: Files whose presence means a folder holds its own tokenizer (``AutoTokenizer`` reads
#: ``tokenizer_config.json``; fast tokenizers ``tokenizer.json``; SentencePiece ``tokenizer.model``;
#: byte-level BPE ``vocab.json``; Qwen-14B's first generation ``qwen.tiktoken``).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "qwen.tiktoken")

#: The Hugging Face repository with the weights of each shipped architecture (what to download). ``qwen-14b``
#: has Qwen-14B's sizes in transformers' native Qwen2 code, which is exactly Qwen1.5-14B (hidden 5120, 40
#: layers, 40 heads, intermediate 13696, vocabulary 152064); ``llama-7b`` is LLaMA-7B's architecture, the
#: same as Llama-2-7B's (a gated repository: accept its license and `hf auth login` first).
HUB_IDS = {"qwen-14b": "Qwen/Qwen1.5-14B", "llama-7b": "meta-llama/Llama-2-7b-hf", "qwen2.5-7b": "Qwen/Qwen2.5-7B",
           "qwen2.5-14b": "Qwen/Qwen2.5-14B"}

#: The learning rate the shipped tiny models train with (their rehearsal default): 3e-3 makes a
#: 0.35M-parameter model from random weights lose >= 20% of its loss in 40 steps (tests/test_train.py).
#: Real models get no default (``--lr`` is required): full fine-tunes of 7B-14B models use
#: 1e-5 - 2e-5 (Stanford Alpaca: 2e-5 for LLaMA-7B; Qwen's finetune.py: 1e-5 for full-parameter runs).
REHEARSAL_LR = 3e-3

#: Optimizer steps of a rehearsal when neither ``--max-steps`` nor ``--num-epochs`` is given.
REHEARSAL_MAX_STEPS = 40


class ModelNotFoundError(FileNotFoundError):
    """The model name is neither shipped, a local folder, nor in the local hub cache."""


def is_rehearsal_model(name: str | os.PathLike) -> bool:
    """Whether ``name`` is one of the shipped tiny test models (``tiny-*``), whose defaults (lr, steps,
    random weights, the shipped tokenizer) are the CPU rehearsal's. Real models get no such defaults."""
    text = str(name)
    return text.startswith("tiny-") and (MODELS_DIR / text / "config.json").is_file()


def has_tokenizer_files(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds one of :data:`TOKENIZER_FILES`."""
    return any((Path(folder) / f).is_file() for f in TOKENIZER_FILES)


def is_qwen1_14b(name: str) -> bool:
    """Qwen-14B of the first generation (``Qwen/Qwen-14B``, ``Qwen-14B-Chat``), not Qwen1.5/2/2.5."""
    import re
    return bool(re.search(r"(^|/)qwen-14b(-chat)?$", str(name).rstrip("/").lower()))


#: What to tell users of Qwen-14B's first generation (its repository ships Python code and a tiktoken tokenizer).
QWEN1_NOTE = ("Qwen-14B (first generation) ships its own modelling code and a tiktoken tokenizer (qwen.tiktoken): "
              "it needs --trust-remote-code (runs that code; only if you trust it) and `pip install tiktoken`, "
              "and its own tokenizer — the one in the downloaded folder (--tokenizer FOLDER if --model points "
              "elsewhere). Qwen1.5-14B and Qwen2.5-14B need neither.")


def download_hint(name: str) -> str:
    """The ``hf download`` command (huggingface_hub's CLI) for a hub id or shipped name, plus notes; one or
    more sentences ending with a period."""
    text = str(name)
    pathlike = text.startswith((".", "/", "~")) or text.count("/") > 1
    if pathlike:  # a folder that does not exist yet: download into it, the repository guessed from its name
        known = {r.split("/")[-1].lower(): r for r in (*HUB_IDS.values(), "Qwen/Qwen-14B", "Qwen/Qwen-14B-Chat")}
        repo = known.get(Path(text).name.lower())
        hint = (f"download it there first: `hf download {repo or 'ORG/NAME'} --local-dir {text}`"
                + ("" if repo else " (ORG/NAME: the model's repository on huggingface.co)"))
        if repo and is_qwen1_14b(repo):
            hint += ". " + QWEN1_NOTE
        return hint if hint.endswith(".") else hint + "."
    repo = HUB_IDS.get(text, text if text.count("/") == 1 else None)
    if repo is None:
        return ("download the model first, e.g. `hf download Qwen/Qwen2.5-7B --local-dir ./models/Qwen2.5-7B`, "
                "then pass --model ./models/Qwen2.5-7B.")
    local = f"./models/{repo.split('/')[-1]}"
    hint = f"download it first: `hf download {repo} --local-dir {local}`, then pass --model {local}"
    if is_qwen1_14b(repo) or text == "qwen-14b":
        hint += (". " if is_qwen1_14b(repo) else ". For the first-generation Qwen/Qwen-14B instead: ") + QWEN1_NOTE
    if repo.startswith("meta-llama/"):
        hint += " (a gated repository: accept its license on huggingface.co and run `hf auth login` first)"
    return hint if hint.endswith(".") else hint + "."


def shipped_models() -> list[str]:
    """Names of the model configs shipped under ``data/models``."""
    return sorted(p.parent.name for p in MODELS_DIR.glob("*/config.json"))


@dataclass(frozen=True)
class ModelSpec:
    """Architecture facts of a causal LM, from its config.

    Attributes:
        name: what the user passed.
        path: folder holding ``config.json``.
        source: ``shipped``, ``folder`` or ``cache``.
        has_weights: a weights file sits beside the config (else training starts from random weights).
        num_params: total parameters (tied weights counted once), exact.
        largest_layer_params: parameters of the largest single module (its own tensors only) —
            DeepSpeed's ``largest_layer_params`` in ``estimate_zero3_model_states_mem_needs``.
        hidden_size, num_layers, intermediate_size, vocab_size, num_heads, num_kv_heads: config numbers.
        tie_word_embeddings: input and output embeddings share one tensor.
        model_type: ``qwen2``, ``llama``, …
    """

    name: str
    path: str
    source: str
    has_weights: bool
    num_params: int
    largest_layer_params: int
    hidden_size: int
    num_layers: int
    intermediate_size: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    tie_word_embeddings: bool
    model_type: str


def resolve_model_path(name: str | os.PathLike) -> tuple[Path, str]:
    """Find the folder holding ``config.json`` for ``name``.

    Returns:
        (folder, source) with source ``shipped``, ``folder`` or ``cache``.

    Raises:
        ModelNotFoundError: naming what was tried and how to fix it.
    """
    text = str(name)
    shipped = MODELS_DIR / text / "config.json"
    if "/" not in text and os.sep not in text and shipped.is_file():  # an absolute path would replace MODELS_DIR
        return shipped.parent, "shipped"
    path = Path(text).expanduser()
    if path.is_file() and path.name == "config.json":
        return path.resolve().parent, "folder"
    if path.is_dir():
        if (path / "config.json").is_file():
            return path.resolve(), "folder"
        raise ModelNotFoundError(f"model={text!r}: folder {path.resolve()} has no config.json; "
                                 "point --model at a folder saved with save_pretrained()")
    if text.count("/") == 1 and not text.startswith((".", "/")):
        try:
            from huggingface_hub import try_to_load_from_cache
            found = try_to_load_from_cache(text, "config.json")
        except Exception:  # noqa: BLE001 - a malformed id is simply "not cached"
            found = None
        if isinstance(found, str) and os.path.isfile(found):
            return Path(found).parent, "cache"
    raise ModelNotFoundError(
        f"model={text!r}: not a shipped name ({', '.join(shipped_models())}), not a local folder "
        "with config.json, and not in the local Hugging Face cache (nothing is downloaded). "
        f"To train real weights, {download_hint(text)}")


def load_config(name: str | os.PathLike, trust_remote_code: bool = False):
    """The ``transformers`` config for ``name`` (see :func:`resolve_model_path`)."""
    from transformers import AutoConfig
    folder, _ = resolve_model_path(name)
    return AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code, local_files_only=True)


def count_params(model) -> tuple[int, int]:
    """(total parameters with shared tensors once, largest single module's own parameters).

    The second number is how DeepSpeed's ``estimate_zero3_model_states_mem_needs_all_live``
    (deepspeed/runtime/zero/stage3.py) defines ``largest_layer_params``.
    """
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


@contextlib.contextmanager
def _zero3_init_suspended():
    """Suspend transformers' ZeRO-3 hook (``is_deepspeed_zero3_enabled``) for a while.

    Inside a DeepSpeed ZeRO-3 run, ``from_config`` wraps construction in ``deepspeed.zero.Init``,
    which partitions with collectives: a shape-only model built on one rank would hang the world.
    """
    try:
        from transformers.integrations import deepspeed as hf_ds
    except ImportError:
        yield
        return
    saved = getattr(hf_ds, "_hf_deepspeed_config_weak_ref", None)
    hf_ds._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_ds._hf_deepspeed_config_weak_ref = saved


def meta_model(name: str | os.PathLike, trust_remote_code: bool = False):
    """The architecture instantiated on the ``meta`` device: shapes, no memory, no weights.
    Safe to call inside a ZeRO-3 run (no partitioning, no collectives)."""
    import torch
    from transformers import AutoModelForCausalLM
    config = load_config(name, trust_remote_code)
    with _zero3_init_suspended(), torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)


@functools.lru_cache(maxsize=64)
def model_spec(name: str, trust_remote_code: bool = False) -> ModelSpec:
    """Architecture facts and exact parameter counts for ``name`` (see module docstring).

    Example: ``model_spec("qwen-14b").num_params == 14_167_290_880``.

    Raises:
        ModelNotFoundError: the model cannot be found locally.
    """
    folder, source = resolve_model_path(name)
    config = load_config(name, trust_remote_code)
    total, largest = count_params(meta_model(name, trust_remote_code))
    text_cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(text_cfg, "num_attention_heads", 0)
    return ModelSpec(
        name=str(name), path=str(folder), source=source,
        has_weights=any((folder / f).is_file() for f in WEIGHT_FILES),
        num_params=total, largest_layer_params=largest,
        hidden_size=text_cfg.hidden_size, num_layers=text_cfg.num_hidden_layers,
        intermediate_size=getattr(text_cfg, "intermediate_size", 4 * text_cfg.hidden_size),
        vocab_size=text_cfg.vocab_size, num_heads=heads,
        num_kv_heads=getattr(text_cfg, "num_key_value_heads", None) or heads,
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        model_type=config.model_type,
    )


def describe_source(spec: ModelSpec) -> str:
    """Where the weights of a run come from, in words (for the console): a shipped architecture with
    random weights, a local folder with weights, the Hugging Face cache, or a config without weights."""
    if spec.source == "shipped":
        return (f"shipped architecture ({spec.path}/config.json): RANDOM WEIGHTS — no weights are shipped or "
                "downloaded")
    where = "local folder" if spec.source == "folder" else "Hugging Face cache"
    if spec.has_weights:
        return f"{where} {spec.path}, with weights"
    return f"{where} {spec.path}: config.json but no weights file ({', '.join(WEIGHT_FILES[:2])}, ...): RANDOM WEIGHTS"
