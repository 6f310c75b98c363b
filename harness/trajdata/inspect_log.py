"""Import Inspect (``inspect_ai``) eval logs: ``.json`` logs and ``.eval`` zip logs, one record per sample.

Schema read (``inspect_ai.log.EvalLog`` / ``EvalSample``, read as plain JSON, inspect_ai is not needed):

- the log: ``eval.model`` (the policy name), ``samples`` (``.json``; absent when written with
  ``log_samples=False`` — an error); in a ``.eval`` zip every ``samples/<id>_epoch_<n>.json`` member is one sample,
  and ``header.json`` (or ``_journal/start.json`` / ``start.json``) holds ``eval``;
- a sample: ``id``, ``epoch``, ``messages`` (``ChatMessage``: ``role`` system/user/assistant/tool, ``content`` a
  string or a list of ``{"type": "text", "text"}`` / ``{"type": "reasoning", "reasoning"}`` parts; assistant
  ``tool_calls`` = ``[{"id", "function", "arguments": {...}, "parse_error"}]``; tool ``function`` and ``error``
  ``{"type", "message"}``), ``scores`` (name → ``{"value", ...}``), ``metadata``, ``error`` (``EvalError``: the
  sample was halted by an error → an infrastructure error here), ``limit`` (``{"type", "limit"}``: the sample
  hit a message/token/time/... limit → truncated; an empty ``messages`` list, as an errored sample that never reached
  the model has, is counted as a skip like a run directory's episode without a trajectory), ``attachments``
  (``attachment://<hash>`` references are resolved); a user message with ``metadata.hint`` true (a hint, as
  ``tgsuite export inspect`` marks it) is read as a hint (``Message.is_hint``).

Outcome: the score named ``score_name`` (or the only score); value ``"C"``/``"I"`` (correct / incorrect), a bool, or
a number (reward = the number; resolved when it is 1, not resolved when 0, unknown otherwise). The instance id is
``metadata.instance_id``, else the sample id. A tool message with ``error`` gets the project's ``ERROR: `` prefix so
that tool errors are counted like this project's own. Not read: events, images, model usage.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.schema import Message
from harness.tools import ERROR_PREFIX
from harness.trajdata.common import (
    LOG_POLICY,
    ErrorAt,
    NoTrajectory,
    RecordError,
    make_record,
    normalise_call,
    render_assistant,
    sha256_file,
)
from harness.trajdata.schema import Provenance, RecordOutcome, SourceFormat, TrajectoryRecord

_ATTACH = re.compile(r"attachment://([0-9A-Za-z_-]+)")
_SAMPLE_MEMBER = re.compile(r"^samples/.+\.json$")
NO_MESSAGES = "no messages (the sample errored before the model ran, or has no conversation)"
ZIP_ZSTANDARD = 93  # the zip compression method of zstd (Inspect's .eval logs)


def _resolve(value: object, attachments: dict[str, str], err: ErrorAt) -> object:
    """``value`` (parsed JSON) with every ``attachment://<hash>`` reference in its strings replaced."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            if m.group(1) not in attachments:
                raise err("attachments", f"reference attachment://{m.group(1)} has no attachment",
                          "write the log with attachments (inspect log dump) or resolve them before importing")
            return attachments[m.group(1)]
        return _ATTACH.sub(sub, value)
    if isinstance(value, list):
        return [_resolve(v, attachments, err) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, attachments, err) for k, v in value.items()}
    return value


def _parts(content: object, err: ErrorAt, where: str) -> tuple[str, str]:
    if isinstance(content, str):
        return content, ""
    text, reasoning = [], []
    for j, part in enumerate(content if isinstance(content, list) else [None]):
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(part, dict) and kind == "text":
            text.append(str(part.get("text", "")))
        elif isinstance(part, dict) and kind == "reasoning":
            reasoning.append(str(part.get("reasoning", "")))
        else:
            raise err(f"{where}[{j}]", f"content part of type {kind!r} is not text or reasoning",
                      "keep text and reasoning parts only")
    return "".join(text), "\n".join(reasoning)


def _message(m: object, i: int, err: ErrorAt) -> Message:
    where = f"messages[{i}]"
    role = m.get("role") if isinstance(m, dict) else None
    if not isinstance(m, dict) or role not in ("system", "user", "assistant", "tool"):
        raise err(f"{where}.role", f"role {role!r} is not system/user/assistant/tool", "fix the message role")
    text, reasoning = _parts(m.get("content", ""), err, f"{where}.content")
    if role == "assistant":
        calls = [normalise_call(str(c.get("function") or ""), c.get("arguments", {}), c.get("id"),
                                parse_error=c.get("parse_error")) for c in (m.get("tool_calls") or [])]
        return Message(role="assistant", content=render_assistant(text, calls, reasoning), tool_calls=calls)
    if role == "tool":
        error = m.get("error")
        if isinstance(error, dict) and not text.startswith(ERROR_PREFIX):
            text = f"{ERROR_PREFIX}{error.get('type', 'unknown')}: {error.get('message', '')}\n{text}".rstrip()
        return Message(role="tool", content=text, tool_name=m.get("function"))
    meta = m.get("metadata")
    hint = role == "user" and isinstance(meta, dict) and meta.get("hint") is True  # `tgsuite export inspect`'s flag
    return Message(role=role, content=text, is_hint=hint)


