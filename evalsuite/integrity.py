"""One scored episode per cell, from the checkpoint the plan names (issue #37): the checks that refuse run
directories whose episodes could have been chosen after the results.

- ``checkpoint_identity``: one checkpoint per (protocol arm, training seed) across every run — the same
  ``checkpoint_sha256`` in every manifest that names one, else the same policy spec — and every episode carries
  its run's policy for that arm; the training seed a checkpoint records (``ArmSpec.train_seed``, the ``seed`` of
  ``PATH/checkpoint.json`` behind an ``hf:PATH`` policy) equals the seed in the arm's label (``tg@s3``).
- ``attempt_history``: a finished attempt is superseded by a later one only when it was an infrastructure failure
  (the runner's retry policy, ``harness.infra.RetryPolicy``); an agent outcome re-run as a new attempt is refused.
- ``attempt_log``: a run whose manifest says it keeps ``attempts.jsonl`` (``harness.attempt_log``) has it, every
  finished non-infra attempt it logged is the one that counts now (an episode folder deleted and resumed samples a
  fresh ``a0``: a re-roll), no attempt finished twice, and the counting ``result.json`` is the one last logged for
  it (not edited; a regrade logs its rewrite). Runs begun before the log was kept are not checked by it.
- ``one_evaluation_per_cell``: a cell (plan arm, training seed, instance, episode seed) belongs to one run: two runs
  whose manifests (or episodes) both hold it are two evaluations of it, from which episodes could be picked after
  the results; so are one run given twice and an episode whose ``run_id`` is another run's (copied in).

Each problem raises :class:`evalsuite.outcomes.EvalDataError` naming the run, the arm and seed, and the fix.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from evalsuite.outcomes import EvalDataError, parse_arm, single_seed
from harness.rundir import (
    ATTEMPT_LOG_FILE,
    EPISODES_DIR,
    RESULT_FILE,
    LoadedRun,
    attempt_indices,
    counting_attempt,
    episode_dirs,
    read_attempt_log,
    read_result,
    result_sha256,
)
from harness.schema import AttemptRecord
from protocols.schema import Protocol


def checkpoint_info(policy: str) -> tuple[Path, dict[str, object]] | None:
    """(path, contents) of the ``checkpoint.json`` behind an ``hf:PATH`` policy (PATH or its parent); None when the
    policy names no checkpoint folder."""
    if not policy.startswith("hf:"):
        return None
    for cand in (Path(policy[3:]) / "checkpoint.json", Path(policy[3:]).parent / "checkpoint.json"):
        if cand.is_file():
            try:
                return cand, json.loads(cand.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise EvalDataError(f"{cand}: not a checkpoint record ({exc}); restore it from the training run") from None
    return None


def planned_arms(proto: Protocol) -> set[str]:
    pc = proto.assay_sensitivity.positive_control
    return {a.name for a in proto.arms} | ({pc.arm} if pc else set())


def same_policy(spec: str, episode_policy: str) -> bool:
    """Whether an episode's ``policy`` (the policy's ``name``) is the manifest's spec of its arm. A policy object
    passed to ``run_eval`` without a ``spec`` is recorded as ``object:<name>`` in the manifest
    (``harness.runner_arms``) and as ``<name>`` in its episodes."""
    return episode_policy == spec or f"object:{episode_policy}" == spec


def checkpoint_identity(proto: Protocol, runs: list[LoadedRun]) -> None:
    """Refuse two checkpoints behind one (arm, training seed), or a checkpoint whose recorded seed is not its label's."""
    planned = planned_arms(proto)
    shas: dict[tuple[str, int], set[str]] = defaultdict(set)
    policies: dict[tuple[str, int], set[str]] = defaultdict(set)
    unhashed: set[tuple[str, int]] = set()
    for r in runs:
        m = r.need_manifest()
        spec_policy = {}
        for a in m.arms:
            if a.name.split("@")[0] not in planned:
                continue  # another arm of the run (e.g. the base model): not part of this comparison
            arm, seed = parse_arm(a.name, m, planned, single_seed(proto))
            spec_policy[a.name] = a.policy
            key = (arm, seed)
            policies[key].add(a.policy)
            if a.checkpoint_sha256:
                shas[key].add(a.checkpoint_sha256)
            else:
                unhashed.add(key)
            if a.train_seed is not None and int(a.train_seed) != seed:
                raise EvalDataError(
                    f"run {m.run_id}: arm {a.name!r} is labelled training seed {seed} but its manifest records "
                    f"train_seed {a.train_seed}; a checkpoint keeps the seed it was trained with: name the arm "
                    f"'{arm}@s{a.train_seed}' (and freeze a plan listing the seeds you trained)"
                )
            info = checkpoint_info(a.policy)
            if info is not None and "seed" in info[1] and int(info[1]["seed"]) != seed:  # type: ignore[call-overload]
                raise EvalDataError(
                    f"run {m.run_id}: arm {a.name!r} is labelled training seed {seed} but {info[0]} records seed "
                    f"{info[1]['seed']}; seeds cannot be relabelled after training: evaluate it as "
                    f"'{arm}@s{info[1]['seed']}' under a plan that preregisters that seed"
                )
        for res in r.results:
            want = spec_policy.get(res.arm)
            if want is not None and not same_policy(want, res.policy):
                raise EvalDataError(
                    f"run {m.run_id}: episode {res.instance_id}/{res.arm}/s{res.seed} was produced by {res.policy!r}, "
                    f"the manifest's arm {res.arm!r} is {want!r}; one arm and seed is one checkpoint: remove the "
                    "episodes of the other policy and re-run them"
                )
    for key in sorted(policies):
        many = shas[key] if key not in unhashed else policies[key]
        if len(many) > 1:
            what = "checkpoints (sha256)" if key not in unhashed else "policies"
            raise EvalDataError(
                f"arm {key[0]} training seed {key[1]} was evaluated with {len(many)} different {what}: "
                f"{sorted(x[:80] for x in many)}; the plan names one checkpoint per arm and seed, so episodes cannot "
                "be picked from several: analyse the runs of one checkpoint only (the one trained with that seed)"
            )


