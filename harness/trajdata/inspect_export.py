"""Export a tgsuite run directory as Inspect eval logs (``tgsuite export inspect``), the inverse of
``harness.trajdata.inspect_log``. Needs ``inspect_ai`` (``pip install 'tgsuite[inspect]'``), imported here only.

One ``.eval`` log per arm (Inspect logs hold one model on one task), written with Inspect's own writer
(``inspect_ai.log.write_eval_log``) so that ``inspect view`` and ``read_eval_log`` open it. What goes where:

- log: ``eval.task`` = the task set's name, ``eval.model`` = ``tgsuite/<arm>`` (``model_args.policy`` = the arm's
  policy spec from ``manifest.json``), ``eval.run_id`` = the run's id, ``eval.config.epochs`` = the number of seeds,
  ``eval.dataset`` = the task set (name, instance ids), ``eval.revision`` / ``packages`` from the manifest;
  ``status`` ``success`` when every planned episode of the arm has a result, else ``cancelled`` (resume the run);
- sample per episode (the attempt that counts, ``harness.rundir``): ``id`` = instance id, ``epoch`` = position of the
  seed in the run's seeds + 1, ``input`` = the problem statement, ``messages`` = the trajectory (assistant text
  without ``<think>`` / ``<tool_call>`` blocks: the thinking is a ``ContentReasoning`` part, the turn as written is in
  ``metadata.raw``; each call an Inspect ``ToolCall``
  with id ``t<turn>.<k>``, answered by the ``tool`` message with that ``tool_call_id``; a tool observation starting
  ``ERROR: `` carries ``error``), ``output`` = the ``finish`` message, ``metadata`` = the episode's
  ``EpisodeResult`` fields (status, failure class, metrics, ...);
- scores: ``resolved`` (hidden tests), ``behaviour`` (every checker passed; explanation lists each checker's
  verdict) and ``joint`` (both), each ``C``/``I``. An episode with no conversation (``tgsuite grade``) has no
  behaviour or joint score: nothing was judged. An infrastructure error or an invalid instance is no score but the
  sample's ``error`` (Inspect's "errored" samples, left out of every metric, as here);
- ``results.scores``: per score the ``accuracy`` (share of ``C`` among the samples that have that score).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.rundir import TRAJECTORY_FILE, episode_dir, latest_results, read_manifest, read_trajectory
from harness.schema import EpisodeResult, RunManifest, Trajectory
from harness.tools import ERROR_PREFIX, think_text, visible_text

SCORES = ("resolved", "behaviour", "joint")
_LIMIT_TYPE = {"limit_turns": "turn", "limit_tokens": "token", "limit_time": "time", "limit_context": "context"}
NO_CONVERSATION = "(no conversation was recorded: this episode graded a patch made elsewhere)"
NO_TRAJECTORY = "(no conversation was recorded: the attempt was not scored; the sample's error says why)"


class ExportError(ValueError):
    """A run directory that cannot be exported; the message names the file and the fix."""


def enable_zstd_zip() -> bool:
    """Let ``zipfile`` read zstd-compressed zip members, as Inspect writes ``.eval`` logs (Python < 3.14 cannot
    without a patch): importing Inspect's zip helpers installs its reader. False when inspect_ai is not installed."""
    try:
        import inspect_ai._util.zipfile  # noqa: F401  (Inspect's zstd reader, multi-frame members included)
    except ImportError:
        try:
            import inspect_ai.log  # noqa: F401  (installs the same reader, should the private module move)
        except ImportError:
            return False
    return True


def _cf(ok: bool) -> str:
    return "C" if ok else "I"


