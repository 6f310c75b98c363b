"""The agent's tools, their JSON schemas, the Qwen3 tool-call parser and the tool executor.

Calls are written in the Qwen3 style, one block per call, anywhere in the visible part of an assistant turn::

    <tool_call>
    {"name": "read_file", "arguments": {"path": "src/calc.py"}}
    </tool_call>

Tools (argument names are a FIXED CONTRACT other parts code against):

- ``list_files{"path": "."}``: files under ``path`` (recursive, ``.git`` and ``__pycache__`` skipped).
- ``read_file{"path"}``: the file's text.
- ``search{"pattern", "path": "."}``: ``grep -rnIE`` (extended regex) under ``path``; ``file:line:text`` lines.
- ``edit_file{"path", "old", "new", "reason"?}``: exact search/replace; an error unless ``old`` occurs exactly
  once. ``old == ""`` creates a NEW file with content ``new`` (an error if the file already exists). The optional
  ``reason`` (a one-line why) does not change what the tool does; ``tool_args@v1`` requires it.
- ``run_tests{"tests": []}``: the visible tests only: ``instance.visible_test_cmd`` (default
  ``python3 -m pytest -q``) with the given pytest node ids / files appended. Hidden tests are never in the
  agent's sandbox, so they cannot run; node ids naming a test file that ``test_patch`` creates are refused.
  pytest's report is trimmed to one line per failure plus the failing statement and the counts
  (``harness.pytest_summary``); other output is shown as it is.
- ``ask_user{"question"}``: asks the user; the answer is always the fixed approval ``ASK_USER_ANSWER`` (the
  environment is deterministic); an empty question is an error. ``ask_first@v1`` requires an ask before editing.
- ``finish{"message"}``: ends the episode; ``message`` is the summary for the user.

Safety: every path is relative to the repository root. Absolute paths, ``..`` that leaves the root, and paths
whose real path (symlinks resolved inside the sandbox) leaves the root are refused with an error observation.

Malformed calls (bad JSON, unknown tool, schema violation) become ``ToolCall(valid=False, error=...)``; the
agent loop answers them with an error observation, counts a protocol violation and goes on. Execution failures
of valid calls (file not found, zero matches, ...) are observations that start with ``ERROR_PREFIX``; they are
the agent's business, not protocol violations. Infrastructure failures (``SandboxUnavailable``) propagate.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Any

from harness.pytest_summary import summarize_pytest
from harness.sandbox import ExecResult, Sandbox, SandboxUnavailable
from harness.schema import TaskInstance, ToolCall

log = logging.getLogger(__name__)

ERROR_PREFIX = "ERROR: "
TOOLS_VERSION = "tools@v2"  # v2: terse schemas, pytest output summarised (issue #20)
# ``python3``, not ``python``: Debian images (ours included) ship ``python3`` only unless python-is-python3 is added
DEFAULT_TEST_CMD = "python3 -m pytest -q"
LIST_FILES_CAP = 500
EDIT_CAP_BYTES = 16 << 20  # edit_file edits files up to 16 MiB (read_file output is capped by the sandbox)
ASK_USER_ANSWER = "The user answers: yes, go ahead."

_STR: dict[str, Any] = {"type": "string"}

# Terse on purpose (issue #20): the schemas are in every episode's system block. Names, argument names, types,
# required lists and defaults are the contract; a description only where the name does not say it.
_SPECS: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("list_files", "List files under a directory (recursive).", {"path": {**_STR, "default": "."}}, []),
    ("read_file", "Read a file.", {"path": _STR}, ["path"]),
    (
        "search",
        "grep -rnIE a regex; prints file:line:text.",
        {"pattern": _STR, "path": {**_STR, "default": "."}},
        ["pattern"],
    ),
    (
        "edit_file",
        'Replace `old` (must occur once) by `new`; old="" creates the file.',
        {"path": _STR, "old": _STR, "new": _STR, "reason": _STR},  # reason: optional, one line (tool_args@v1)
        ["path", "old", "new"],
    ),
    (
        "run_tests",
        "Run the visible tests (all, or the given files / node ids).",
        {"tests": {"type": "array", "items": _STR, "default": []}},
        [],
    ),
    ("ask_user", "Ask the user a question.", {"question": _STR}, ["question"]),
    ("finish", "End the task; `message` is your summary for the user.", {"message": _STR}, ["message"]),
]

TOOL_NAMES: tuple[str, ...] = tuple(s[0] for s in _SPECS)


def tool_schemas() -> list[dict[str, Any]]:
    """The tools as OpenAI/transformers function schemas (``{"type": "function", "function": {...}}``).

    Pass this list as ``tools=`` to ``tokenizer.apply_chat_template`` or to a chat-completions request.
    A fresh copy is returned each call.
    """
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": desc,
                "parameters": {
                    "type": "object",
                    "properties": json.loads(json.dumps(props)),
                    **({"required": list(req)} if req else {}),
                },
            },
        }
        for name, desc, props, req in _SPECS
    ]


_SCHEMA_BY_NAME = {s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas()}


# ----------------------------------------------------------------------------------------------------------------
# Parsing (pure)
# ----------------------------------------------------------------------------------------------------------------

_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.DOTALL)
_CALL_RE = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.DOTALL)


def _template_think(text: str) -> tuple[str, str]:
    """(thinking before a lone ``</think>``, the rest): a chat template may open the think block itself."""
    if "</think>" in text and "<think>" not in text.split("</think>", 1)[0]:
        head, rest = text.split("</think>", 1)
        return head, rest
    return "", text


def strip_think(text: str) -> str:
    """Remove ``<think>…</think>`` blocks; text before a lone ``</think>`` (template-opened think) is thinking too."""
    return _THINK_RE.sub("", _template_think(text)[1])


def think_text(text: str) -> str:
    """The thinking :func:`strip_think` removes, tags dropped, blocks joined by blank lines."""
    head, rest = _template_think(text)
    parts = [head, *(m.group(1) for m in _THINK_RE.finditer(rest))]
    return "\n\n".join(p.strip() for p in parts if p.strip())


def visible_text(text: str) -> str:
    """The part of an assistant turn a user would read: no thinking, no ``<tool_call>`` blocks."""
    return _CALL_RE.sub("", strip_think(text)).strip()


def validate_arguments(name: str, arguments: object) -> str | None:
    """Check ``arguments`` against tool ``name``'s schema; returns an error text or None when valid."""
    schema = _SCHEMA_BY_NAME.get(name)
    if schema is None:
        return f"unknown tool {name!r}; available tools: {', '.join(TOOL_NAMES)}"
    if not isinstance(arguments, dict):
        return f"{name}: 'arguments' must be a JSON object, got {type(arguments).__name__}"
    props = schema["properties"]
    for key in schema.get("required", []):
        if key not in arguments:
            return f"{name}: missing required argument {key!r}"
    for key, value in arguments.items():
        if key not in props:
            return f"{name}: unknown argument {key!r}; allowed: {', '.join(props)}"
        spec = props[key]
        if spec["type"] == "string" and not isinstance(value, str):
            return f"{name}: argument {key!r} must be a string, got {type(value).__name__}"
        if spec["type"] == "array" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{name}: argument {key!r} must be a list of strings"
    return None