def attempt_history(runs: list[LoadedRun]) -> None:
    """Refuse an episode whose superseded finished attempt was not an infrastructure failure."""
    bad: list[str] = []
    for r in runs:
        if not r.superseded:
            continue
        for inst, arm, seed, d in episode_dirs(r.path):
            idx = [a for a in attempt_indices(d) if (d / f"a{a}" / RESULT_FILE).is_file()]
            for a in idx[:-1]:
                res = read_result(d / f"a{a}")
                if res is not None and res.failure_class != "infra":
                    bad.append(f"{r.path}/episodes/{inst}/{arm}/s{seed}/a{a} ({res.failure_class}, {res.status})")
    if bad:
        raise EvalDataError(
            f"{len(bad)} episode(s) were re-run after an outcome that was not an infrastructure failure, e.g. "
            f"{bad[0]}; only infra failures may be retried (the runner never retries an agent outcome): delete "
            "the later attempt directories of those episodes so that the first scored attempt counts"
        )


EpisodeKey = tuple[str, str, int]  # instance, run arm, episode seed: one episode folder of a run


def counted_on_disk(run_dir: Path) -> dict[EpisodeKey, tuple[int, str]]:
    """(attempt, sha256 of its ``result.json`` bytes) of the counting attempt (the highest finished one,
    ``harness.rundir``) of every episode under ``run_dir/episodes``."""
    out: dict[EpisodeKey, tuple[int, str]] = {}
    for inst, arm, seed, d in episode_dirs(run_dir):
        got = counting_attempt(d)
        if got is not None:
            out[(inst, arm, seed)] = (got[0], result_sha256((d / f"a{got[0]}" / RESULT_FILE).read_bytes()))
    return out


_LOG_FIXES = {
    "replaced": "an episode is produced once and its first finished outcome counts (only infrastructure failures "
                "are retried): restore the run directory from a copy made before the episodes were re-run, or "
                "evaluate the plan's cells again into a new run directory and analyse that one",
    "twice": "an attempt is produced once: restore the run directory from a copy made before it was re-run, or "
             "evaluate the plan's cells again into a new run directory and analyse that one",
    "edited": "a result is the runner's record of its attempt: restore the file from a copy, or re-derive it from "
              "the attempt's stored artifacts with `tgsuite eval --regrade --out DIR` (logged as a regrade)",
    "unlogged": "if the run was stopped just after writing it, run the same `tgsuite eval --out DIR` command again "
                "(it logs finished attempts a stopped run had not logged); otherwise the file was put there by hand: "
                "delete that attempt folder's result.json and restore the run from a copy",
}


def log_problems(records: list[AttemptRecord], counted: dict[EpisodeKey, tuple[int, str]]) -> list[tuple[str, str]]:
    """(kind, what) of each way the episodes on disk disagree with their log (kinds: ``_LOG_FIXES``)."""
    by_key: dict[EpisodeKey, list[AttemptRecord]] = defaultdict(list)
    for rec in records:
        by_key[(rec.instance_id, rec.arm, rec.seed)].append(rec)
    out: list[tuple[str, str]] = []
    for key in sorted(set(by_key) | set(counted)):
        name, lines = f"{EPISODES_DIR}/{key[0]}/{key[1]}/s{key[2]}", by_key.get(key, [])
        now = counted.get(key)
        firsts: dict[int, list[AttemptRecord]] = defaultdict(list)
        for rec in lines:
            if rec.event != "regrade":
                firsts[rec.attempt].append(rec)
        for a, recs in sorted(firsts.items()):
            if len(recs) > 1:
                out.append(("twice", f"{name}/a{a} finished {len(recs)} times (logged {recs[0].status}, then "
                                     f"{recs[-1].status}): its result.json was removed and the attempt re-run"))
            if recs[0].failure_class != "infra" and (now is None or now[0] != a):
                counts = f"a{now[0]} counts now" if now is not None else "no attempt of it is on disk now"
                out.append(("replaced", f"{name}/a{a} finished as {recs[0].failure_class} ({recs[0].status}) but "
                                        f"{counts}: its folder was deleted and the episode re-run, or replaced"))
        if now is not None:
            mine = [rec for rec in lines if rec.attempt == now[0]]
            if not mine:
                out.append(("unlogged", f"{name}/a{now[0]}/{RESULT_FILE} has no line in {ATTEMPT_LOG_FILE}"))
            elif mine[-1].result_sha256 != now[1]:
                out.append(("edited", f"{name}/a{now[0]}/{RESULT_FILE} (sha256 {now[1][:12]}) is not the result "
                                      f"logged for it ({mine[-1].result_sha256[:12]}, {mine[-1].event}): it was "
                                      "changed after it was written"))
    return out


