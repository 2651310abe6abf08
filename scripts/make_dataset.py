"""Generate the shipped instruction-tuning set data/instructions.jsonl (written here, nothing copied).

Each record has ``instruction``, ``input`` and ``output``. Tasks are small, checkable transformations
(arithmetic, string edits, lists, units, number words, parity, sequences, a few word-pair lookups
written by hand for this project), phrased with several instruction templates each, so a tiny model's
loss visibly falls while the text stays varied. Deterministic: seed 1234.
Run: python scripts/make_dataset.py [N]
"""
import json
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "data" / "instructions.jsonl"
WORDS = ("apple river stone cloud garden window silver forest candle rocket pencil harbor meadow "
         "violin lantern orange bridge mirror planet castle ocean thunder pepper marble falcon "
         "summer winter autumn spring valley desert island canyon engine signal puzzle ticket").split()
ANTONYMS = {"hot": "cold", "big": "small", "fast": "slow", "early": "late", "open": "closed",
            "light": "dark", "happy": "sad", "full": "empty", "strong": "weak", "high": "low",
            "old": "new", "hard": "soft", "wet": "dry", "loud": "quiet", "rich": "poor",
            "up": "down", "first": "last", "near": "far", "thick": "thin", "clean": "dirty"}
ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def words(n: int) -> str:
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    rest = n % 100
    return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + words(rest))


def task(rng: random.Random) -> dict:
    kind = rng.randrange(14)
    if kind == 0:
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        ins = rng.choice(["Add the two numbers.", "What is the sum of these numbers?", "Compute a + b."])
        return dict(instruction=ins, input=f"{a} and {b}", output=f"{a} + {b} = {a + b}")
    if kind == 1:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        ins = rng.choice(["Multiply the numbers.", "What is the product?", "Compute a × b."])
        return dict(instruction=ins, input=f"{a} and {b}", output=f"{a} × {b} = {a * b}")
    if kind == 2:
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        ins = rng.choice(["Subtract the second number from the first.", "What is the difference a - b?"])
        return dict(instruction=ins, input=f"a = {a}, b = {b}", output=f"{a} - {b} = {a - b}")
    if kind == 3:
        w = rng.choice(WORDS)
        ins = rng.choice(["Reverse the letters of the word.", "Spell this word backwards.", "Write the word in reverse order."])
        return dict(instruction=ins, input=w, output=w[::-1])
    if kind == 4:
        ws = rng.sample(WORDS, rng.randint(2, 5))
        ins = rng.choice(["Convert the text to upper case.", "Write this in capital letters."])
        return dict(instruction=ins, input=" ".join(ws), output=" ".join(ws).upper())
    if kind == 5:
        xs = [rng.randint(0, 99) for _ in range(rng.randint(3, 8))]
        order = rng.choice(["ascending", "descending"])
        ys = sorted(xs, reverse=order == "descending")
        return dict(instruction=f"Sort the numbers in {order} order.", input=", ".join(map(str, xs)),
                    output=", ".join(map(str, ys)))
    if kind == 6:
        w = rng.choice(WORDS)
        n = sum(c in "aeiou" for c in w)
        ins = rng.choice(["How many vowels are in the word?", "Count the vowels in this word."])
        return dict(instruction=ins, input=w, output=f"The word \"{w}\" has {n} vowel{'s' if n != 1 else ''}.")
    if kind == 7:
        xs = [rng.randint(-50, 150) for _ in range(rng.randint(3, 7))]
        which = rng.choice(["largest", "smallest"])
        v = max(xs) if which == "largest" else min(xs)
        return dict(instruction=f"Find the {which} number in the list.", input=" ".join(map(str, xs)),
                    output=f"The {which} number is {v}.")
    if kind == 8:
        unit = rng.choice([("kilometres", "metres", 1000), ("hours", "minutes", 60), ("minutes", "seconds", 60),
                           ("kilograms", "grams", 1000), ("days", "hours", 24), ("metres", "centimetres", 100)])
        q = rng.randint(1, 99)
        return dict(instruction=f"Convert {unit[0]} to {unit[1]}.", input=f"{q} {unit[0]}",
                    output=f"{q} {unit[0]} is {q * unit[2]} {unit[1]}.")
    if kind == 9:
        n = rng.randint(0, 999)
        ins = rng.choice(["Write the number in English words.", "Spell out this number."])
        return dict(instruction=ins, input=str(n), output=words(n))
    if kind == 10:
        n = rng.randint(0, 9999)
        ins = rng.choice(["Is the number even or odd?", "Tell me whether this number is even or odd."])
        return dict(instruction=ins, input=str(n), output=f"{n} is {'even' if n % 2 == 0 else 'odd'}.")
    if kind == 11:
        start, step = rng.randint(-20, 50), rng.randint(1, 12)
        seq = [start + i * step for i in range(5)]
        return dict(instruction="Continue the sequence with the next two numbers.", input=", ".join(map(str, seq)),
                    output=f"{seq[-1] + step}, {seq[-1] + 2 * step}")
    if kind == 12:
        a, b = rng.choice(list(ANTONYMS.items()))
        if rng.random() < 0.5:
            a, b = b, a
        ins = rng.choice(["Give the opposite of the word.", "What is the antonym?"])
        return dict(instruction=ins, input=a, output=b)
    ws = rng.sample(WORDS, rng.randint(3, 6))
    ins = rng.choice(["Join the words with hyphens.", "Connect these words using dashes."])
    return dict(instruction=ins, input=" ".join(ws), output="-".join(ws))


def main(n: int = 3000) -> None:
    rng = random.Random(1234)
    seen, rows = set(), []
    while len(rows) < n:
        row = task(rng)
        key = (row["instruction"], row["input"])
        if key not in seen:
            seen.add(key)
            rows.append(row)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} examples to {OUT}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