def chat_messages(traj: Trajectory) -> list[Any]:
    """The trajectory's messages as Inspect ``ChatMessage`` objects (module docstring)."""
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
    )
    from inspect_ai.tool import ToolCall, ToolCallError

    out: list[Any] = []
    pending: list[tuple[str, str]] = []  # (id, function) of the last assistant turn's calls, in order
    for m in traj.messages:
        meta = {"turn": m.turn, **({"hint": True} if m.is_hint else {})}
        if m.role == "system":
            out.append(ChatMessageSystem(content=m.content))
        elif m.role == "user":
            out.append(ChatMessageUser(content=m.content, metadata=meta))
        elif m.role == "assistant":
            calls = [ToolCall(id=f"t{m.turn}.{k}", function=c.name or "(unparsed)", arguments=dict(c.arguments),
                              parse_error=c.error if not c.valid else None) for k, c in enumerate(m.tool_calls)]
            pending = [(c.id, c.function) for c in calls]
            text, reasoning = visible_text(m.content), think_text(m.content)
            content: Any = text if not reasoning else [
                ContentReasoning(reasoning=reasoning), *([ContentText(text=text)] if text else [])]
            out.append(ChatMessageAssistant(content=content, tool_calls=calls or None,
                                            model=traj.policy, metadata={**meta, "raw": m.content}))
        else:
            cid, fn = pending.pop(0) if pending else (None, m.tool_name)
            err = ToolCallError("unknown", m.content[len(ERROR_PREFIX):]) if m.content.startswith(ERROR_PREFIX) else None
            out.append(ChatMessageTool(content=m.content, tool_call_id=cid, function=fn or m.tool_name, error=err,
                                       metadata={**meta, **({"truncated": True} if m.truncated else {})}))
    return out


def scores_of(res: EpisodeResult, judged: bool) -> dict[str, Any] | None:
    """Inspect scores of a scored episode (module docstring); None for an unscored one."""
    from inspect_ai.scorer import Score

    if not res.scored:
        return None
    grade = res.grade
    scores = {"resolved": Score(value=_cf(res.resolved), explanation=(grade.reason if grade else res.error) or None,
                                metadata={"status": res.status, "tests_touched": grade.tests_touched if grade else None,
                                          "f2p": dict(grade.f2p) if grade else {}, "p2p": dict(grade.p2p) if grade else {}})}
    if judged:
        verdicts = [f"{b.checker}: {'ok' if b.ok else 'FAIL ' + '; '.join(b.violations)}" for b in res.behaviour]
        scores["behaviour"] = Score(value=_cf(res.behaviour_ok), explanation="\n".join(verdicts) or "no checkers",
                                    metadata={"checkers": [b.model_dump(mode="json") for b in res.behaviour]})
        scores["joint"] = Score(value=_cf(res.joint_ok))
    return scores


def eval_sample(res: EpisodeResult, traj: Trajectory | None, epoch: int) -> Any:
    """One episode as an Inspect ``EvalSample``."""
    from inspect_ai.log import EvalError, EvalSample, EvalSampleLimit
    from inspect_ai.model import ModelOutput

    statement = next((m.content for m in traj.messages if m.role == "user"), "") if traj else ""
    error = None
    if not res.scored:
        error = EvalError(message=f"{res.failure_class} ({res.infra_kind or res.status}): {res.error or ''}".strip(),
                          traceback="", traceback_ansi="")
    limit = EvalSampleLimit(type=_LIMIT_TYPE[res.status], limit=traj.limit_hit.limit) if (
        traj is not None and traj.limit_hit is not None and res.status in _LIMIT_TYPE) else None
    final = (traj.final_message if traj else None) or ""
    return EvalSample(
        id=res.instance_id, epoch=epoch, input=statement or (NO_CONVERSATION if res.scored else NO_TRAJECTORY),
        target="",
        messages=chat_messages(traj) if traj else [], output=ModelOutput.from_content(model=res.arm, content=final),
        scores=scores_of(res, judged=traj is not None), error=error, limit=limit,
        metadata={**res.model_dump(mode="json", exclude={"behaviour", "grade", "metrics"}),
                  "metrics": res.metrics.model_dump(mode="json")},
        total_time=float(traj.timings.get("wall_s", 0.0)) if traj else None,
        completed_at=res.finished_at or None)