def with_defaults(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` completed with the schema's defaults (for a valid call)."""
    props = _SCHEMA_BY_NAME[name]["properties"]
    out = {k: json.loads(json.dumps(v["default"])) for k, v in props.items() if "default" in v}
    out.update(arguments)
    return out


def parse_tool_calls(text: str) -> list[ToolCall]:
    """All ``<tool_call>`` blocks of an assistant turn (thinking excluded), in order, each validated.

    An unclosed block, bad JSON, a missing/unknown ``name`` or a schema violation gives ``valid=False`` with
    ``error`` set; ``raw`` keeps the block's text.
    """
    calls: list[ToolCall] = []
    for i, m in enumerate(_CALL_RE.finditer(strip_think(text))):
        raw, closed = m.group(1), bool(m.group(2))
        cid = f"call_{i}"
        if not closed:
            calls.append(ToolCall(name="", raw=raw, valid=False, error="unclosed <tool_call> block", call_id=cid))
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            calls.append(ToolCall(name="", raw=raw, valid=False, error=f"invalid JSON: {exc}", call_id=cid))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            err = 'a tool call must be {"name": <string>, "arguments": {...}}'
            calls.append(ToolCall(name="", raw=raw, valid=False, error=err, call_id=cid))
            continue
        extra = set(obj) - {"name", "arguments"}
        args = obj.get("arguments", {})
        error = f"unexpected keys {sorted(extra)} in tool call" if extra else validate_arguments(obj["name"], args)
        calls.append(
            ToolCall(
                name=obj["name"],
                arguments=args if isinstance(args, dict) else {},
                raw=raw,
                valid=error is None,
                error=error,
                call_id=cid,
            )
        )
    return calls


def tool_signature(name: str) -> str:
    """A one-line usage of tool ``name``, e.g. ``search(pattern: string, path: string = ".")``."""
    params = _SCHEMA_BY_NAME[name]
    parts = []
    for key, spec in params["properties"].items():
        typ = "list of strings" if spec["type"] == "array" else spec["type"]
        default = f" = {json.dumps(spec['default'])}" if "default" in spec else ""
        parts.append(f"{key}: {typ}{default}")
    return f"{name}({', '.join(parts)})"


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """Render one call in the Qwen3 format (what policies should emit)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def normalize_path(path: str) -> str | None:
    """Repository-relative normal form of ``path``; None if it is absolute, empty or leaves the root."""
    if not path or path.startswith("/") or "\x00" in path:
        return None
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        return None
    return norm


def hidden_test_files(instance: TaskInstance) -> set[str]:
    """Test files that the hidden ``test_patch`` CREATES (``--- /dev/null`` then ``+++ b/<path>``).

    Files the patch only modifies exist at base in their visible form, so running them is allowed.
    """
    out: set[str] = set()
    prev = ""
    for line in instance.test_patch.splitlines():
        if line.startswith("+++ b/") and prev.startswith("--- /dev/null"):
            out.add(line[len("+++ b/") :].split("\t")[0].strip())
        prev = line
    return out


def cap_text(text: str, cap: int) -> tuple[str, bool]:
    """Head and tail of ``text`` within ``cap`` characters; returns (text, truncated)."""
    if len(text) <= cap:
        return text, False
    half = max(cap // 2, 1)
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters truncated ...]\n{text[-half:]}", True


# ----------------------------------------------------------------------------------------------------------------
# Execution
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned. ``error`` marks a failed call (the observation starts with ``ERROR_PREFIX``)."""

    observation: str
    error: bool = False
    finished: bool = False
    finish_message: str | None = None
    truncated: bool = False


def _err(msg: str) -> ToolResult:
    return ToolResult(observation=ERROR_PREFIX + msg, error=True)


def _dot(path: str) -> str:
    """``./<path>`` (normalised) so that a path such as ``-delete`` can never read as a command option."""
    norm = normalize_path(path) or "."
    return norm if norm == "." else "./" + norm


# Path guard run inside the sandbox: $1 = path, $2 = allowed kinds, then the command to run.
_OUTSIDE, _WRONG_KIND, _UNRESOLVED = 90, 91, 93
_GUARD = (
    f'r=$(pwd -P) && p=$(realpath -m -- "$1") || exit {_UNRESOLVED}; '
    f'case "$p" in "$r"|"$r"/*) ;; *) exit {_OUTSIDE};; esac; '
    'if [ -d "$1" ]; then k=dir; elif [ -f "$1" ]; then k=file; else k=none; fi; '
    f'echo "$k"; case " $2 " in *" $k "*) ;; *) exit {_WRONG_KIND};; esac; '
    'shift 2; [ $# -eq 0 ] || exec "$@"'
)


class ToolExecutor:
    """Runs validated tool calls in a sandbox for one task instance.

    ``timeout`` bounds each command; ``cap_chars`` caps each observation (head + tail, flagged ``truncated``).
    """

    def __init__(self, sandbox: Sandbox, instance: TaskInstance, *, timeout: float, cap_chars: int) -> None:
        self.sandbox = sandbox
        self.instance = instance
        self.timeout = timeout
        self.cap_chars = cap_chars
        self._hidden = hidden_test_files(instance)

    def run(self, call: ToolCall) -> ToolResult:
        """Execute one call. Invalid calls get an error observation naming the problem and the fix."""
        if not call.valid:
            usage = f" Usage: {tool_signature(call.name)}." if call.name in TOOL_NAMES else ""
            fmt = '<tool_call>{"name": <tool>, "arguments": {<argument>: <value>, ...}}</tool_call>'
            return _err(f"malformed tool call ({call.error}). Write each call as {fmt}.{usage}")
        args = with_defaults(call.name, call.arguments)
        handler = getattr(self, f"_t_{call.name}")
        result: ToolResult = handler(**args)
        text, cut = cap_text(result.observation, self.cap_chars)
        if cut:
            result = ToolResult(text, result.error, result.finished, result.finish_message, truncated=True)
        return result

    # -- path checks ---------------------------------------------------------------------------------------------

    def _guarded(self, path: str, need: str, argv: list[str]) -> ToolResult | tuple[str, str, ExecResult]:
        """Resolve ``path`` inside the sandbox and, in the same ``exec``, run ``argv`` when the path is inside the
        repository and its kind (``file``/``dir``/``none``) is one of ``need`` (space-separated).

        Returns (normalised path, kind, result of ``argv`` with the kind line removed), or an error result.
        ``argv`` should name the path as ``_dot(path)`` so it never reads as an option. With an empty ``argv``
        only the check runs. One ``exec`` in all (the check costs no extra round trip to the sandbox).
        """
        norm = normalize_path(path)
        if norm is None:
            return _err(f"path {path!r} is outside the repository; use a path relative to its root")
        res = self.sandbox.exec(["sh", "-c", _GUARD, "sh", norm, need, *argv], timeout=self.timeout)
        if res.timed_out:  # a path check, a listing, a read or a grep: the sandbox is stalled, not the agent wrong
            raise SandboxUnavailable(f"a file operation on {norm!r} did not finish within {self.timeout:g} s "
                                     "(the sandbox stalled; the episode is retried, not scored)", kind="SANDBOX")
        kind, _, rest = res.stdout.partition("\n")
        if res.returncode == _OUTSIDE:
            return _err(f"path {path!r} resolves outside the repository (symlink?); refused")
        if res.returncode == _UNRESOLVED or kind not in ("file", "dir", "none"):
            return _err(f"could not resolve path {path!r}: {res.stderr.strip()[:200]}")
        if res.returncode == _WRONG_KIND:
            what = {"dir": "a directory", "file": "a file", "none": "not in the repository"}[kind]
            return _err(f"{path!r} is {what}")
        return norm, kind, res._replace(stdout=rest)

    # -- tools ---------------------------------------------------------------------------------------------------

    def _t_list_files(self, path: str) -> ToolResult:
        find = ["find", _dot(path), "-name", ".git", "-prune", "-o", "-name", "__pycache__", "-prune", "-o"]
        got = self._guarded(path, "dir", [*find, "-type", "f", "-print"])
        if isinstance(got, ToolResult):
            return got
        _, _, res = got
        if res.returncode != 0:
            return _err(f"list_files failed: {res.stderr.strip()[:500]}")
        files = sorted(posixpath.normpath(p) for p in res.stdout.splitlines() if p)
        shown = files[:LIST_FILES_CAP]
        more = f"\n[... {len(files) - len(shown)} more files not shown ...]" if len(files) > len(shown) else ""
        return ToolResult(observation=("\n".join(shown) or "(no files)") + more)

    def _t_read_file(self, path: str) -> ToolResult:
        got = self._guarded(path, "file", ["cat", "--", _dot(path)])
        if isinstance(got, ToolResult):
            return got
        norm, _, res = got
        if res.returncode != 0:
            return _err(f"cannot read {norm}: {res.stderr.strip()[:300]}")
        return ToolResult(observation=res.stdout, truncated=res.truncated)

    def _read_text(self, norm: str) -> str | ToolResult:
        """The exact text of a file to edit, or an error result (too large, unreadable, not UTF-8); infra errors
        (``SandboxUnavailable``) propagate."""
        cap = EDIT_CAP_BYTES
        try:
            data = self.sandbox.read_file(norm, max_bytes=cap)
        except (OSError, ValueError) as exc:
            return _err(f"cannot read {norm}: {exc}")
        if len(data) >= cap:
            return _err(f"{norm} is {cap} bytes or larger; use search to find the part you need")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return _err(f"{norm} is not UTF-8 text; edit_file only edits text files")

    def _t_search(self, pattern: str, path: str) -> ToolResult:
        grep = ["grep", "-rnIE", "--exclude-dir=.git", "--exclude-dir=__pycache__", "-e", pattern, "--", _dot(path)]
        got = self._guarded(path, "file dir", grep)
        if isinstance(got, ToolResult):
            return _err(f"{path!r} does not exist") if "not in the repository" in got.observation else got
        norm, _, res = got
        if res.returncode == 1:
            return ToolResult(observation=f"no matches for {pattern!r} under {norm}")
        if res.returncode != 0:
            return _err(f"search failed (grep exit {res.returncode}): {res.stderr.strip()[:500]}")
        lines = [ln[2:] if ln.startswith("./") else ln for ln in res.stdout.rstrip("\n").splitlines()]
        return ToolResult(observation="\n".join(lines), truncated=res.truncated)

    def _t_edit_file(self, path: str, old: str, new: str, reason: str = "") -> ToolResult:
        got = self._guarded(path, "file dir none", [])
        if isinstance(got, ToolResult):
            return got
        norm, kind, _ = got
        if old == "":
            if kind != "none":
                return _err(f"{path!r} already exists; to change it pass the exact text to replace as `old`")
            failed = self._write(norm, new)
            return failed or ToolResult(observation=f"created {norm} ({len(new.splitlines())} lines)")
        if kind != "file":
            return _err(f"{path!r} is {'a directory' if kind == 'dir' else 'not a file'}; to create it use old=\"\"")
        text = self._read_text(norm)
        if isinstance(text, ToolResult):
            return text
        count = text.count(old)
        if count == 0:
            return _err(f"`old` was not found in {norm}; read the file and copy the exact text (whitespace too)")
        if count > 1:
            return _err(f"`old` occurs {count} times in {norm}; include more surrounding lines so it is unique")
        failed = self._write(norm, text.replace(old, new, 1))
        line = text[: text.index(old)].count("\n") + 1
        return failed or ToolResult(observation=f"edited {norm}: replaced 1 occurrence at line {line}")

    def _write(self, norm: str, text: str) -> ToolResult | None:
        """Write ``text``; an error result if the sandbox refuses (permissions, ...); infra errors propagate."""
        try:
            self.sandbox.write_file(norm, text.encode())
        except (OSError, ValueError) as exc:
            return _err(f"cannot write {norm}: {exc}")
        return None

    def _t_run_tests(self, tests: list[str]) -> ToolResult:
        for t in tests:
            file_part = normalize_path(t.split("::", 1)[0])
            if t.startswith("-") or file_part is None:
                return _err(f"test {t!r} refused: give test files or node ids inside the repository")
            if file_part in self._hidden:
                return _err(f"{t!r} is not a visible test of this repository")
        base = self.instance.visible_test_cmd or DEFAULT_TEST_CMD
        cmd = base + "".join(" " + shlex.quote(t) for t in tests)
        res = self.sandbox.exec(cmd, timeout=self.timeout)
        status = "TIMED OUT" if res.timed_out else f"exit code {res.returncode}"
        stdout = summarize_pytest(res.stdout) or res.stdout
        body = (stdout + (("\n" + res.stderr) if res.stderr.strip() else "")).strip()
        return ToolResult(observation=f"$ {cmd}\n{body}\n[{status}]", truncated=res.truncated)

    def _t_ask_user(self, question: str) -> ToolResult:
        if not question.strip():
            return _err("ask_user: write the question for the user in `question`")
        return ToolResult(observation=ASK_USER_ANSWER)

    def _t_finish(self, message: str) -> ToolResult:
        return ToolResult(observation="Task finished.", finished=True, finish_message=message)
