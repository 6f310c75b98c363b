"""SFT augmentation: made-up names for the identifiers of the code an expert episode reads (``rename_identifiers``).

Why. On held-out repositories built from module templates no training episode has, the SFT model solved none of
the tasks (docs/RESULTS.md, "SFT from the base, five settings"). Its `old` texts there are garbled copies of the line it means to change
(``'    return (kreir" / 0'`` for a line of ``league.py``): it has learnt the training templates' lines by heart and
has never had to copy a line of code it did not know. Module renaming (``repro.sft_augment``) covers the paths;
this covers the code. In a share of episodes every name the package's code defines — functions, their
parameters, assigned variables, module constants, classes — gets a made-up word (``repro.pretrain.words``, training
pool: never a mini-world identifier, so never a held-out template's name), consistently in every message: the
problem statement, the listing, the code read, the test output, the expert's plan, the tool-call arguments (its
`old` and `new` texts) and the summary. The code stays valid Python with the same structure and the same bug, so
the fix is the same operation on other names; only copying the names from the context predicts them.

What is renamed. Names collected with ``ast`` from the package's module sources as ``read_file`` showed them
(``<package>/<module>.py``; a source that does not parse is skipped), excluding Python keywords and builtins,
names of one or two characters, ``self``/``cls``, and the package and module names (``repro.sft_augment`` renames
those). A name is replaced as a whole identifier not preceded by ``.`` (an attribute such as ``sales.items`` is
left alone) and inside pytest ids ``test_<name>_case<n>``; a word that already occurs in the episode is never drawn.
Not covered: names that only the test files define (they are the grader's, and the agent never edits them).
"""

from __future__ import annotations

import ast
import builtins
import keyword
import random
import re
from collections.abc import Sequence

from harness.metrics import calls_with_results
from harness.schema import Message
from harness.tools import ERROR_PREFIX
from repro.pretrain.words import make_word
from repro.sft_rewrite import rewrite_messages

_KEEP = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | {"self", "cls"}


def _sources(messages: Sequence[Message], package: str) -> list[str]:
    """The package's module sources as ``read_file`` returned them (``<package>/<name>.py``)."""
    out = []
    for call, obs in calls_with_results(list(messages)):
        path = str(call.arguments.get("path", "")) if call.valid and call.name == "read_file" else ""
        if path.startswith(f"{package}/") and path.endswith(".py") and obs is not None \
                and not obs.content.startswith(ERROR_PREFIX):
            out.append(obs.content)
    return out


def defined_names(source: str) -> set[str]:
    """Names a module defines: functions and classes, their parameters, assigned names (``ast``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def code_identifiers(messages: Sequence[Message], package: str, modules: Sequence[str]) -> list[str]:
    """The names to rename in an episode (module docstring), sorted."""
    found: set[str] = set()
    for src in _sources(messages, package):
        found |= defined_names(src)
    skip = _KEEP | {package, *modules}
    return sorted(n for n in found if len(n) > 2 and n not in skip and not n.startswith("test_"))


def fresh_names(messages: Sequence[Message], names: Sequence[str], rng: random.Random,
                taken: Sequence[str] = ()) -> dict[str, str]:
    """A made-up training-pool word per name, none occurring in the conversation, in ``taken``, or drawn twice."""
    text = "\n".join(m.content for m in messages)
    used = set(taken)
    out: dict[str, str] = {}
    for name in names:
        while True:
            w = make_word(rng, "train")
            if w not in used and not re.search(rf"(?<![A-Za-z0-9_]){w}(?![A-Za-z0-9_])", text):
                out[name] = w
                used.add(w)
                break
    return out


def rename_identifiers(messages: Sequence[Message], mapping: dict[str, str]) -> list[Message]:
    """``messages`` with each name of ``mapping`` replaced (module docstring); token ids and log-probs dropped."""
    if not mapping:
        return list(messages)
    alt = "|".join(re.escape(n) for n in sorted(mapping, key=len, reverse=True))
    whole = re.compile(rf"(?<![A-Za-z0-9_.])({alt})(?![A-Za-z0-9_])")
    test_id = re.compile(rf"(?<![A-Za-z0-9_])test_({alt})(?=_case\d)")

    def sub(text: str) -> str:
        text = test_id.sub(lambda m: f"test_{mapping[m.group(1)]}", text)
        return whole.sub(lambda m: mapping[m.group(1)], text)

    return rewrite_messages(messages, sub)
