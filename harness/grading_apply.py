"""Step 1 of grading a patch: apply it in the fresh grading sandbox and read back what it REALLY changed (see
``harness.grading``; step 2, restoring and testing, is ``harness.grading_script``).

Nothing here reads the candidate patch's text. ``git apply`` (then ``--3way``, then ``patch --fuzz``) writes
whatever it writes; afterwards the sandbox reports, in one state file:

- ``tracked``: ``git diff --name-status -z --no-renames <base>``: tracked files the apply modified, deleted,
  added to the index or changed the type or mode of;
- ``before`` / ``after``: every untracked file, ignored ones included (``git ls-files -z --others``), before and
  after the apply: a file that appears is new whatever its type (``.pyc``, ``.so``, a symlink, a nested repo);
- ``written``: every non-directory the apply wrote (``find -newer`` a stamp taken just before it); it counts for
  an ignored file that existed at base and was overwritten (the other two lists cover every other file);
- ``modules``: the top-level names the test interpreter imports from outside the repository (standard library,
  built-ins, site-packages), asked from ``python -I`` in ``/`` BEFORE the patch is applied, so nothing the patch
  wrote can change the answer;
- ``basedirs``: the directories pytest puts first on ``sys.path`` for the hidden test files and the base
  ``conftest.py`` files (the first ancestor without ``__init__.py``, pytest's ``prepend`` import mode).

The repository's ``.git`` directory is moved out of the work tree (into the grader's directory) before the patch
is applied and every git command runs with ``core.hooksPath=/dev/null``: a patch that writes ``.git/hooks/...`` or
``.git/config`` (``patch`` does, ``git apply`` refuses) writes into an ordinary folder that is deleted and flagged;
no hook or configuration it wrote ever runs.

``plan_restore`` (pure) then decides from that state which paths step 2 restores to base or deletes:
``harness.grading_paths.is_agent_source`` for every changed path, and ``shadowing_entries`` for new top-level
entries on a ``sys.path`` root named like an importable module.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from harness.grading_paths import is_agent_source, pythonpath_roots, shadowing_entries, split_env_assignments

STATE_FILE = "state"  # in the grader directory
_PY_WORD = re.compile(r"^python[0-9.]*$")
# Every top-level name the interpreter can import without the repository (run with -I from /).
_INVENTORY = ("import sys, pkgutil; n = set(sys.builtin_module_names) | set(getattr(sys, 'stdlib_module_names', ())); "
              "n |= {m.name for m in pkgutil.iter_modules()}; print('\\n'.join(sorted(n)))")


@dataclass(frozen=True)
class AppliedState:
    """What the apply step reported (``parse_state``)."""

    tracked: tuple[tuple[str, str], ...]  # (git status letter, path)
    before: frozenset[str]
    after: frozenset[str]
    written: frozenset[str]
    modules: frozenset[str]
    basedirs: tuple[str, ...]

    @property
    def new(self) -> list[str]:
        """Paths that did not exist at base (as files git knows or files on disk), sorted."""
        added = {p for s, p in self.tracked if s == "A"}
        return sorted(added | (self.after - self.before))

    @property
    def changed(self) -> list[str]:
        """Every path the apply changed, created or deleted, sorted."""
        return sorted({p for _, p in self.tracked} | (self.after - self.before) | (self.written & self.before))


@dataclass(frozen=True)
class RestorePlan:
    """What step 2 does with the applied tree."""

    foreign: list[str]  # restored to base, or deleted when base has no such path (infra policy "reset")
    shadow: list[str]   # new top-level entries deleted (step 2 keeps one that exists at base)
    changed: list[str]  # every changed path (for the ``tests_touched`` flag)


def interpreter_of(test_cmd: str) -> str:
    """The Python the test command runs (its first word when that is ``python*``), else ``python``."""
    try:
        _, words = split_env_assignments(test_cmd)
    except ValueError:
        return "python"
    first = words[0] if words else "python"
    return first if _PY_WORD.match(PurePosixPath(first).name) else "python"


def build_apply_script(*, base_commit: str, candidate_patch: str, test_patch: str, grader_dir: str,
                       python: str, sys_path_files: Iterable[str]) -> str:
    """The bash script of step 1 (run ``bash -s`` in the fresh sandbox's work directory). Pure."""
    q = shlex.quote
    files = " ".join(q(f) for f in sys_path_files)
    return f"""set -u
git() {{ command git -c safe.directory='*' -c advice.detachedHead=false -c core.hooksPath=/dev/null "$@"; }}
G={q(grader_dir)}; B={q(base_commit)}; S="$G/{STATE_FILE}"
rm -rf "$G" && mkdir -p "$G" || {{ echo '>>>>> Reset Failed'; exit 90; }}
if ! command -v python >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
  mkdir -p "$G/bin" && printf '#!/bin/sh\\nexec python3 "$@"\\n' > "$G/bin/python" && chmod +x "$G/bin/python"
  export PATH="$G/bin:$PATH"
fi
echo '{_b64(candidate_patch)}' | base64 -d > "$G/candidate.diff"
echo '{_b64(test_patch)}' | base64 -d > "$G/test.diff"
reset_tree() {{ git reset -q --hard "$B" && git clean -qfd; }}
reset_tree >/dev/null 2>&1 || {{ echo '>>>>> Reset Failed'; exit 90; }}
section() {{ printf '%s ' "$1" >> "$S"; base64 -w0 >> "$S"; echo >> "$S"; }}
: > "$S"
(cd / && {q(python)} -I -c {q(_INVENTORY)}) 2>/dev/null | section modules
basedirs() {{ for f in {files} $(git ls-files -- 'conftest.py' '*/conftest.py'); do
  d=$(dirname -- "$f"); while [ "$d" != . ] && [ -f "$d/__init__.py" ]; do d=$(dirname -- "$d"); done
  printf '%s\\0' "$d"; done; }}
basedirs > "$G/basedirs"
mv .git "$G/git" || {{ echo '>>>>> Reset Failed'; exit 90; }}
export GIT_DIR="$G/git" GIT_WORK_TREE="$PWD"
git ls-files -z --others | section before
touch "$G/stamp"
applied=''
if [ ! -s "$G/candidate.diff" ]; then applied=none
elif git apply --binary --whitespace=nowarn "$G/candidate.diff"; then applied=git-apply
else reset_tree
  if git apply --binary --3way --whitespace=nowarn "$G/candidate.diff"; then applied=git-apply-3way
  else reset_tree
    if command -v patch >/dev/null && patch --batch --forward --fuzz=5 -p1 -i "$G/candidate.diff"; then applied=patch-fuzz
    else reset_tree; applied=''; fi
  fi
fi
if [ -e .git ] || [ -L .git ]; then rm -rf -- .git; echo '>>>>> Git Dir Written'; fi
[ -n "$applied" ] || {{ echo '>>>>> Patch Apply Failed'; exit 0; }}
echo ">>>>> Applied $applied"
git diff --name-status -z --no-renames "$B" | section tracked
git ls-files -z --others | section after
find . -path ./.git -prune -o ! -type d -newer "$G/stamp" -print0 | section written
{{ cat "$G/basedirs"; basedirs; }} | section basedirs
echo '>>>>> State Written'
"""


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _nul_list(data: bytes) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in data.split(b"\0") if p]


