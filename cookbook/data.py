"""Training data: load records in any of the accepted formats, tokenize with loss only where it
belongs, and pack them into rows of exactly ``seq_len`` tokens.

Formats, detected from the records' fields (one format per file):

==================  ===========================================  ===================================
format              fields                                       loss on
==================  ===========================================  ===================================
``alpaca``          ``instruction``, ``output``, ``input`` (opt.)  the output and its end-of-sequence
``messages``        ``messages``: list of ``{role, content}``,   the assistant turns (as the chat
                    roles system/user/assistant, multi-turn      template renders them)
``sharegpt``        ``conversations``: list of ``{from, value}``, as ``messages``
                    from human/gpt/system
``prompt_completion`` ``prompt``, ``completion`` (strings)       the completion and end-of-sequence
``text``            ``text``                                     every token
==================  ===========================================  ===================================

Alpaca prompts follow the Alpaca layout (Taori et al., 2023, github.com/tatsu-lab/stanford_alpaca).
Chat records are rendered with the tokenizer's chat template (``apply_chat_template``); the assistant
spans are found by rendering each conversation's prefixes (the text up to an assistant turn with the
generation prompt, and up to the end of that turn), which works with any template whose rendering
of a conversation starts with the rendering of its first turns (ChatML/Qwen, LLaMA-3, Mistral, ...);
tokens whose first character lies in an assistant span are trained on. Labels elsewhere are -100,
``torch.nn.CrossEntropyLoss``'s ignore index.

Packing (:func:`make_rows` with ``packing=True``): examples, shuffled once with the run's seed, are
concatenated and cut into rows of exactly ``seq_len`` tokens (the last row is padded); an example
that reaches past the end of a row continues in the next row. Each row is assembled with
transformers' ``DataCollatorWithFlattening``: ``position_ids`` restart at 0 for every example (and
every continued piece) and the first label of each is -100, so no token is trained to predict the
next example's first token. Whether attention stays within each example is the attention
implementation's business: :func:`packing_attention` checks it on the model's own config.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .models import DATASET_PATH, TOKENIZER_DIR

FIELDS = ("instruction", "input", "output")
IGNORE_INDEX = -100  # torch.nn.CrossEntropyLoss's default ignore_index

#: format -> (description for messages, the fields that identify it)
FORMATS = {
    "messages": ("chat `messages` (a list of {role, content})", ("messages",)),
    "sharegpt": ("ShareGPT `conversations` (a list of {from, value})", ("conversations",)),
    "alpaca": ("Alpaca (instruction, output, optional input)", ("instruction", "output")),
    "prompt_completion": ("prompt/completion (prompt, completion)", ("prompt", "completion")),
    "text": ("plain text (text)", ("text",)),
}
CHAT_ROLES = ("system", "user", "assistant")
#: ShareGPT ``from`` values -> chat roles (the names ShareGPT exports and LLaMA-Factory's sharegpt format use)
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
#: Keys ``--dataset-fields`` accepts: record fields, message fields, role names.
RECORD_FIELDS = ("messages", "conversations", "instruction", "input", "output", "prompt", "completion", "text")
MESSAGE_FIELDS = ("role", "content", "from", "value")
FIELD_KEYS = RECORD_FIELDS + MESSAGE_FIELDS + CHAT_ROLES
FORMATS_ACCEPTED = "; ".join(d for d, _ in FORMATS.values())


class DataError(ValueError):
    """The dataset cannot be used; the message names the file, the line, the field and the fix."""


def format_prompt(instruction: str, input: str = "") -> str:
    """The prompt text before the response (Alpaca layout)."""
    if input:
        return f"### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
    return f"### Instruction:\n{instruction}\n\n### Response:\n"


# --------------------------------------------------------------------------------------------
# field mapping

def parse_fields(spec: str | dict | None) -> dict[str, str]:
    """Parse ``--dataset-fields``: comma-separated ``standard=yours`` pairs, e.g.
    ``messages=dialog,role=speaker,content=text,assistant=bot``.

    Keys are record fields (``messages``, ``conversations``, ``instruction``, ``input``, ``output``,
    ``prompt``, ``completion``, ``text``), message fields (``role``, ``content``, ``from``, ``value``) or
    role names (``system``, ``user``, ``assistant``: the value your data uses for that role).

    Raises:
        DataError: an unknown key, a pair without ``=``, or a key given twice.
    """
    if not spec:
        return {}
    items = spec.items() if isinstance(spec, dict) else [p.partition("=")[::2] for p in str(spec).split(",") if p.strip()]
    out: dict[str, str] = {}
    for key, value in items:
        key, value = str(key).strip(), str(value).strip()
        if not key or not value:
            raise DataError(f"--dataset-fields={spec!r}: each item is standard=yours, e.g. "
                            "'messages=dialog,role=speaker'; got an item without both sides")
        if key not in FIELD_KEYS:
            raise DataError(f"--dataset-fields: unknown key {key!r}; keys are record fields {list(RECORD_FIELDS)}, "
                            f"message fields {list(MESSAGE_FIELDS)} or role names {list(CHAT_ROLES)}")
        if key in out:
            raise DataError(f"--dataset-fields: {key!r} is given twice")
        out[key] = value
    return out


# --------------------------------------------------------------------------------------------
# reading records

@dataclass
class Records:
    """Records of one format, normalised, with where each came from.

    Attributes:
        records: dicts: Alpaca ``{instruction, input, output}``; chat ``{messages: [{role, content}]}``
            (ShareGPT converted to it); ``{prompt, completion}``; ``{text}``.
        format: a key of :data:`FORMATS`.
        source: the file, folder or hub id.
        where: per record, ``line N`` (JSON lines) or ``record N`` (other sources), 1-based.
    """

    records: list
    format: str
    source: str
    where: list = field(default_factory=list)
    fingerprint: tuple | None = None  # (source, size, mtime, fields, split) of a file's records: tokenize's cache key

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, i):
        return self.records[i]

    @property
    def column_names(self) -> list[str]:
        return sorted(self.records[0]) if self.records else []

    def select(self, indices) -> "Records":
        """The records at ``indices`` (like ``datasets.Dataset.select``)."""
        indices = list(indices)
        return Records([self.records[i] for i in indices], self.format, self.source,
                       [self.where[i] for i in indices] if self.where else [],
                       self.fingerprint + (tuple(indices),) if self.fingerprint else None)

    def describe(self) -> str:
        return FORMATS[self.format][0]


def _read_json_lines(path: Path) -> tuple[list, list]:
    """JSON lines (or one JSON array) with the line of every error."""
    raw = path.read_bytes()
    if raw.lstrip()[:1] == b"[":  # one JSON array
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            line = raw[:exc.start].count(b"\n") + 1
            raise DataError(f"dataset={str(path)!r}, line {line}: not UTF-8 (byte 0x{raw[exc.start]:02x}); "
                            "save the file as UTF-8") from None
        except json.JSONDecodeError as exc:
            raise DataError(f"dataset={str(path)!r}, line {exc.lineno}: not JSON ({exc.msg}, column {exc.colno}); "
                            "the file must be one JSON array of objects, or one JSON object per line") from None
        if not all(isinstance(r, dict) for r in data):
            bad = next(i for i, r in enumerate(data) if not isinstance(r, dict))
            raise DataError(f"dataset={str(path)!r}, record {bad + 1}: a {type(data[bad]).__name__}, not a JSON object; "
                            "each record must be an object with named fields")
        return data, [f"record {i + 1}" for i in range(len(data))]
    records, where = [], []
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"dataset={str(path)!r}, line {n}: not UTF-8 (byte 0x{line[exc.start]:02x} at column "
                            f"{exc.start + 1}); save the file as UTF-8") from None
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"dataset={str(path)!r}, line {n}: not JSON ({exc.msg}, column {exc.colno}); each line "
                            "must be one JSON object") from None
        if not isinstance(rec, dict):
            raise DataError(f"dataset={str(path)!r}, line {n}: a JSON {type(rec).__name__}, not an object; each line "
                            "must be one JSON object with named fields")
        records.append(rec)
        where.append(f"line {n}")
    return records, where


def _offline_datasets():
    """A context in which ``datasets`` reads only its local cache (it reads ``HF_HUB_OFFLINE`` at import,
    so the flag is set on its config for the duration), and shows no progress bars unless it writes to a
    terminal (:func:`cookbook.hardware.terminal_progress`)."""
    import contextlib

    import datasets

    @contextlib.contextmanager
    def ctx():
        from .hardware import terminal_progress
        before = datasets.config.HF_HUB_OFFLINE
        datasets.config.HF_HUB_OFFLINE = True
        # no "Generating train split" bars in a notebook's cells (papermill keeps every redraw): bars only
        # on a terminal, and the caller's own setting restored after
        quiet = not terminal_progress() and not datasets.are_progress_bars_disabled()
        if quiet:
            datasets.disable_progress_bars()
        try:
            yield datasets
        finally:
            datasets.config.HF_HUB_OFFLINE = before
            if quiet:
                datasets.enable_progress_bars()
    return ctx()


def _looks_like_hub_id(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", name)) and not name.endswith((".json", ".jsonl"))


def _from_datasets(name: str, split: str | None, path: Path | None) -> tuple[list, list]:
    """Records of a ``save_to_disk`` folder, a parquet/csv file, or a hub id in the local cache."""
    with _offline_datasets() as datasets:
        if path is not None and path.is_dir():
            try:
                ds = datasets.load_from_disk(str(path))
            except Exception as exc:  # noqa: BLE001 - reported with the fix
                raise DataError(f"dataset={name!r}: a folder, but not one written by Dataset.save_to_disk "
                                f"({type(exc).__name__}: {exc}); pass a JSONL file or such a folder") from None
        elif path is not None:
            kind = {".parquet": "parquet", ".csv": "csv"}[path.suffix]
            try:
                ds = datasets.load_dataset(kind, data_files=str(path), split="train")
            except Exception as exc:  # noqa: BLE001
                raise DataError(f"dataset={name!r}: cannot be read as {kind} ({type(exc).__name__}: {exc})") from None
        else:
            try:
                ds = datasets.load_dataset(name, split=None)
            except Exception as exc:  # noqa: BLE001
                raise DataError(
                    f"dataset={name!r}: not a local file or folder, and not in the local datasets cache "
                    f"({datasets.config.HF_DATASETS_CACHE}); the cookbook never downloads. On a machine with network run "
                    f"`python -c \"import datasets; datasets.load_dataset({name!r})\"` once (it fills the cache), or pass "
                    f"a local JSONL file. ({type(exc).__name__}: {str(exc)[:200]})") from None
        if isinstance(ds, datasets.DatasetDict):
            want = split or "train"
            if want not in ds:
                raise DataError(f"dataset={name!r}: no split {want!r} (splits: {sorted(ds)}); pass --dataset-split "
                                "with one of them")
            ds = ds[want]
        elif split and split != "train":
            raise DataError(f"dataset={name!r}: a single split; --dataset-split={split!r} does not apply (omit it)")
    return [dict(r) for r in ds], [f"record {i + 1}" for i in range(len(ds))]


def load_records(path: str | os.PathLike | None = None, *, fields: str | dict | None = None,
                 split: str | None = None) -> Records:
    """Load a dataset and normalise its records.

    Args:
        path: a ``.jsonl``/``.json`` file (JSON lines or one array), a ``.parquet``/``.csv`` file, a
            folder written by ``Dataset.save_to_disk``, a ``datasets`` hub id already in the local cache
            (never downloaded), or None for the shipped ``data/chats.jsonl``.
        fields: ``--dataset-fields`` (see :func:`parse_fields`): your names for the standard fields.
        split: the split of a hub id or ``DatasetDict`` folder (default ``train``).

    Returns:
        :class:`Records` of one format.

    Raises:
        DataError: naming the file, the line (or record) and the field, and the fix: missing or empty
            file; a line that is not UTF-8 or not JSON; mixed formats; records of no accepted format;
            a mapping that names a missing field; an empty ``messages``; a conversation without an
            assistant turn; an unknown role; a field of the wrong type.
    """
    name = str(path) if path else str(DATASET_PATH)
    p = Path(name)
    mapping = parse_fields(fields)
    if p.is_file():
        if p.stat().st_size == 0:
            raise DataError(f"dataset={name!r}: the file is empty; it needs records in one of the accepted formats: "
                            f"{FORMATS_ACCEPTED}")
        if p.suffix in (".parquet", ".csv"):
            raw, where = _from_datasets(name, split, p)
        else:
            raw, where = _read_json_lines(p)
    elif p.is_dir():
        raw, where = _from_datasets(name, split, p)
    elif not _looks_like_hub_id(name):
        raise DataError(f"dataset={name!r}: not found ({p.resolve()}); pass --dataset with a JSONL file, a folder "
                        "written by Dataset.save_to_disk, or a datasets hub id in the local cache")
    else:
        raw, where = _from_datasets(name, split, None)
    if not raw:
        raise DataError(f"dataset={name!r}: no records; it needs at least one")
    recs = normalise(raw, where, name, mapping)
    if p.is_file():
        st = p.stat()
        recs.fingerprint = (str(p.resolve()), st.st_size, st.st_mtime_ns, json.dumps(mapping, sort_keys=True), split)
    return recs


def normalise(raw: list, where: list | None = None, source: str = "records", mapping: dict | None = None) -> Records:
    """Apply the field mapping, detect the format (one per source) and check every record.

    Raises:
        DataError: see :func:`load_records`.
    """
    mapping = mapping or {}
    where = where or [f"record {i + 1}" for i in range(len(raw))]
    rec_map = {k: v for k, v in mapping.items() if k in RECORD_FIELDS}
    for std, yours in rec_map.items():
        if std != "input" and not any(yours in r for r in raw):
            seen = sorted({k for r in raw[:100] for k in r})
            raise DataError(f"dataset={source!r}: --dataset-fields maps {std}={yours}, but no record has a field "
                            f"{yours!r} (fields seen: {seen}); fix the mapping")
    formats, out = {}, []
    for rec, loc in zip(raw, where):
        rec = dict(rec)
        for std, yours in rec_map.items():
            if yours in rec:
                rec[std] = rec.pop(yours)
        fmt = next((f for f, (_, keys) in FORMATS.items() if all(k in rec and rec[k] is not None for k in keys)), None)
        if fmt is None:
            raise DataError(f"dataset={source!r}, {loc}: fields {sorted(rec)} match no accepted format. Accepted: "
                            f"{FORMATS_ACCEPTED}. Map other names with --dataset-fields, e.g. "
                            "--dataset-fields messages=dialog or instruction=question,output=answer")
        formats.setdefault(fmt, loc)
        if len(formats) > 1:
            (f1, l1), (f2, l2) = list(formats.items())[:2]
            raise DataError(f"dataset={source!r}: mixed formats: {l1} is {FORMATS[f1][0]}, {l2} is {FORMATS[f2][0]}; "
                            "one dataset holds one format: split the file, one format per file")
        out.append(_check(fmt, rec, f"dataset={source!r}, {loc}", mapping))
    fmt = next(iter(formats))
    return Records(out, fmt, source, list(where))


def _check(fmt: str, rec: dict, at: str, mapping: dict) -> dict:
    """One record in its normalised form (see :class:`Records`), or a DataError naming the field."""
    def text(key, optional=False):
        v = rec.get(key)
        if v is None and optional:
            return ""
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return str(v)
        if not isinstance(v, str):
            raise DataError(f"{at}: field {key!r} is a {type(v).__name__}, not text; give it as a JSON string")
        return v

    if fmt == "alpaca":
        return {"instruction": text("instruction"), "input": text("input", optional=True), "output": text("output")}
    if fmt == "prompt_completion":
        for key in ("prompt", "completion"):
            if isinstance(rec[key], list):
                raise DataError(f"{at}: field {key!r} is a list of messages; prompt/completion records take strings "
                                "here: write the conversation as `messages` instead")
        return {"prompt": text("prompt"), "completion": text("completion")}
    if fmt == "text":
        return {"text": text("text")}
    key = "messages" if fmt == "messages" else "conversations"
    msgs = rec[key]
    if not isinstance(msgs, list):
        raise DataError(f"{at}: field {key!r} is a {type(msgs).__name__}, not a list of messages")
    if not msgs:
        raise DataError(f"{at}: field {key!r} is an empty list; a conversation needs at least a user and an "
                        "assistant turn (drop the record or fill it)")
    role_key = mapping.get("role", "role") if fmt == "messages" else mapping.get("from", "from")
    content_key = mapping.get("content", "content") if fmt == "messages" else mapping.get("value", "value")
    names = {v: k for k, v in mapping.items() if k in CHAT_ROLES}  # your role value -> standard role
    known = dict(SHAREGPT_ROLES) if fmt == "sharegpt" else {r: r for r in CHAT_ROLES}
    known.update(names)
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise DataError(f"{at}: {key}[{i}] is a {type(m).__name__}, not an object with "
                            f"{role_key!r} and {content_key!r}")
        for k in (role_key, content_key):
            if k not in m:
                std = ("role" if fmt == "messages" else "from") if k == role_key else \
                      ("content" if fmt == "messages" else "value")
                hint = (f"; --dataset-fields maps {std}={k}: check that name" if k != std else
                        f"; if your messages name it differently, map it: --dataset-fields {std}=yourname")
                raise DataError(f"{at}: {key}[{i}] has no field {k!r} (fields: {sorted(m)}){hint}")
        role = m[role_key]
        if role not in known:
            accepted = sorted(known)
            raise DataError(f"{at}: {key}[{i}].{role_key}={role!r} is not a known role (accepted: {accepted}); map "
                            "yours with --dataset-fields, e.g. assistant=bot,user=customer, or drop those turns")
        content = m[content_key]
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise DataError(f"{at}: {key}[{i}].{content_key} is a {type(content).__name__}, not text; give each "
                            "message's content as a string")
        out.append({"role": known[role], "content": content})
    if not any(m["role"] == "assistant" for m in out):
        raise DataError(f"{at}: the conversation has no assistant turn (roles: {[m['role'] for m in out]}); there is "
                        "nothing to learn from it: drop it, or map your assistant role name with --dataset-fields "
                        "assistant=yourname")
    return {"messages": out}


# --------------------------------------------------------------------------------------------
# tokenizer

def load_tokenizer(name: str | os.PathLike | None = None, trust_remote_code: bool = False,
                   chat_template: str | os.PathLike | None = None):
    """A tokenizer from a folder (the shipped one when None) or the local hub cache; never downloads.

    Args:
        chat_template: a Jinja file that replaces the tokenizer's chat template (``--chat-template``).

    Raises:
        DataError: the tokenizer cannot be loaded locally, or the template file is missing.
    """
    from transformers import AutoTokenizer
    target = str(name) if name else str(TOKENIZER_DIR)
    try:
        tok = AutoTokenizer.from_pretrained(target, local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"tokenizer={target!r}: cannot be loaded locally ({type(exc).__name__}); pass --tokenizer "
                        "with a folder holding tokenizer.json, or omit it for the shipped tokenizer") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if chat_template:
        p = Path(chat_template)
        if not p.is_file():
            raise DataError(f"--chat-template={str(chat_template)!r}: not a file; pass a Jinja template file, e.g. "
                            f"{TOKENIZER_DIR / 'chat_template.jinja'} (ChatML)")
        tok.chat_template = p.read_text()
    return tok


# --------------------------------------------------------------------------------------------
# tokenization

@dataclass(frozen=True)
class TokenizedData:
    """Tokenized examples, one per record: token ids and labels (-100 where there is no loss).

    Attributes:
        input_ids, labels: lists of ints per example; cut to ``seq_len`` unless tokenized for packing.
        num_truncated: examples cut to ``seq_len`` (not packing).
        seq_len: the row length asked for.
        num_longer: examples longer than ``seq_len`` (cut when not packing, split across rows when packing).
        num_dropped: examples dropped because cutting left them no token to learn from.
        format: the records' format; lengths: each example's full length in tokens.
    """

    input_ids: list
    labels: list
    num_truncated: int
    seq_len: int
    num_longer: int = 0
    num_dropped: int = 0
    format: str = "alpaca"
    lengths: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)


def _encode_alpaca(rec, tok):
    prompt = tok(format_prompt(rec["instruction"], rec.get("input") or ""), add_special_tokens=False)["input_ids"]
    answer = tok(str(rec["output"]), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    if tok.bos_token_id is not None:
        prompt = [tok.bos_token_id] + prompt
    return prompt + answer, [IGNORE_INDEX] * len(prompt) + answer


def _encode_prompt_completion(rec, tok):
    prompt = tok(rec["prompt"], add_special_tokens=False)["input_ids"]
    answer = tok(rec["completion"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    if tok.bos_token_id is not None:
        prompt = [tok.bos_token_id] + prompt
    return prompt + answer, [IGNORE_INDEX] * len(prompt) + answer


def _encode_text(rec, tok):
    ids = tok(rec["text"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    if tok.bos_token_id is not None:
        ids = [tok.bos_token_id] + ids
    return ids, list(ids)


def _renderer(tok):
    """``render(messages, add_generation_prompt) -> str`` with the tokenizer's chat template.

    ``apply_chat_template`` first converts every message to plain data, which costs more than the
    rendering itself once each conversation is rendered prefix by prefix (O(turns²) messages). For
    messages that are already plain ``{role, content}`` strings, this renders with the template that
    ``apply_chat_template`` compiles (``transformers.utils.chat_template_utils._compile_jinja_template``)
    and the same arguments; :func:`_encode_chats` checks on the first conversation that both give the
    same text and otherwise uses ``apply_chat_template`` throughout.
    """
    def slow(msgs, gen=False):
        return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
        compiled = _compile_jinja_template(tok.get_chat_template())
        kwargs = {k: v for k, v in tok.special_tokens_map.items()}
    except Exception:  # noqa: BLE001 - another transformers: the public path
        return slow, slow

    def fast(msgs, gen=False):
        return compiled.render(messages=msgs, tools=None, documents=None, add_generation_prompt=gen, **kwargs)
    return fast, slow


def assistant_spans(messages: list, tok, at: str = "", render=None) -> tuple[str, list]:
    """Render a conversation with the chat template; return (text, [(start, end) character spans of
    the assistant turns]).

    A turn's span runs from the end of the rendering of the messages before it with the generation
    prompt (``add_generation_prompt=True``) to the end of the rendering up to and including it, so it
    holds the content and whatever the template closes the turn with (ChatML: ``<|im_end|>\\n``). An
    assistant turn that opens the conversation is trained from the first character (nothing precedes it).

    Raises:
        DataError: the template fails on the conversation, or its rendering of the conversation does
            not start with the rendering of its first turns (e.g. a template that rewrites earlier turns
            once later ones follow).
    """
    base = render or (lambda msgs, gen=False: tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen))

    def rend(msgs, gen=False):
        if not msgs:
            return ""
        try:
            return base(msgs, gen)
        except Exception as exc:  # noqa: BLE001 - a template that raises (jinja2 errors, raise_exception)
            raise DataError(f"{at}: the chat template failed on this conversation ({type(exc).__name__}: {exc}); "
                            "fix the record, or pass --chat-template FILE with a template that accepts it") from None

    full = rend(messages)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = rend(messages[:i], gen=True)
        upto = rend(messages[:i + 1])
        if not (upto.startswith(before) and full.startswith(upto)):
            raise DataError(f"{at}: the chat template renders the conversation differently from its first turns "
                            f"(at assistant turn {i}), so the assistant tokens cannot be located. Pass --chat-template "
                            "FILE with a template whose rendering of a conversation starts with the rendering of its "
                            "first turns (ChatML: data/tokenizer/chat_template.jinja)")
        if len(upto) > len(before):
            spans.append((len(before), len(upto)))
    return full, spans


def _encode_chats(records: list, tok, where: list) -> list:
    """Token ids and labels of chat records (see :func:`assistant_spans`), tokenized in one batch with
    character offsets; a token is a target when its first character lies in an assistant span."""
    fast, slow = _renderer(tok)
    render = slow
    if records and fast is not slow:
        try:
            if fast(records[0]["messages"]) == slow(records[0]["messages"]):
                render = fast
        except Exception:  # noqa: BLE001 - the public path reports the template's error
            pass
    texts, all_spans = [], []
    for rec, loc in zip(records, where):
        text, spans = assistant_spans(rec["messages"], tok, loc, render)
        texts.append(text)
        all_spans.append(spans)
    enc = tok(texts, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for ids, offsets, spans in zip(enc["input_ids"], enc["offset_mapping"], all_spans):
        labels, k = [], 0
        for tid, (start, _) in zip(ids, offsets):
            while k < len(spans) and start >= spans[k][1]:
                k += 1
            labels.append(tid if k < len(spans) and spans[k][0] <= start < spans[k][1] else IGNORE_INDEX)
        out.append((list(ids), labels))
    return out


_TOKENIZED: dict = {}  # tokenize's results for file records, by (records, tokenizer, seq_len, packing); see there


def _tokenizer_fingerprint(tok) -> tuple:
    files = [Path(tok.name_or_path) / f for f in ("tokenizer.json", "tokenizer_config.json")]
    stamps = tuple(f.stat().st_mtime_ns if f.is_file() else None for f in files)
    return (type(tok).__name__, str(tok.name_or_path), stamps, len(tok), getattr(tok, "chat_template", None),
            tuple(sorted((k, str(v)) for k, v in tok.special_tokens_map.items())))


def tokenize(records, tokenizer, seq_len: int, *, packing: bool = False) -> TokenizedData:
    """Tokenize records with loss only where it belongs (see the module docstring).

    Args:
        records: :class:`Records`, or a list of records (their format is detected).
        packing: keep examples whole (they are split across rows by :func:`make_rows`); otherwise
            examples longer than ``seq_len`` are cut to it (counted), and an example whose cut leaves no
            token to learn from is dropped (counted).

    Raises:
        DataError: ``seq_len`` under 8; chat records and a tokenizer without a chat template; no example
            keeps a token to learn from.
    """
    from .plan import MIN_SEQ_LEN
    if seq_len < MIN_SEQ_LEN:
        raise DataError(f"seq_len={seq_len}: too short to train on: a row of fewer than {MIN_SEQ_LEN} tokens has no "
                        f"room for an instruction and a response; set seq_len to 64 or more (at least {MIN_SEQ_LEN})")
    if not isinstance(records, Records):
        records = normalise(list(records))
    # the launcher and a notebook call this again for the same file: reuse the result (keyed by the file's
    # size and mtime, the field mapping, the tokenizer and its chat template, seq_len, packing)
    key = None
    if records.fingerprint:
        key = (records.fingerprint, _tokenizer_fingerprint(tokenizer), seq_len, packing)
        if key in _TOKENIZED:
            return _TOKENIZED[key]
    data = _tokenize(records, tokenizer, seq_len, packing)
    if key:
        if len(_TOKENIZED) >= 4:
            _TOKENIZED.pop(next(iter(_TOKENIZED)))
        _TOKENIZED[key] = data
    return data


def _tokenize(records: Records, tokenizer, seq_len: int, packing: bool) -> TokenizedData:
    fmt, source = records.format, records.source
    if fmt in ("messages", "sharegpt"):
        if not getattr(tokenizer, "chat_template", None):
            raise DataError(f"dataset={source!r}: {records.describe()} records are rendered with the tokenizer's chat "
                            f"template, and tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has none. Pass "
                            f"--chat-template FILE (a Jinja file; ChatML, as Qwen uses: "
                            f"{TOKENIZER_DIR / 'chat_template.jinja'}) or a --tokenizer that has one")
        where = records.where or [f"record {i + 1}" for i in range(len(records))]
        encoded = _encode_chats(list(records), tokenizer, [f"dataset={source!r}, {w}" for w in where])
    else:
        enc = {"alpaca": _encode_alpaca, "prompt_completion": _encode_prompt_completion, "text": _encode_text}[fmt]
        encoded = [enc(rec, tokenizer) for rec in records]
    ids_out, labels_out, lengths, truncated, longer, dropped = [], [], [], 0, 0, 0
    for ids, labels in encoded:
        lengths.append(len(ids))
        if len(ids) > seq_len:
            longer += 1
            if not packing:
                truncated += 1
                ids, labels = ids[:seq_len], labels[:seq_len]
        if all(x == IGNORE_INDEX for x in labels[1:]):  # labels[0] is never a target (the model shifts)
            dropped += 1
            continue
        ids_out.append(ids)
        labels_out.append(labels)
    if not ids_out:
        raise DataError(f"seq_len={seq_len}: no example keeps a token to learn from (every prompt fills the "
                        "sequence, or no record has a response); raise --seq-len")
    return TokenizedData(ids_out, labels_out, truncated, seq_len, longer, dropped, fmt, lengths)


# --------------------------------------------------------------------------------------------
# rows: packed or one example each

@dataclass(frozen=True)
class Rows:
    """What training iterates over: one row per sample index of :func:`sample_order`.

    Attributes:
        input_ids, labels: per row, lists of ints; ``position_ids`` per row when packed, else None.
        real_tokens: per row, tokens that are not padding.
        seq_len: ``--seq-len``. packing: rows are packed.
        examples: examples that went in. longer: examples longer than ``seq_len``.
        split: examples spread over more than one row (packing). cut: examples cut to ``seq_len``
        (not packing). dropped: examples with nothing left to learn after the cut. empty_rows: packed rows
        left out because no token in them is trained on (a stretch of a long prompt).
    """

    input_ids: list
    labels: list
    position_ids: list | None
    real_tokens: list
    seq_len: int
    packing: bool
    examples: int
    longer: int = 0
    split: int = 0
    cut: int = 0
    dropped: int = 0
    empty_rows: int = 0

    def __len__(self) -> int:
        return len(self.input_ids)

    def batch(self, indices, pad_id: int, flatten: bool = False) -> dict:
        """LongTensors for the rows at ``indices``.

        Packed: ``input_ids``, ``labels``, ``position_ids`` of shape [micro_batch, seq_len] and no
        ``attention_mask`` (transformers then builds the per-example mask from ``position_ids``); with
        ``flatten`` (flash-attention, which reads example boundaries from ``position_ids`` only in a
        batch of one row) of shape [1, micro_batch × seq_len]. Not packed: right-padded to the longest
        row of the micro batch, with ``attention_mask`` (see :func:`collate`).
        """
        import torch
        if not self.packing:
            return collate([self.input_ids[i] for i in indices], [self.labels[i] for i in indices], pad_id)
        out = {k: torch.tensor([getattr(self, k)[i] for i in indices], dtype=torch.long)
               for k in ("input_ids", "labels", "position_ids")}
        if flatten:
            out = {k: v.reshape(1, -1) for k, v in out.items()}
        return out

    def stats(self) -> dict:
        """Facts for the log and the summary: rows, real tokens per row, packing efficiency."""
        real = self.real_tokens
        slots = len(real) * self.seq_len if self.packing else sum(len(x) for x in self.input_ids)
        return {"packing": self.packing, "rows": len(real), "examples": self.examples,
                "row_tokens_mean": round(sum(real) / len(real), 2), "row_tokens_max": max(real),
                "row_tokens_min": min(real), "real_tokens": sum(real),
                "packing_efficiency": round(sum(real) / slots, 5) if slots else None,
                "longer_than_seq_len": self.longer, "split_examples": self.split, "cut_examples": self.cut,
                "dropped_examples": self.dropped, "rows_without_targets_left_out": self.empty_rows}

    def describe(self) -> str:
        """One log line: what a row holds. Counts that are zero are left out.

        Packing: examples longer than ``--seq-len`` are cut into pieces of at most ``seq_len`` tokens in
        consecutive rows, and every piece is trained on (no token is thrown away); shorter examples that
        start near a row's end continue into the next row too. Not packing: examples longer than
        ``--seq-len`` keep their first ``seq_len`` tokens (the rest is not trained on)."""
        s = self.stats()
        if self.packing:
            last = self.real_tokens[-1]
            text = (f"packing on: {s['examples']:,} examples in {s['rows']:,} rows of exactly {self.seq_len} tokens"
                    + (f" (the last holds {last} real tokens + {self.seq_len - last} padding)" if last < self.seq_len else "")
                    + f"; packing efficiency {100 * s['packing_efficiency']:.2f}% (real tokens / token slots)")
            longer, others = s["longer_than_seq_len"], max(0, s["split_examples"] - s["longer_than_seq_len"])
            if longer:
                text += (f"; {longer:,} example(s) longer than --seq-len {self.seq_len} were split into pieces of at "
                         f"most {self.seq_len} tokens in consecutive rows, every piece kept for training (none cut off)")
            if others:
                text += (f"; {others:,} shorter example(s) start near the end of a row and continue into the next")
            if s["split_examples"]:
                text += " (position_ids restart in each row: a continuation does not see its beginning)"
            if self.empty_rows:
                text += f"; {self.empty_rows:,} row(s) with no token to learn from (inside a long prompt) left out"
            return text
        return (f"packing off: one example per row, padded to the longest row of each micro batch; real tokens per "
                f"row: mean {s['row_tokens_mean']:.1f}, max {s['row_tokens_max']} of --seq-len {self.seq_len}"
                + (" (rows are shorter than --seq-len: tokens/s, MFU and memory describe these rows)"
                   if s["row_tokens_mean"] < self.seq_len else "")
                + (f"; {s['cut_examples']:,} example(s) longer than --seq-len were cut to their first {self.seq_len} "
                   "tokens (the rest is not trained on)" if s["cut_examples"] else "")
                + (f"; {s['dropped_examples']:,} dropped (nothing left to learn after the cut)" if s["dropped_examples"] else ""))


def make_rows(data: TokenizedData, seq_len: int, *, packing: bool, seed: int = 0, pad_id: int = 0,
              drop_empty: bool = True) -> Rows:
    """Rows for training.

    Packing: the examples, in the order of ``torch.randperm`` seeded with ``seed`` (a pure function of
    the seed, so a resumed run packs the same rows), are concatenated and cut into rows of exactly
    ``seq_len`` tokens; each row is assembled by transformers' ``DataCollatorWithFlattening``
    (``position_ids`` restarting at 0 per piece, first label of each piece -100). The last row is
    filled with ``pad_id`` as a piece of its own (labels -100). Examples longer than ``seq_len``
    (tokenized with ``packing=True``, i.e. whole) are split across rows. With ``drop_empty``, packed
    rows in which no token is trained on (a stretch of a long prompt) are left out and counted: a
    micro batch of such rows would have a loss of 0/0.

    Not packing: one example per row, cut to ``seq_len``; an example left with no token to learn
    from by the cut is dropped (counted).
    """
    import torch
    n = len(data)
    if not packing:
        ids, labels, dropped = [], [], data.num_dropped
        for x, y in zip(data.input_ids, data.labels):
            x, y = x[:seq_len], y[:seq_len]
            if all(t == IGNORE_INDEX for t in y[1:]):
                dropped += 1
                continue
            ids.append(x)
            labels.append(y)
        if not ids:
            raise DataError(f"seq_len={seq_len}: no example keeps a token to learn from once cut to --seq-len; "
                            "raise --seq-len or turn on packing")
        cut = sum(len(x) > seq_len for x in data.input_ids)
        return Rows(ids, labels, None, [len(x) for x in ids], seq_len, False, n, longer=data.num_longer,
                    cut=max(cut, data.num_truncated), dropped=dropped)
    from transformers import DataCollatorWithFlattening
    collator = DataCollatorWithFlattening(return_tensors="np")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    rows_ids, rows_labels, rows_pos, real = [], [], [], []
    pieces, space, split = [], seq_len, 0

    def flush(pad: int = 0):
        feats = pieces + ([{"input_ids": [pad_id] * pad, "labels": [IGNORE_INDEX] * pad}] if pad else [])
        b = collator(feats)
        rows_ids.append(b["input_ids"][0].tolist())
        rows_labels.append(b["labels"][0].tolist())
        rows_pos.append(b["position_ids"][0].tolist())
        real.append(seq_len - pad)

    for i in order:
        ids, labels = data.input_ids[i], data.labels[i]
        pos, rows_touched = 0, 0
        while pos < len(ids):
            take = min(space, len(ids) - pos)
            pieces.append({"input_ids": ids[pos:pos + take], "labels": labels[pos:pos + take]})
            pos += take
            space -= take
            rows_touched += 1
            if space == 0:
                flush()
                pieces, space = [], seq_len
        split += rows_touched > 1
    if pieces:
        flush(pad=space)
    # a row with no token to learn from (a stretch of a long prompt) would give a micro batch of one row
    # a loss of 0/0: such rows are left out, and counted
    keep = [k for k, y in enumerate(rows_labels) if not drop_empty or any(t != IGNORE_INDEX for t in y)]
    if not keep:
        raise DataError(f"seq_len={seq_len}: no packed row holds a token to learn from; check the data's labels")
    pick = lambda xs: [xs[k] for k in keep]  # noqa: E731
    return Rows(pick(rows_ids), pick(rows_labels), pick(rows_pos), pick(real), seq_len, True, n,
                longer=data.num_longer, split=split, dropped=data.num_dropped, empty_rows=len(rows_ids) - len(keep))


def collate(batch_ids: list, batch_labels: list, pad_id: int):
    """Right-pad a micro batch. Returns dict of LongTensors ``input_ids``, ``labels``,
    ``attention_mask``, each of shape [micro_batch, longest sequence in the batch]."""
    import torch
    width = max(len(x) for x in batch_ids)
    ids = torch.full((len(batch_ids), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch_ids), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(batch_ids), width), dtype=torch.long)
    for i, (x, y) in enumerate(zip(batch_ids, batch_labels)):
        ids[i, :len(x)] = torch.tensor(x)
        labels[i, :len(y)] = torch.tensor(y)
        mask[i, :len(x)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


# --------------------------------------------------------------------------------------------
# does the attention keep packed examples apart?

#: What a block-diagonal mask costs on a GPU with ``sdpa``: PyTorch's flash kernel takes no ``attn_mask``
#: (``torch.nn.functional.scaled_dot_product_attention`` docs: with a mask it picks the memory-efficient or
#: math kernel), so packed rows with example boundaries run slower than unmasked rows. Measured on one H200
#: capped at 24 GiB, 3.4B LLaMA shape, ZeRO-2 + optimizer offload, micro batch 16, seq 1024, bf16 states, as the
#: ratio of packed to unmasked tokens/s: the cookbook's loop and the HF Trainer with one example per row (source:
#: evidence :data:`SDPA_PACKED_EVIDENCE`); GPU allocated +2.9 GiB.
SDPA_PACKED_EVIDENCE = ("sdpa.packed_mask", "sdpa.packed_mask_trainer")


def _sdpa_packed_cost() -> tuple[float, float]:
    from .evidence import get
    return tuple(round(get(k).ratio, 2) for k in SDPA_PACKED_EVIDENCE)


SDPA_PACKED_COST = _sdpa_packed_cost()


def _sdpa_packed_cite() -> str:
    from .evidence import get
    first, second = (get(k) for k in SDPA_PACKED_EVIDENCE)
    return f"{first.cite()}, `{second.key}`"


def packed_attention_cost_note(attention: dict, *, packing: bool, on_gpu: bool) -> str | None:
    """The throughput note for packed rows on a GPU's ``sdpa`` path (:data:`SDPA_PACKED_COST`), or None where it
    does not apply (no packing, not a GPU, another attention implementation, or one that does not keep examples
    apart). ``attention``: :func:`packing_attention`'s result."""
    if not (packing and on_gpu and attention.get("implementation") == "sdpa" and attention.get("within_examples")
            and not attention.get("flatten")):
        return None
    lo, hi = SDPA_PACKED_COST
    return (f"packed rows reach sdpa with a block-diagonal mask, which keeps PyTorch off its flash kernel: measured "
            f"{lo:.2f}–{hi:.2f}× the tokens/s of unmasked rows (3.4B, seq 1024, H200; {_sdpa_packed_cite()}). "
            "Faster: `pip install flash-attn` (varlen kernels; the cookbook flattens each micro batch for them), or "
            "--no-packing, which cuts every example to --seq-len (tokens past it are not trained)")