def attempt_log(runs: list[LoadedRun]) -> None:
    """Refuse a run that keeps an attempt log (its manifest says so) whose episodes disagree with it, or whose
    log is missing (module docstring)."""
    for r in runs:
        m = r.manifest
        if m is None or not m.attempt_log:
            continue  # begun before the log was kept: attempt_history's check only
        records = read_attempt_log(r.path)
        if records is None:
            raise EvalDataError(
                f"run {m.run_id} ({r.path}): {ATTEMPT_LOG_FILE} is missing, but the manifest says this run keeps a "
                f"log of its finished attempts (attempt_log); without it an episode deleted and re-run cannot be told "
                f"from a first one (e.g. {_first_episode(r)}): restore {ATTEMPT_LOG_FILE} from a copy of the run, or "
                "evaluate the plan's cells again into a new run directory and analyse that one"
            )
        problems = log_problems(records, counted_on_disk(r.path))
        if problems:
            kind = problems[0][0]
            same = [what for k, what in problems if k == kind]
            raise EvalDataError(
                f"run {m.run_id} ({r.path}): {len(same)} episode(s) disagree with {ATTEMPT_LOG_FILE}, the log of "
                f"every finished attempt, e.g. {same[0]}; fix: {_LOG_FIXES[kind]}"
            )


def _first_episode(r: LoadedRun) -> str:
    if not r.results:
        return "none is finished yet"
    x = r.results[0]
    return f"{EPISODES_DIR}/{x.instance_id}/{x.arm}/s{x.seed}"


Cell = tuple[str, int, str, int]  # plan arm, training seed, instance, episode seed


def _cells(proto: Protocol, run: LoadedRun) -> set[Cell]:
    """The plan's cells a run evaluated: its manifest's planned arms x instances x episode seeds, and every episode
    it holds (a manifest rewritten by a narrower resume still owns the episodes on disk)."""
    planned, single = planned_arms(proto), single_seed(proto)
    m = run.need_manifest()
    cells: set[Cell] = set()
    for a in m.arms:
        if a.name.split("@")[0] in planned:
            arm, seed = parse_arm(a.name, m, planned, single)
            cells |= {(arm, seed, i, s) for i in m.instance_ids for s in m.seeds}
    for res in run.results:
        if res.arm.split("@")[0] in planned:
            arm, seed = parse_arm(res.arm, m, planned, single)
            cells.add((arm, seed, res.instance_id, res.seed))
    return cells


def one_evaluation_per_cell(proto: Protocol, runs: list[LoadedRun]) -> None:
    """Refuse two runs that evaluated one cell, a run given twice, and an episode copied in from another run."""
    owner: dict[Cell, LoadedRun] = {}
    by_id: dict[str, Path] = {}
    for r in runs:
        m = r.need_manifest()
        if m.run_id in by_id:
            raise EvalDataError(
                f"run {m.run_id} is given twice ({by_id[m.run_id]} and {r.path}); a copy of a run is not a second "
                "evaluation: pass each run directory once"
            )
        by_id[m.run_id] = r.path
        copied = [x for x in r.results if x.run_id != m.run_id]
        if copied:
            x = copied[0]
            raise EvalDataError(
                f"{r.path}: {len(copied)} episode(s) were written by another run (e.g. {EPISODES_DIR}/{x.instance_id}/"
                f"{x.arm}/s{x.seed}/a{x.attempt}/{RESULT_FILE} names run {x.run_id!r}, the manifest {m.run_id!r}); "
                "episodes copied between run directories can be picked after the results: analyse the run that "
                "produced them, or delete the copies"
            )
        clash: dict[str, list[Cell]] = defaultdict(list)
        for c in sorted(_cells(proto, r)):
            first = owner.setdefault(c, r)
            if first is not r:
                clash[first.need_manifest().run_id].append(c)
        for other, cells in clash.items():
            arm, seed, inst, ep = cells[0]
            raise EvalDataError(
                f"runs {other} ({by_id[other]}) and {m.run_id} ({r.path}) both evaluated {len(cells)} cell(s) of the "
                f"plan (e.g. arm {arm} training seed {seed}, instance {inst}, episode seed {ep}); each episode is "
                "produced once, so mixing two evaluations lets episodes be picked after the results: analyse one "
                "evaluation of each arm and seed (the first one made under the plan), and resume that run directory "
                "(`tgsuite eval --out DIR`) to evaluate missing instances or seeds"
            )
