"""``tgsuite tasks import-swebench``: SWE-bench records + local clones → a task set (registered by ``tasks``)."""

from __future__ import annotations

import argparse
from typing import Any

from tgsuite.commands.common import CLIError

EPILOG = """\
worked example (two records of a repository cloned locally; no network needed afterwards):
  git clone https://github.com/benjaminp/six repos/benjaminp__six
  tgsuite tasks import-swebench --records six.jsonl --repos repos --out tasks/six
  tgsuite tasks validate tasks/six                       # gold x3 / empty x3 in Docker
  tgsuite grade --tasks tasks/six --predictions preds.jsonl --out runs/six-preds

--records: SWE-bench records (JSON Lines or a JSON list: instance_id, repo "owner/name", base_commit, patch,
test_patch, problem_statement, FAIL_TO_PASS, PASS_TO_PASS; the JSON-string lists of the Hugging Face dumps are
read too). Unknown fields (hints_text, version, environment_setup_commit, ...) are kept under "extra".
--repos: a folder holding a git clone per repository, named owner__name/ (or owner/name/, or name/), with the
records' base commits in its history. Snapshots are the files at base_commit (snapshots/<id>.tar.gz).
--env KEY=VALUE (repeatable) sets environment variables for the tests: the test command becomes
`env KEY=VALUE ... <test cmd>`.

--environments FILE.json: {"owner/name": {"VERSION": ["pkg==1.0", ...]}} — for each (repository, version) the
host downloads the wheels with pip, a container without network installs them on the base image, and the result is
cached as tgsuite/env:<content hash>; those instances run there (the record's "version" picks the entry). E.g.
  {"dateutil/dateutil": {"2.9": ["six==1.17.0"]}}  with  --env PYTHONPATH=src:/opt/tgsuite-env  (a src/ layout)

--test-log-parser NAME: how the test command's result is read, for records without their own
"test_log_parser". Default junit (pytest's JUnit report: the command must run pytest). Any of swebench's
parse_log_<NAME> parsers instead grades the command's printed log; test ids are then what that parser calls them
(list them in FAIL_TO_PASS / PASS_TO_PASS that way). A package tested with unittest, e.g. more-itertools:
  tgsuite tasks import-swebench --records mi.jsonl --repos repos --out tasks/mi \\
      --test-cmd "python -m unittest -v" --test-log-parser django
  # ids: "test_even (tests.test_more.ChunkedTests.test_even)", or a test's docstring line where it has one

Not done here: the repository itself is not installed, and symbolic links and executable bits are not kept in
snapshots.
"""


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE with KEY a variable name, e.g. LANG=C.UTF-8")
    if any(c.isspace() for c in value) or "'" in value or '"' in value:
        raise argparse.ArgumentTypeError(f"{text!r}: the value may not contain spaces or quotes")
    return key, value


def register_import(sub: Any) -> None:
    """Add ``import-swebench`` to the ``tasks`` sub-command's parsers."""
    p = sub.add_parser(
        "import-swebench", help="SWE-bench records + local git clones -> a task set",
        description="Turn SWE-bench records and local clones of their repositories into a task set: one snapshot "
                    "per record at its base_commit, unknown fields kept.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--records", required=True, metavar="FILE", help="SWE-bench records, JSON Lines or a JSON list")
    p.add_argument("--repos", required=True, metavar="DIR", help="folder of git clones (owner__name/)")
    p.add_argument("--out", required=True, metavar="DIR", help="task set folder to write")
    p.add_argument("--test-cmd", default=None, help="test command for records without one (default python -m pytest)")
    p.add_argument("--test-log-parser", default=None, metavar="NAME",
                   help="how test results are read for records without their own (default junit: pytest's JUnit "
                        "report; or a swebench parser name: django, sympy, pytest, ...)")
    p.add_argument("--env", action="append", type=_env_pair, default=[], metavar="KEY=VALUE",
                   help="environment variable for the tests (repeatable)")
    p.add_argument("--environments", default=None, metavar="FILE.json",
                   help='per (repository, version) pins, {"owner/name": {"VERSION": ["pkg==1.0", ...]}}: builds an '
                        "environment image for each (wheels downloaded here, installed offline; cached)")
    p.add_argument("--overwrite", action="store_true", help="replace a task set already in --out")
    p.set_defaults(func=run)


def _environments(path: str | None) -> tuple[dict[str, dict[str, list[str]]] | None, Any]:
    """The --environments mapping and an image builder for it (None, None without the option)."""
    if path is None:
        return None, None
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CLIError(f"--environments {path}: cannot read it as JSON ({exc})") from None
    ok = isinstance(data, dict) and all(isinstance(v, dict) and all(
        isinstance(p, list) and all(isinstance(x, str) for x in p) for p in v.values()) for v in data.values())
    if not ok:
        raise CLIError(f'--environments {path}: expected {{"owner/name": {{"VERSION": ["pkg==1.0"]}}}}')
    from harness import images
    from harness.env_images import ensure_env_image

    client = images.connect()
    return data, lambda pins: ensure_env_image(client, pins)[0]


def run(args: argparse.Namespace) -> int:
    from harness.images import ImageBuildError
    from harness.sandbox import SandboxUnavailable
    from harness.swebench_import import DEFAULT_LOG_PARSER, DEFAULT_TEST_CMD, import_swebench
    from harness.tasks import TaskSetError

    try:
        environments, image_for = _environments(args.environments)
        summary = import_swebench(args.records, args.repos, args.out, test_cmd=args.test_cmd or DEFAULT_TEST_CMD,
                                  test_log_parser=args.test_log_parser or DEFAULT_LOG_PARSER,
                                  env=dict(args.env), overwrite=args.overwrite, environments=environments,
                                  image_for=image_for)
    except FileExistsError as exc:
        raise CLIError(f"{exc}; fix: choose another --out or pass --overwrite") from None
    except (OSError, TaskSetError, ValueError, ImageBuildError, SandboxUnavailable) as exc:
        raise CLIError(str(exc)) from None
    print(f"wrote {summary.instances} tasks from {len(summary.repos)} repositories to {summary.out}")
    for iid, n in sorted(summary.symlinks_dropped.items()):
        print(f"note: {iid}: {n} symbolic link(s) left out of the snapshot")
    print(f"next: tgsuite tasks validate {summary.out}")
    return 0