def _score(scores: Mapping[str, object] | None, score_name: str | None, err: ErrorAt) -> tuple[bool | None, float | None]:
    if not scores:
        return None, None
    if score_name is None:
        if len(scores) != 1:
            raise err("scores", f"several scores ({', '.join(sorted(scores))}) and no --score named",
                      "pass --score NAME to say which one is the task outcome")
        score_name = next(iter(scores))
    if score_name not in scores:
        raise err(f"scores.{score_name}", f"no such score (have {', '.join(sorted(scores))})", "fix --score")
    entry = scores[score_name]
    v = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(v, bool):
        return v, float(v)
    if v in ("C", "I"):
        return v == "C", float(v == "C")
    if isinstance(v, int | float):
        return (True if v == 1 else False if v == 0 else None), float(v)
    raise err(f"scores.{score_name}.value", f"{v!r} is not C/I, a bool or a number",
              "pick a score whose value is C/I or numeric with --score")


def _sample(s: object, fmt: SourceFormat, path: Path, sha: str, model: str | None,
            score_name: str | None) -> TrajectoryRecord:
    sid, epoch = (s.get("id"), s.get("epoch", 1)) if isinstance(s, dict) else (None, None)
    loc = f"sample {sid} epoch {epoch}"

    def err(field: str, problem: str, fix: str) -> RecordError:
        return RecordError(path, loc, field, problem, fix)

    if isinstance(s, dict) and s.get("messages") == []:  # errored before the model ran, or a patch graded alone
        raise NoTrajectory(path, loc, "messages", NO_MESSAGES, "nothing to fix: it is counted")
    if not isinstance(s, dict) or not isinstance(s.get("messages"), list):
        raise err("messages", "missing", "log the samples' messages (the default in inspect_ai)")
    attachments = s.get("attachments") or {}
    sample: dict[str, Any] = {k: _resolve(v, attachments, err) for k, v in s.items()}  # parsed JSON
    msgs = [_message(m, i, err) for i, m in enumerate(sample["messages"])]
    resolved, reward = _score(sample.get("scores"), score_name, err)
    error, limit = sample.get("error"), sample.get("limit")
    outcome = RecordOutcome(
        resolved=resolved, reward=reward, status="error" if error else None,
        infra_error=(str(error.get("message", "error")) if isinstance(error, dict) else str(error)) if error else None,
        truncated=f"{limit.get('type')} limit {limit.get('limit')}" if isinstance(limit, dict) else None)
    meta = sample.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    prov = Provenance(source_format=fmt, path=str(path), locator=loc, source_id=str(sid), source_sha256=sha,
                      model=model)
    return make_record(msgs, instance_id=str(meta.get("instance_id") or sid), policy=model or LOG_POLICY, prov=prov,
                       outcome=outcome)


def _zip_samples(path: Path) -> tuple[str | None, list[tuple[str, Any]]]:
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise RecordError(path, "file", "(file)", f"not a zip archive ({exc})", "pass a .eval log written by "
                          "inspect_ai, or convert it with `inspect log convert --to json`") from exc
    with zf:
        names = zf.namelist()
        zstd = any(i.compress_type == ZIP_ZSTANDARD for i in zf.infolist())
        if zstd:  # Inspect writes .eval members zstd-compressed; Python < 3.14's zipfile reads them once patched
            from harness.trajdata.inspect_export import enable_zstd_zip

            enable_zstd_zip()
        try:
            model = None
            for head in ("header.json", "_journal/start.json", "start.json"):
                if head in names:
                    model = (json.loads(zf.read(head)).get("eval") or {}).get("model")
                    break
            return model, [(n, json.loads(zf.read(n))) for n in sorted(names) if _SAMPLE_MEMBER.match(n)]
        except NotImplementedError as exc:  # zstd without inspect_ai, deflate64, ...: zipfile cannot read them
            fix = ("install inspect_ai (pip install 'tgsuite[inspect]'), whose zstd reader this importer uses, or "
                   if zstd else "") + "convert the log with `inspect log convert --to json` and import the .json log"
            raise RecordError(path, "file", "(compression)", f"{exc} ({'zstd' if zstd else 'a member'} "
                              "compression)", fix) from exc


def iter_inspect_log(path: str | Path, *, score_name: str | None = None) -> Iterator[TrajectoryRecord | RecordError]:
    """Each sample's record, or the ``RecordError`` explaining why it is not one. A log that cannot be read at all
    raises ``RecordError``."""
    p = Path(path)
    sha = sha256_file(p)
    if p.suffix == ".eval":
        fmt: SourceFormat = "inspect_eval"
        model, samples = _zip_samples(p)
        items: list[Any] = [s for _, s in samples]
    else:
        fmt = "inspect_json"
        try:
            log = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RecordError(p, "file", "(file)", f"not valid JSON ({exc.msg})", "pass an Inspect .json log") from exc
        if not isinstance(log, dict) or "eval" not in log:
            raise RecordError(p, "file", "eval", f"not an Inspect log (a JSON {type(log).__name__} without the "
                              "`eval` spec every Inspect log has)", "pass an Inspect .json / .eval log; chat "
                              "transcripts go in JSONL, one {\"messages\": [...]} object per line (--format openai)")
        if not isinstance(log.get("samples"), list):
            raise RecordError(p, "file", "samples", "the log holds no samples", "re-run the eval with samples "
                              "logged (log_samples=True, the default), or pass the .eval log")
        model, items = (log.get("eval") or {}).get("model"), log["samples"]
    for s in items:
        try:
            yield _sample(s, fmt, p, sha, model, score_name)
        except RecordError as exc:
            yield exc
