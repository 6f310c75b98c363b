"""``tgsuite eval``: run policies on a task set (arms × instances × seeds), grade, and write a resumable run dir."""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from harness.sandbox import SANDBOX_KINDS
from tgsuite.commands.common import CLIError

log = logging.getLogger(__name__)

EPILOG = """\
worked example (the mini task set, oracle vs null, 3 seeds, 2 workers, Docker sandboxes):
  tgsuite tasks make-mini --out tasks/mini-heldout --split heldout --repos 4 --tasks-per-repo 3
  tgsuite tasks validate tasks/mini-heldout
  tgsuite eval --tasks tasks/mini-heldout --policy oracle --policy null --seeds 0,1,2 \\
      --out runs/oracle-vs-null --workers 2 --sandbox docker

Name an arm with NAME=SPEC, e.g. --policy tg=hf:runs/train/checkpoints/step_200 (arm names become directory
names). SPEC is one of: oracle, null, expert, hf:<checkpoint dir>, openai:<base url>#<model>.

A quick look, lm-eval / Inspect style: the first 5 instances of one repository, an endpoint model at temperature
0.2, its key read from $MY_KEY (only the variable's name is recorded), at most 4 requests in flight:
  export MY_KEY=sk-...
  tgsuite eval --tasks tasks/mini-heldout --instance 'lumen-co__jolly-ember-*' --limit 5 --out runs/quick \\
      --policy openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B --temperature 0.2 --top-p 0.95 --max-tokens 1024 \\
      --api-key-env MY_KEY --max-concurrency 4 --workers 4

Resume: run the same command again. Finished episodes are kept; crashed ones re-run; infrastructure errors are
retried up to --max-attempts attempts and never counted as agent failures. --regrade re-decides every finished
episode from its stored test output (no sandboxes) and rebuilds results.jsonl.

The model of an openai: or hf: arm gets the system prompt, tools and messages that `tgsuite eval --show-prompt`
prints (docs/HARNESS.md §9). Before any sandbox starts, each openai: arm gets one small preflight request, so a
wrong URL, model name or key (HTTP 401/403/404) stops the run at once. The settings each arm actually sent are
recorded in manifest.json (arms[].generation) and aggregate.json; a resume with other settings is refused.

Output: RUN_DIR/manifest.json, RUN_DIR/episodes/<instance>/<arm>/s<seed>/a<attempt>/{trajectory.jsonl,
patch.diff, grade/, result.json}, RUN_DIR/results.jsonl, and RUN_DIR/aggregate.json (per arm: n, rates of
code_ok / behaviour_ok / joint_ok with Wilson 95% CIs, the 2x2, per-repository rates, secondary-metric means, the
generation settings each arm sent; descriptive, no decision: `tgsuite report RUN_DIR` renders it).
--sandbox local is NOT isolated (agent code runs as you, with your network); the manifest records isolated=false.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "eval", help="run policies on a task set and grade them (resumable)",
        description="Run each policy (arm) on every instance × seed of a task set, grade each episode in a fresh "
                    "sandbox, and write a resumable run directory.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tasks", required=True, metavar="DIR", help="task set folder (with tasks.jsonl)")
    p.add_argument("--policy", action="append", default=[], metavar="[NAME=]SPEC",
                   help="an arm; repeat for more (not needed with --regrade)")
    p.add_argument("--seeds", default="0", help="comma-separated arm seeds, e.g. 0,1,2 (default 0)")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory (created, or resumed)")
    p.add_argument("--workers", type=int, default=1, help="episodes run at once (default 1; 2 fits 2 cores)")
    p.add_argument("--sandbox", choices=SANDBOX_KINDS, default="docker", help="default docker")
    p.add_argument("--executor", choices=["thread", "ray"], default="thread",
                   help="thread: --workers threads here (default); ray: --workers Ray actors, each running episodes "
                        "on its own node's sandboxes (needs pip install 'tgsuite[ray]')")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --executor ray: the cluster to join, e.g. 10.0.0.5:6379 (default, as ray.init: "
                        "$RAY_ADDRESS, else the last cluster `ray start` made on this machine, else a new local Ray)")
    p.add_argument("--split", default=None, help="only instances of this split, e.g. heldout")
    p.add_argument("--instance", action="append", default=None, metavar="ID|GLOB",
                   help="only these instances; repeatable; shell globs match ids, e.g. --instance 'calc-*'")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="only the first N instances (task-set order, after --split/--instance/validation)")
    p.add_argument("--protocol", default=None, metavar="FROZEN.json",
                   help="frozen protocol; its sha256 is recorded, and before any episode the run is checked against "
                        "it: the task set's sha256, arm names analyze can read (<plan arm>@s<seed>), and the "
                        "settings its [eval] table pins; then the run is registered on the record's prereg ref "
                        "(refs/tgsuite/prereg), so its analysis can tell whether it was the only evaluation made")
    p.add_argument("--regrade", action="store_true", help="re-decide finished episodes offline; rebuild results")
    p.add_argument("--max-attempts", type=int, default=3, help="attempts per episode on infra errors (default 3)")
    p.add_argument("--max-turns", type=int, default=30, help="assistant turns per episode (default 30)")
    p.add_argument("--finish-notice", type=int, default=0, metavar="N",
                   help="tell the agent when only N turns are left (a user message: call finish now with what you "
                        "changed and what still fails); default 0 = never")
    p.add_argument("--format-retries", type=int, default=0, metavar="K",
                   help="sample a turn again, at most K times, when it has no tool call or a call that does not parse "
                        "(SWE-agent's requery after a format error; the draft is not shown to the agent, is kept in "
                        "the trajectory and counts in tool-call validity); default 0 = every turn as sampled")
    p.add_argument("--feedback", default="none", metavar="SPEC",
                   help="hints for every arm (harness.feedback_spec): none (default); correct = the Markdown reminder "
                        "before the finish turn, as the paper's hinted teacher sees it; wrong, irrelevant; "
                        "mix:correct=0.5,none=0.5 (drawn per episode); KIND@PLACEMENT, e.g. correct@turn=0. Recorded "
                        "in manifest.json; a resume with other hints is refused")
    p.add_argument("--wall-s", type=float, default=600.0, help="agent wall-clock seconds per episode (default 600)")
    p.add_argument("--grade-timeout", type=float, default=900.0, help="seconds for the hidden tests (default 900)")
    p.add_argument("--disk-mib", type=int, default=2048, metavar="MIB",
                   help="writable space per Docker sandbox: the work directory and each temp directory, and any "
                        "one file (default 2048; the manifest's disk_limit says how it was applied)")
    p.add_argument("--run-seed", type=int, default=0, help="mixed into every episode seed (default 0)")
    p.add_argument("--ignore-validation", action="store_true",
                   help="run instances that validation.json rejected, and flaky tests it excluded")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("generation (every hf: and openai: arm; scripted arms do not sample)")
    g.add_argument("--temperature", type=float, default=None, help="sampling temperature (0 = greedy)")
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass in (0, 1]")
    g.add_argument("--max-tokens", type=int, default=None, help="most tokens per assistant turn")
    e = p.add_argument_group("endpoints (openai: arms)")
    e.add_argument("--api-key-env", default=None, metavar="VAR",
                   help="read the API key from this environment variable (default OPENAI_API_KEY when set); the key "
                        "is never written to disk")
    e.add_argument("--max-concurrency", type=int, default=None, metavar="N",
                   help="most requests in flight per endpoint arm (default: one per worker; not with --executor ray, "
                        "where --workers bounds them)")
    e.add_argument("--request-timeout", type=float, default=None, metavar="S",
                   help="seconds one request may take before it is retried (default 120); keep it below --wall-s, so "
                        "that a hung endpoint is an infrastructure error (retried, never scored) rather than the "
                        "agent running out of time")
    e.add_argument("--max-retries", type=int, default=None, metavar="N",
                   help="retries of a request after a timeout, a dropped connection or HTTP 408/409/429/5xx "
                        "(default 4; 401/403/404 are never retried); the episode's --wall-s also ends them")
    p.add_argument("--show-prompt", action=ShowPrompt, nargs=0,
                   help="print the system prompt, the tools and the fixed messages a model arm gets, then exit")
    p.set_defaults(func=run)


class ShowPrompt(argparse.Action):
    """``--show-prompt``: print ``prompt_text()`` and exit (no other argument needed)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(prompt_text(), end="")
        parser.exit(0)