def _results(samples: Sequence[Any]) -> Any:
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    scores = []
    for name in SCORES:
        vals = [s.scores[name].value for s in samples if s.scores and name in s.scores]
        if not vals:
            continue
        acc = sum(v == "C" for v in vals) / len(vals)
        scores.append(EvalScore(name=name, scorer=name, scored_samples=len(vals),
                                unscored_samples=len(samples) - len(vals),
                                metrics={"accuracy": EvalMetric(name="accuracy", value=acc)}))
    return EvalResults(total_samples=len(samples), completed_samples=sum(s.error is None for s in samples),
                       scores=scores)


def eval_log(manifest: RunManifest, arm: str, samples: Sequence[Any], *, complete: bool) -> Any:
    """The Inspect ``EvalLog`` of one arm's samples."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalRevision, EvalSpec, EvalStats

    spec = {a.name: a.policy for a in manifest.arms}.get(arm, "")
    revision = EvalRevision(type="git", origin="", commit=manifest.git_commit, dirty=manifest.git_dirty) if (
        manifest.git_commit) else None
    done = [s.completed_at for s in samples if s.completed_at]
    return EvalLog(
        status="success" if complete else "cancelled",
        eval=EvalSpec(created=manifest.created_at, task=manifest.task_set_name, run_id=manifest.run_id,
                      task_id=f"{manifest.run_id}-{arm}", eval_id=f"{manifest.run_id}-{arm}",
                      dataset=EvalDataset(name=manifest.task_set_name, samples=len(manifest.instance_ids),
                                          sample_ids=list(manifest.instance_ids)),
                      model=f"tgsuite/{arm}", model_args={"policy": spec}, solver="tgsuite",
                      config=EvalConfig(epochs=len(manifest.seeds)), revision=revision, packages=manifest.packages,
                      metadata={"task_set_sha256": manifest.task_set_sha256, "sandbox": manifest.sandbox,
                                "isolated": manifest.isolated, "limits": manifest.limits,
                                "grader_version": manifest.grader_version, "protocol_hash": manifest.protocol_hash,
                                "seeds": manifest.seeds}),
        results=_results(samples),
        stats=EvalStats(started_at=manifest.created_at, completed_at=max(done) if done else ""),
        samples=list(samples))


def export_inspect(run_dir: str | Path, out_dir: str | Path) -> list[Path]:
    """Write ``<out_dir>/<task set>_<arm>.eval`` per arm of the run; returns the paths. Raises ``ExportError``."""
    from inspect_ai.log import write_eval_log

    root = Path(run_dir)
    manifest = read_manifest(root)
    if manifest is None:
        raise ExportError(f"{root / 'manifest.json'}: not found; fix: pass the --out directory of `tgsuite eval` "
                          "(or serve-tools / grade)")
    results = latest_results(root).results
    if not results:
        raise ExportError(f"{root}: no finished episode (episodes/*/*/s*/a*/result.json); fix: run or resume it first")
    epoch = {seed: i + 1 for i, seed in enumerate(sorted(manifest.seeds))}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for arm in sorted({r.arm for r in results}):
        samples = []
        for r in (r for r in results if r.arm == arm):
            d = episode_dir(root, r.instance_id, r.arm, r.seed, r.attempt) / TRAJECTORY_FILE
            try:
                traj = read_trajectory(d) if d.is_file() else None
            except ValueError as exc:
                raise ExportError(str(exc)) from None
            samples.append(eval_sample(r, traj, epoch.get(r.seed, r.seed + 1)))
        planned = len(manifest.instance_ids) * len(manifest.seeds)
        path = out / f"{manifest.task_set_name}_{arm}.eval"
        write_eval_log(eval_log(manifest, arm, samples, complete=len(samples) >= planned), str(path))
        paths.append(path)
    return paths


__all__ = ["ExportError", "SCORES", "chat_messages", "enable_zstd_zip", "eval_log", "eval_sample", "export_inspect",
           "scores_of"]