def _block_mask_as_dense(mask, n: int):
    """A FlexAttention ``BlockMask`` (what transformers' ``flex_attention`` path returns) as the boolean
    ``[1, 1, n, n]`` mask its ``mask_mod`` defines token by token; anything else is returned as it is."""
    mask_mod = getattr(mask, "mask_mod", None)
    if mask_mod is None or not callable(mask_mod):
        return mask
    import torch
    z = torch.tensor(0)
    rows = [[bool(mask_mod(z, z, torch.tensor(q), torch.tensor(k))) for k in range(n)] for q in range(n)]
    return torch.tensor(rows).view(1, 1, n, n)


def packing_attention(model) -> dict:
    """Whether this model's attention keeps each packed example to itself, checked on its own config.

    transformers (5.x, ``masking_utils``) builds the causal mask of the ``sdpa``, ``eager`` and
    ``flex_attention`` paths block-diagonal when ``attention_mask`` is None and ``position_ids``
    restart inside a row (``find_packed_sequence_indices``). The check calls ``create_causal_mask``
    with the model's config on positions [0, 1, 2, 0, 1, 2] and looks at the mask it returns (for
    ``flex_attention`` a ``BlockMask``, read through its ``mask_mod``; ``dense_mask`` False then: no
    ``b·s²`` mask is stored).
    ``flash_attention_*`` read the example boundaries from ``position_ids`` (varlen kernels) only when
    the batch is one row (``_is_packed_sequence``), so micro batches are then flattened to one row.
    Models whose code is not transformers' own are not checked (within_examples False).

    Returns:
        ``{"implementation", "within_examples", "flatten", "dense_mask", "how"}``.
    """
    import inspect

    import torch
    config = getattr(model, "config", model)
    impl = getattr(config, "_attn_implementation", None) or "eager"
    module = type(model).__module__ if hasattr(model, "config") else "transformers."
    res = {"implementation": impl, "within_examples": False, "flatten": False, "dense_mask": impl != "flex_attention"}
    if not module.startswith("transformers."):
        res["how"] = (f"the model's own code ({module}) builds its attention mask; not checked, so examples in a "
                      "row may attend to each other")
        return res
    if impl.startswith("flash_attention"):
        try:
            from transformers.modeling_flash_attention_utils import _is_packed_sequence  # noqa: F401
        except ImportError:
            res["how"] = f"{impl}: this transformers has no packed-sequence detection; examples in a row attend to each other"
            return res
        res.update(within_examples=True, flatten=True, dense_mask=False,
                   how=f"{impl}: varlen kernels with example boundaries from position_ids (micro batch flattened "
                       "to one row, as DataCollatorWithFlattening does); nothing crosses example boundaries")
        return res
    try:
        from transformers.masking_utils import create_causal_mask
        params = inspect.signature(create_causal_mask).parameters
        pos = torch.tensor([[0, 1, 2, 0, 1, 2]])
        kwargs = {"config": config, "attention_mask": None, "position_ids": pos}
        kwargs["inputs_embeds" if "inputs_embeds" in params else "input_embeds"] = torch.zeros(1, 6, 1)
        for name in ("cache", "past_key_values"):
            if name in params:
                kwargs[name] = None
        if "cache_position" in params:
            kwargs["cache_position"] = torch.arange(6)
        mask = create_causal_mask(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the answer is then "not kept apart"
        res["how"] = f"{impl}: the mask check failed ({type(exc).__name__}: {exc}); examples in a row may attend to each other"
        return res
    mask = _block_mask_as_dense(mask, 6)
    if not isinstance(mask, torch.Tensor) or mask.dim() != 4:
        res["how"] = (f"{impl}: transformers returned no explicit mask for packed positions (plain causal attention); "
                      "examples in a row attend to the earlier examples of the row")
        return res
    allowed = mask[0, 0] if mask.dtype == torch.bool else mask[0, 0] == 0
    if bool(allowed[4, 3]) and bool(allowed[2, 0]) and not bool(allowed[3, 2]) and not bool(allowed[5, 0]):
        kind = "a document BlockMask" if impl == "flex_attention" else "a block-diagonal causal mask"
        res.update(within_examples=True,
                   how=f"{impl}: transformers builds {kind} from the per-example position_ids "
                       "(masking_utils.find_packed_sequence_indices); nothing crosses example boundaries")
    else:
        res["how"] = f"{impl}: the causal mask spans the whole row; examples attend to the earlier examples of the row"
    return res


def sample_order(num_examples: int, seed: int, step: int, micro_step: int, rank: int,
                 micro_batch: int, grad_accum: int, world_size: int) -> list[int]:
    """Indices of the examples (rows) for one micro batch: a pure function of the step, so a resumed
    run sees exactly the data an uninterrupted run would.

    Epoch e is ``torch.randperm(num_examples)`` seeded with ``seed + e``; the global batch of
    optimizer step s takes the next ``micro_batch × grad_accum × world_size`` positions (wrapping
    into the next epoch), laid out [micro_step][rank][micro_batch].
    """
    import torch
    per_step = micro_batch * grad_accum * world_size
    start = step * per_step + (micro_step * world_size + rank) * micro_batch
    out, cache = [], {}
    for pos in range(start, start + micro_batch):
        epoch, offset = divmod(pos, num_examples)
        if epoch not in cache:
            cache[epoch] = torch.randperm(num_examples, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        out.append(cache[epoch][offset])
    return out