def prompt_text() -> str:
    """What the model of an ``openai:`` / ``hf:`` arm is given, as docs/HARNESS.md §9 describes it."""
    from harness.agent import NUDGE_TEXT, SYSTEM_PROMPT_VERSION, system_prompt
    from harness.interfaces import finish_notice
    from harness.tools import tool_schemas

    tools = json.dumps(tool_schemas(), indent=1, ensure_ascii=False)
    return (f"# messages[0], role system ({SYSTEM_PROMPT_VERSION})\n{system_prompt()}\n"
            "# messages[1], role user: the task's problem statement (problem_statement in tasks.jsonl), verbatim\n\n"
            "# tools: the request's \"tools\" field for openai: arms (OpenAI function schemas); hf: arms get the same "
            "list through the checkpoint's chat template (apply_chat_template(tools=...))\n"
            f"{tools}\n\n"
            "# after a turn: each call's result as a tool message (openai: tool_call_id = call_<turn>_<i>); a turn "
            f"without a tool call is answered by this user message\n{NUDGE_TEXT}\n\n"
            "# with --finish-notice N: after the turn that leaves N turns, this user message (here N = 2)\n"
            f"{finish_notice(2)}\n")


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise CLIError(f"--seeds {text!r} is not a comma-separated list of integers; fix: e.g. --seeds 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise CLIError(f"--seeds {text!r} must name at least one seed >= 0, each once (a seed names the episode "
                       "folder s<seed>); fix: e.g. --seeds 0,1,2")
    return seeds


def parse_arms(specs: list[str]) -> dict[str, str]:
    """``[NAME=]SPEC`` → {name: spec}. Default names: the spec for scripted policies, else a slug of it."""
    if not specs:
        raise CLIError("no --policy given; fix: e.g. --policy oracle --policy null")
    arms: dict[str, str] = {}
    for item in specs:
        name, sep, spec = item.partition("=")
        if sep and "/" in name and ":" not in name:
            raise CLIError(f"--policy {item!r}: arm name {name!r} has a '/' (an arm name becomes a folder name); "
                           f"fix: e.g. --policy {name.replace('/', '-')}={spec}")
        if not sep or ":" in name or "/" in name:
            spec, name = item, _default_name(item)
        if name in arms:
            raise CLIError(f"arm name {name!r} given twice; fix: name arms, e.g. --policy a={spec}")
        arms[name] = spec
    return arms


def _default_name(spec: str) -> str:
    if ":" not in spec:
        return spec
    kind, _, rest = spec.partition(":")
    tail = rest.rstrip("/").split("#")[-1].split("/")[-1] or kind
    return "".join(ch if ch.isalnum() or ch in "_.-" else "-" for ch in f"{kind}-{tail}")


def select_instances(insts: list[Any], patterns: list[str], all_ids: list[str], source: str) -> list[Any]:
    """Instances whose id equals or matches (``fnmatch``) one of ``patterns``; a pattern matching no id of the task
    set is an error (a typo must not silently shrink the run)."""
    dead = [p for p in patterns if not any(fnmatch.fnmatchcase(i, p) for i in all_ids)]
    if dead:
        raise CLIError(f"--instance {dead} matches no instance in {source}; fix: check the ids in tasks.jsonl "
                       "(globs: * ? [..], quote them in the shell)")
    return [i for i in insts if any(fnmatch.fnmatchcase(i.instance_id, p) for p in patterns)]


def build_arms(args: argparse.Namespace, arms: dict[str, str], ts: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Policy objects for the arms with the run-wide generation and endpoint settings, and those settings as the
    run's config (recorded in aggregate.json; the API key itself never is, only the variable's name)."""
    from harness.policies import EndpointSettings, GenerationSettings, build_arm_policy, parse_policy_spec

    try:
        kinds = {name: parse_policy_spec(spec)[0] for name, spec in arms.items()}
        gen = GenerationSettings(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens)
        endpoint = EndpointSettings(api_key_env=args.api_key_env, max_concurrency=args.max_concurrency,
                                    request_timeout_s=getattr(args, "request_timeout", None),
                                    max_retries=getattr(args, "max_retries", None))
        if "openai" not in kinds.values() and endpoint.given():
            raise ValueError("--api-key-env, --max-concurrency, --request-timeout and --max-retries are for openai: "
                             "arms, and no arm is one; fix: drop them or add e.g. "
                             "--policy openai:http://127.0.0.1:8000/v1#MODEL")
        policies: dict[str, Any] = {name: build_arm_policy(spec, generation=gen, endpoint=endpoint, tasks=ts)
                                    for name, spec in arms.items()}
        # the expert screens candidate fixes by running task code: hand the runner its spec, so that it builds the
        # policy with the run's own sandboxes (a container under --sandbox docker), never a host process
        policies |= {name: arms[name] for name, kind in kinds.items() if kind == "expert"}
    except (ValueError, OSError) as exc:
        raise CLIError(str(exc)) from None
    config: dict[str, Any] = {"endpoint.api_key_env": args.api_key_env}
    for name, p in policies.items():
        config |= {f"request.{name}.{k}": v for k, v in getattr(p, "request_settings", dict)().items()}
    return policies, config


def _check_plan(args: argparse.Namespace, ts: Any, policies: dict[str, Any]) -> None:
    """With --protocol: refuse, before any episode, a run the frozen plan's analysis could not use
    (``tgsuite.commands.eval_plan``)."""
    if args.protocol is None:
        return
    from protocols.load import ProtocolError
    from protocols.run_registry import registry_repo
    from tgsuite.commands.eval_plan import check_run_against_plan, load_frozen_plan

    run = {"max_turns": args.max_turns, "wall_s": args.wall_s, "finish_notice": args.finish_notice,
           "format_retries": args.format_retries, "feedback": args.feedback}
    for warning in check_run_against_plan(load_frozen_plan(args.protocol), task_set_sha256=ts.sha256,
                                          arms=policies, run=run, source=args.protocol):
        print(f"tgsuite eval: warning: {warning}", file=sys.stderr)
    try:
        registry_repo(args.protocol)  # the run is registered under the record before its first episode
    except ProtocolError as exc:
        raise CLIError(f"--protocol {exc}") from None


def preflight_endpoints(policies: dict[str, Any], wall_s: float) -> None:
    """One small request to each ``openai:`` arm before any sandbox starts (``OpenAIPolicy.preflight``): a wrong
    URL, model or key fails here once, naming the arm, the endpoint and the fix."""
    from harness.policies.openai import ModelEndpointError
    from harness.tools import tool_schemas

    for name, p in policies.items():
        if not hasattr(p, "preflight"):
            continue
        if p.timeout_s >= wall_s:
            log.warning("arm %s: --request-timeout %.0f s is not below --wall-s %.0f s: a hung endpoint will end "
                        "episodes at their wall-clock limit (scored) instead of as infrastructure errors", name,
                        p.timeout_s, wall_s)
        try:
            p.preflight(tool_schemas())
        except ModelEndpointError as exc:
            raise CLIError(f"arm {name}: the endpoint preflight request failed, nothing was run: {exc}") from None


def ray_arms(policies: dict[str, Any], arms: dict[str, str]) -> dict[str, Any]:
    """Under ``--executor ray`` scripted arms travel as their spec (each Ray worker builds them, ``oracle`` from
    the task set sent to it); model arms travel as the policy objects built here (pickled). An ``openai:`` arm with
    a concurrency cap is refused: its cap could not hold across the actors (each gets its own copy) and its lock
    cannot be pickled."""
    from harness.policies import SCRIPTED_CLASSES

    capped = sorted(name for name, p in policies.items() if getattr(p, "max_concurrency", None) is not None)
    if capped:
        raise CLIError(f"--max-concurrency with --executor ray (arms {capped}): the cap cannot hold across Ray "
                       "actors; fix: drop --max-concurrency and bound the requests in flight per arm with --workers "
                       "(each actor runs one episode at a time)")
    return {name: arms[name] if arms[name] in SCRIPTED_CLASSES else p for name, p in policies.items()}


def _protocol_hash(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CLIError(f"--protocol {path}: cannot read it as JSON ({exc}); fix: pass the file written by "
                       "`tgsuite protocol freeze`") from None
    sha = data.get("sha256") if isinstance(data, dict) else None
    if not isinstance(sha, str) or len(sha) != 64:
        raise CLIError(f"--protocol {path}: no 64-hex 'sha256' field; fix: pass a frozen protocol "
                       "(`tgsuite protocol freeze`), not the plan TOML")
    return sha


def _load(args: argparse.Namespace) -> tuple[Any, dict[str, list[str]]]:
    from harness.tasks import load_task_set
    from harness.validate import load_validation

    try:
        ts = load_task_set(args.tasks)
    except (OSError, ValueError) as exc:
        raise CLIError(f"--tasks {args.tasks}: {exc}") from None
    insts = ts.instances
    if args.split:
        insts = [i for i in insts if i.split == args.split]
    if args.instance:
        insts = select_instances(insts, args.instance, [i.instance_id for i in ts.instances], args.tasks)
    excluded: dict[str, list[str]] = {}
    try:
        val = load_validation(args.tasks)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if args.ignore_validation and val is not None:
        for r in val.rejected:
            if r.instance_id in {i.instance_id for i in insts}:
                log.warning("--ignore-validation: running %s although validation rejected it (%s); its results "
                            "say nothing about the policy", r.instance_id, r.reason)
        val = None
    if val is not None:
        if val.task_set_sha256 != ts.sha256:
            raise CLIError(f"{args.tasks}/validation.json was made for another version of this task set; fix: "
                           "re-run `tgsuite tasks validate` or pass --ignore-validation")
        rejected = {r.instance_id: r.reason for r in val.rejected}
        for iid in sorted(rejected.keys() & {i.instance_id for i in insts}):
            log.warning("skipping %s: rejected by validation (%s)", iid, rejected[iid])
        insts = [i for i in insts if i.instance_id not in rejected]
        excluded = val.excluded_tests()
    if getattr(args, "limit", None) is not None:
        if args.limit < 1:
            raise CLIError(f"--limit {args.limit}: must be >= 1; fix: e.g. --limit 10")
        insts = insts[: args.limit]
    if not insts:
        raise CLIError(f"no instances left to run in {args.tasks} (after --split/--instance/validation); "
                       "fix: check the filters")
    return ts.model_copy(update={"instances": insts}), excluded


def _check_out(out: Path, tasks: str) -> None:
    """``--out`` is new, empty or an eval run (``harness.run_control.check_out_dir``), checked before any work."""
    from harness.run_control import check_out_dir

    try:
        check_out_dir(out, "eval", tasks)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _feedback(spec: str) -> Any:
    from harness.feedback_spec import parse_feedback

    try:
        return parse_feedback(spec)
    except (ValueError, TypeError) as exc:
        raise CLIError(f"--feedback {spec!r}: {exc}; fix: e.g. --feedback correct, or --feedback none") from None


def run(args: argparse.Namespace) -> int:
    from harness.infra import RetryPolicy
    from harness.interfaces import EpisodeLimits
    from harness.runner import RunAborted, run_eval
    from harness.runner_regrade import regrade_run
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.sandbox import SandboxSpec, SandboxUnavailable

    out = Path(args.out)
    if args.regrade:
        ts, excluded = _load(args)
        try:
            results = regrade_run(out, ts, excluded_tests=excluded)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
        write_aggregate(out, None)
        return _summary(results, len(results))
    seeds, arms = parse_seeds(args.seeds), parse_arms(args.policy)
    _check_out(out, args.tasks)
    if args.workers < 1 or args.max_attempts < 1 or args.disk_mib < 1:
        raise CLIError("--workers, --max-attempts and --disk-mib must be >= 1")
    if args.ray_address and args.executor != "ray":
        raise CLIError("--ray-address is for --executor ray; fix: add --executor ray or drop --ray-address")
    ts, excluded = _load(args)
    feedback = _feedback(args.feedback)
    policies, config = build_arms(args, arms, ts)
    _check_plan(args, ts, policies)
    if args.executor == "ray":
        policies = ray_arms(policies, arms)
    preflight_endpoints(policies, args.wall_s)
    from harness.run_control import RunInterrupted, sandbox_run_id

    factory = TaskSandboxFactory(ts, kind=args.sandbox, run_id=sandbox_run_id(out),
                                 spec=SandboxSpec(disk_bytes=args.disk_mib << 20))
    try:
        factory.preflight()
        results = run_eval(
            ts, policies, seeds, out, sandbox_factory=factory, workers=args.workers,
            limits=EpisodeLimits(max_turns=args.max_turns, wall_s=args.wall_s, finish_notice_turns=args.finish_notice,
                                format_retries=args.format_retries),
            retry=RetryPolicy(max_attempts=args.max_attempts), run_seed=args.run_seed, excluded_tests=excluded,
            grade_timeout_s=args.grade_timeout, protocol_hash=_protocol_hash(args.protocol),
            protocol_record=args.protocol,
            argv=["tgsuite", *sys.argv[1:]], progress=not args.no_progress,
            executor=args.executor, ray_address=args.ray_address, feedback=feedback,
        )
    except SandboxUnavailable as exc:
        raise CLIError(f"sandbox preflight failed ({exc.kind}): {exc}") from None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    except RunAborted as exc:
        print(f"tgsuite eval: {exc}", file=sys.stderr)
        return 1
    except RunInterrupted as exc:
        factory.close()
        print(f"tgsuite eval: {exc}; finished episodes are kept in {out} (results.jsonl rebuilt) and this run's "
              "containers removed. Run the same command again to resume.", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(exc.exit_code)  # in-flight episode threads may still be winding down: do not wait for them
    finally:
        factory.close()
    write_aggregate(out, config)
    return _summary(results, len(ts.instances) * len(arms) * len(seeds), args.max_attempts)


def write_aggregate(out: Path, config: dict[str, Any] | None) -> None:
    """RUN_DIR/aggregate.json: per arm n, rates with Wilson CIs, the 2x2, per repository, secondary metrics.
    A regrade keeps the config recorded by the run that wrote it (the settings are not on its command line)."""
    from evalsuite.run_summary import AGGREGATE_FILE, aggregate_run_dir
    from evalsuite.schema import RunAggregate

    if config is None and (out / AGGREGATE_FILE).is_file():
        try:
            config = RunAggregate.model_validate_json((out / AGGREGATE_FILE).read_text()).config
        except ValueError:
            config = None
    aggregate_run_dir(out, config={**(config or {}), **generation_config(out)})
    print(f"aggregate: {out / AGGREGATE_FILE}")


def generation_config(out: Path) -> dict[str, Any]:
    """``generation.<arm>.<setting>``: what each arm's policy sent / sampled with, from the run manifest (the
    settings every finished episode ran with: a resume with others is refused)."""
    from harness.rundir import read_manifest

    manifest = read_manifest(out)
    return {f"generation.{a.name}.{k}": v for a in (manifest.arms if manifest else []) for k, v in a.generation.items()
            if v is None or isinstance(v, (str, int, float, bool))}


def _rate(scored: list[Any], key: str) -> str:
    return f"{sum(getattr(r, key) for r in scored) / len(scored):.3f}" if scored else "n/a"


def _summary(results: list[Any], planned: int, max_attempts: int | None = None) -> int:
    """Print a per-arm table; exit 0 only when every planned episode has a non-infra result. Says whether
    running again helps: infra errors that used up ``max_attempts`` are not retried by a re-run."""
    arms = sorted({r.arm for r in results})
    print(f"{'arm':<24} {'scored':>6} {'resolved':>9} {'behav_ok':>9} {'joint_ok':>9} {'infra':>6} {'invalid':>7}")
    for arm in arms:
        rs = [r for r in results if r.arm == arm]
        sc = [r for r in rs if r.scored]
        print(f"{arm:<24} {len(sc):>6} {_rate(sc, 'resolved'):>9} {_rate(sc, 'behaviour_ok'):>9} "
              f"{_rate(sc, 'joint_ok'):>9} "
              f"{sum(r.failure_class == 'infra' for r in rs):>6} "
              f"{sum(r.failure_class == 'invalid_instance' for r in rs):>7}")
    missing = planned - len(results)
    infra = sum(r.failure_class == "infra" for r in results)
    exhausted = sum(r.failure_class == "infra" and max_attempts is not None and r.attempt + 1 >= max_attempts
                    for r in results)
    if missing or infra:
        again = ("run the same command again to resume" if missing or infra > exhausted else
                 "a re-run will NOT retry them (every attempt is used up); fix the environment (`tgsuite doctor`), "
                 "then re-run with a larger --max-attempts")
        print(f"incomplete: {missing} episodes without a result, {infra} still infra errors after retries "
              f"({exhausted} out of attempts); {again}", file=sys.stderr)
        return 1
    return 0


load_selection = _load  # public name: `tgsuite serve-tools` selects runnable instances exactly as eval does
