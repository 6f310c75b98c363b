"""Stage A documents: synthetic text that can only be predicted by copying from earlier in the document.

Each generator is a pure function of its ``rng`` (and the word pool), returning a :class:`SynthDoc`: either token
ids directly (random-token repeats) or a chat conversation in the agent's own format (Qwen3 tool calls, rendered
by ``repro.tokenizer.ChatEncoder`` without the tool schemas, to keep documents short), plus the character spans of
assistant turns that probes score exactly (``targets``: (assistant turn index, start, end) in that turn's text).

Kinds (the names the mixtures in ``repro.pretrain.schema`` use):

- ``repeat``: a run of 12-64 random token ids, then the same run again; loss on the second copy only — the
  induction task (Olsson et al. 2022, "In-context Learning and Induction Heads").
- ``kv``: ``key = value`` lines of made-up words, then lookups ``get key: value``; loss on the looked-up values.
- ``line``: a synthetic Python module, then ``line N of the module: <exact line>``; loss on the copied line.
- ``episode``: an agent episode in the mini world's workflow — a problem statement naming a test file, the file
  listing, ``read_file`` of the module (the path copied from the listing), the module source, ``edit_file`` whose
  ``old`` is the exact buggy line copied from the source and ``new`` the fix, ``run_tests``, ``finish``. Loss on
  the assistant turns. With the ``known`` pool its names come from a small fixed pool (structure first); with the
  ``train`` pool every name is fresh.

Not covered: natural language. Stage B (``repro.pretrain.world``) brings the mini world's own text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.tools import format_tool_call
from repro.pretrain.words import Pool, draw

SYSTEM = "You fix bugs in a Python repository with the tools. Finish with a short summary."
_OPS = {"+": "-", "-": "+", "*": "+", "<": "<=", ">": ">=", "<=": "<", ">=": ">"}


@dataclass(frozen=True)
class SynthDoc:
    kind: str
    ids: tuple[int, ...] = ()                 # token-level documents (repeat)
    act: tuple[int, ...] = ()
    messages: tuple[dict, ...] = ()           # chat documents
    loss_on: str = "assistant"                # chat documents: "assistant" turns
    targets: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # name -> (turn, start, end)


def repeat_doc(rng: random.Random, *, lo_id: int, hi_id: int, min_len: int = 12, max_len: int = 64) -> SynthDoc:
    """Random ids x (uniform in [lo_id, hi_id)), then x again; act = 1 on the second copy."""
    n = rng.randint(min_len, max_len)
    x = [rng.randrange(lo_id, hi_id) for _ in range(n)]
    return SynthDoc("repeat", ids=tuple(x + x), act=tuple([0] * n + [1] * n))


def _ident(rng: random.Random, pool: Pool, parts: int = 2) -> str:
    return "_".join(draw(rng, pool) for _ in range(parts))


def _function(rng: random.Random, pool: Pool) -> tuple[str, list[str], list[int]]:
    """(name, source lines, indices of lines with a binary operator that a bug can flip)."""
    name, a, b = _ident(rng, pool), draw(rng, pool), draw(rng, pool)
    lines = [f"def {name}({a}, {b}):"]
    flippable = []
    local = a
    for _ in range(rng.randint(1, 3)):
        var = draw(rng, pool)
        op = rng.choice(("+", "-", "*"))
        lines.append(f"    {var} = {local} {op} {rng.choice((b, str(rng.randint(2, 99))))}")
        flippable.append(len(lines) - 1)
        local = var
    if rng.random() < 0.5:
        cmp = rng.choice(("<", ">", "<=", ">="))
        lines += [f"    if {local} {cmp} {rng.randint(0, 500)}:", f"        return {b}"]
        flippable.append(len(lines) - 2)
    lines.append(f"    return {local}")
    return name, lines, flippable


def module_source(rng: random.Random, pool: Pool) -> tuple[str, list[tuple[str, int]]]:
    """A module of 2-4 functions; returns (source, [(function name, line index of a flippable line)])."""
    lines: list[str] = []
    spots: list[tuple[str, int]] = []
    for k in range(rng.randint(2, 4)):
        if k:
            lines += ["", ""]
        name, body, flip = _function(rng, pool)
        base = len(lines)
        lines += body
        spots += [(name, base + i) for i in flip]
    return "\n".join(lines) + "\n", spots


def _flip(line: str) -> tuple[str, str, str]:
    """(new line, old op, new op) with the first operator of ``line`` flipped."""
    toks = line.split(" ")
    for i, t in enumerate(toks):
        if t in _OPS:
            toks[i] = _OPS[t]
            return " ".join(toks), t, _OPS[t]
    raise ValueError(f"no operator in {line!r}")


def kv_doc(rng: random.Random, pool: Pool) -> SynthDoc:
    """``key = value`` lines, then lookups; loss on the looked-up values (assistant turn)."""
    pairs = {draw(rng, pool): rng.choice((draw(rng, pool), str(rng.randint(0, 9999)))) for _ in range(rng.randint(3, 10))}
    keys = list(pairs)
    table = "\n".join(f"{k} = {v}" for k, v in pairs.items())
    asked = rng.sample(keys, min(len(keys), rng.randint(1, 3)))
    answer = "\n".join(f"get {k}: {pairs[k]}" for k in asked)
    msgs = ({"role": "user", "content": f"{table}\n\nLook up: {', '.join(asked)}"},
            {"role": "assistant", "content": answer})
    return SynthDoc("kv", messages=msgs)


def line_doc(rng: random.Random, pool: Pool) -> SynthDoc:
    """A module, then the exact text of one of its lines (1-based line number asked)."""
    src, _ = module_source(rng, pool)
    lines = src.splitlines()
    choices = [i for i, ln in enumerate(lines) if ln.strip()]
    i = rng.choice(choices)
    msgs = ({"role": "user", "content": f"{src}\nQuote line {i + 1} exactly."},
            {"role": "assistant", "content": lines[i].strip()})
    return SynthDoc("line", messages=msgs, targets={"line": (0, 0, len(lines[i].strip()))})


def _span(call: str, value: str) -> tuple[int, int]:
    import json

    quoted = json.dumps(value, ensure_ascii=False)[1:-1]
    s = call.index(quoted)
    return s, s + len(quoted)


def episode_doc(rng: random.Random, pool: Pool) -> SynthDoc:
    """A synthetic mini-world episode (module docstring); targets ``path`` (read_file) and ``old`` (edit_file)."""
    pkg = _ident(rng, pool)
    mods: list[str] = []
    n_mods = rng.randint(2, 4)
    while len(mods) < n_mods:
        m = draw(rng, pool)
        if m not in mods:
            mods.append(m)
    mod = rng.choice(mods)
    src, spots = module_source(rng, pool)
    func, li = rng.choice(spots)
    lines = src.splitlines()
    old = lines[li].strip()
    new, op_old, op_new = _flip(old)
    if src.count(old) != 1:
        return episode_doc(rng, pool)
    path = f"{pkg}/{mod}.py"
    listing = "\n".join(sorted(["README.md", f"{pkg}/__init__.py", *(f"{pkg}/{m}.py" for m in mods),
                                *(f"tests/test_{m}.py" for m in mods)]))
    org = draw(rng, pool)
    where = "the `if` test" if old.startswith("if ") else f"the line that sets `{old.split(' = ')[0]}`"
    problem = (f"Repository {org}/{pkg.replace('_', '-')}. Tests in tests/test_{mod}.py fail: in `{func}`, "
               f"{where} should use `{op_new}` instead of `{op_old}`.")
    read = format_tool_call("read_file", {"path": path})
    edit = format_tool_call("edit_file", {"path": path, "old": old, "new": new})
    n_pass = rng.randint(2, 12)
    msgs = (
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": problem},
        {"role": "assistant", "content": format_tool_call("list_files", {"path": "."})},
        {"role": "tool", "content": listing},
        {"role": "assistant", "content": read},
        {"role": "tool", "content": src},
        {"role": "assistant", "content": edit},
        {"role": "tool", "content": f"edited {path}: replaced 1 occurrence at line {li + 1}"},
        {"role": "assistant", "content": format_tool_call("run_tests", {"tests": []})},
        {"role": "tool", "content": f"{n_pass} passed"},
        {"role": "assistant", "content": format_tool_call(
            "finish", {"message": f"Fixed `{func}` in {path}: it now uses `{op_new}` instead of `{op_old}`."})},
    )
    p0, p1 = _span(read, path)
    o0, o1 = _span(edit, old)
    return SynthDoc("episode", messages=msgs, targets={"path": (1, p0, p1), "old": (2, o0, o1)})


def make_doc(kind: str, rng: random.Random, pool: Pool, *, lo_id: int, hi_id: int) -> SynthDoc:
    """One document of ``kind`` (``repeat``, ``kv``, ``line``, ``episode``)."""
    if kind == "repeat":
        return repeat_doc(rng, lo_id=lo_id, hi_id=hi_id)
    gens = {"kv": kv_doc, "line": line_doc, "episode": episode_doc}
    if kind not in gens:
        raise ValueError(f"unknown synthetic document kind {kind!r}; choose one of {['repeat', *gens]}.")
    return gens[kind](rng, pool)