def parse_state(text: bytes) -> AppliedState:
    """The state file the apply script wrote. Raises ValueError when a section is missing or malformed."""
    sections: dict[str, bytes] = {}
    for line in text.splitlines():
        key, _, b64 = line.partition(b" ")
        try:
            sections[key.decode()] = base64.b64decode(b64, validate=True)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"grader state line {line[:40]!r} is not '<name> <base64>': {exc}") from exc
    missing = {"modules", "before", "tracked", "after", "written", "basedirs"} - set(sections)
    if missing:
        raise ValueError(f"grader state lacks {sorted(missing)}")
    fields = _nul_list(sections["tracked"])
    tracked = tuple((fields[i][:1], fields[i + 1]) for i in range(0, len(fields) - 1, 2))
    return AppliedState(
        tracked=tracked, before=frozenset(_nul_list(sections["before"])),
        after=frozenset(_nul_list(sections["after"])),
        written=frozenset(p.removeprefix("./") for p in _nul_list(sections["written"])),
        modules=frozenset(sections["modules"].decode("utf-8", "replace").split()),
        basedirs=tuple(dict.fromkeys(d for d in _nul_list(sections["basedirs"]) if d != ".")),
    )


def plan_restore(state: AppliedState, *, test_cmd: str) -> RestorePlan:
    """Pure: the paths step 2 restores (everything the apply changed that is not agent source; ``pyproject.toml``
    has its own rule in step 2) and the shadowing entries it deletes. A nested repository shows in git's listing
    as ``dir/`` and is never source."""
    changed = state.changed
    foreign = [p.rstrip("/") for p in changed if p.endswith("/") or not (is_agent_source(p) or p == "pyproject.toml")]
    roots = list(dict.fromkeys([*pythonpath_roots(test_cmd), *state.basedirs]))
    return RestorePlan(foreign=foreign, changed=changed,
                       shadow=shadowing_entries(state.new, roots, state.modules))
