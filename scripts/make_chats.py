"""Generate the shipped chat dataset data/chats.jsonl (written here, nothing copied).

Each record is ``{"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}``: a
multi-turn conversation in the format of OpenAI-style chat data, rendered for training with the
tokenizer's chat template (the shipped tokenizer's is ChatML). The turns are the small, checkable
tasks of ``scripts/make_dataset.py`` (arithmetic, string edits, lists, units, number words, ...),
follow-ups that refer to the previous answer ("say that again in capital letters"), and long-answer
tasks (counting in words, multiplication tables, sorting long word lists) whose size is drawn
log-uniformly, so that conversation lengths spread from a few dozen tokens to several thousand with
the shipped tokenizer — long enough to fill sequences of 2048-4096 tokens without padding.

Deterministic: seed 4321. Run: python scripts/make_chats.py [N]   (then scripts/make_tokenizer.py,
which trains the tokenizer on this file and data/instructions.jsonl; the lengths are measured with it.)
"""
import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_dataset import WORDS, task, words  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "data" / "chats.jsonl"

SYSTEMS = [
    "You are a careful assistant. Answer exactly what is asked, briefly.",
    "You are a patient tutor for arithmetic and word puzzles. Give the answer, then stop.",
    "You are a helpful assistant that works through small exercises step by step.",
    "Answer in plain English. Keep numbers as digits unless asked to write them in words.",
    "You help with homework sheets: numbers, words and lists.",
]
LEADS = ["", "", "", "Sure. ", "Here it is: ", "The answer: ", "Done: "]
THANKS = [("Thanks!", "You're welcome."), ("Great, thank you.", "Glad to help."),
          ("Perfect.", "Happy to help. Anything else?"), ("Thank you very much.", "You're welcome!")]


def user_text(rec: dict, rng: random.Random) -> str:
    style = rng.randrange(3)
    if not rec["input"]:
        return rec["instruction"]
    if style == 0:
        return f"{rec['instruction']}\n{rec['input']}"
    if style == 1:
        return f"{rec['instruction']} {rec['input']}"
    return f"{rec['input']}\n\n{rec['instruction']}"


def long_task(rng: random.Random, size: int) -> tuple[str, str]:
    """A task whose answer has about ``size`` items (a few tokens each)."""
    kind = rng.randrange(4)
    if kind == 0:
        a = rng.randint(0, 400)
        b = min(999, a + size)
        return (f"Count from {a} to {b} in words, separated by commas.",
                ", ".join(words(n) for n in range(a, b + 1)) + ".")
    if kind == 1:
        n = rng.randint(2, 99)
        return (f"Write the multiplication table of {n} from 1 to {size}, one line each.",
                "\n".join(f"{n} × {i} = {n * i}" for i in range(1, size + 1)))
    if kind == 2:
        ws = [rng.choice(WORDS) for _ in range(size)]
        return ("Sort these words alphabetically:\n" + " ".join(ws), " ".join(sorted(ws)))
    ws = [rng.choice(WORDS) for _ in range(size)]
    return ("Spell each of these words backwards, in the same order:\n" + " ".join(ws),
            " ".join(w[::-1] for w in ws))


def short_turn(rng: random.Random) -> tuple[str, str]:
    rec = task(rng)
    return user_text(rec, rng), rng.choice(LEADS) + rec["output"]


def conversation(rng: random.Random) -> list[dict]:
    msgs = []
    if rng.random() < 0.7:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
    r = rng.random()
    if r < 0.40:
        n_short, n_long = 1, 0
    elif r < 0.65:
        n_short, n_long = rng.randint(2, 6), 0
    elif r < 0.82:
        n_short, n_long = rng.randint(7, 40), 0
    else:
        n_short, n_long = rng.randint(0, 6), rng.randint(1, 2)
    kinds = ["short"] * n_short + ["long"] * n_long
    rng.shuffle(kinds)
    last_answer = None
    for kind in kinds:
        if kind == "long":
            size = int(math.exp(rng.uniform(math.log(20), math.log(400))))
            user, answer = long_task(rng, size)
        elif last_answer and rng.random() < 0.15:
            user, answer = rng.choice([("Say that again in capital letters.", last_answer.upper()),
                                       ("Repeat your last answer, please.", last_answer),
                                       ("Write your last answer backwards.", last_answer[::-1])])
        else:
            user, answer = short_turn(rng)
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        last_answer = answer if len(answer) < 200 else None
        if rng.random() < 0.08:
            user, answer = rng.choice(THANKS)
            msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return msgs


def main(n: int = 1500) -> None:
    rng = random.Random(4321)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w") as f:
        for _ in range(n):
            f.write(json.dumps({"messages": conversation(rng)}, ensure_ascii=False) + "\n")
    print(f"wrote {n} conversations to {OUT} ({OUT.stat().st_size / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1500)
