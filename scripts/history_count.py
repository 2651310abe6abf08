#!/usr/bin/env python3
"""Count measurement history in cookbook/*.py: dated strings, data/reference|raw paths, 'measured', numbered rounds."""
import ast, io, re, sys, tokenize
from pathlib import Path
DATE = re.compile(r"20\d\d-\d\d-\d\d")
PATH = re.compile(r"data/reference/|\braw/")
MEAS = re.compile(r"measured", re.I)
ROUND = re.compile(r"\b(session|call|round)s? \d+", re.I)
def docstring_ids(tree):
    ids = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            b = n.body
            if b and isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant) and isinstance(b[0].value.value, str):
                ids.add(id(b[0].value))
    return ids

def main():
    rows = []
    tot = [0]*9
    for f in sorted(Path(sys.argv[1] if len(sys.argv)>1 else "cookbook").glob("*.py")):
        src = f.read_text()
        tree = ast.parse(src)
        docs = docstring_ids(tree)
        lit, doc = [], []
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                (doc if id(n) in docs else lit).append(n.value)
        comments = [t.string for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.COMMENT]
        cd = doc + comments
        c = lambda rx, xs: sum(len(rx.findall(x)) for x in xs)
        r = [c(DATE, lit), c(DATE, cd), c(PATH, lit), c(PATH, cd), c(MEAS, lit), c(MEAS, cd), c(ROUND, lit), c(ROUND, cd)]
        r.append(sum(r))
        tot = [a+b for a,b in zip(tot, r)]
        if r[-1]: rows.append((f.name, r))
    hdr = ["module", "date:lit", "date:doc", "path:lit", "path:doc", "meas:lit", "meas:doc", "round:lit", "round:doc", "all"]
    print("| " + " | ".join(hdr) + " |"); print("|" + "---|"*len(hdr))
    for name, r in sorted(rows, key=lambda x: -x[1][-1]):
        print("| " + " | ".join([name] + [str(x) for x in r]) + " |")
    print("| **total** | " + " | ".join(str(x) for x in tot) + " |")

if __name__ == '__main__':
    main()
