"""``tgsuite images``: build and inspect the offline base image (see ``harness.images``)."""

from __future__ import annotations

import argparse
import json
import time

from tgsuite.commands.common import CLIError

EPILOG = """\
examples:
  tgsuite images build            # build tgsuite/base:<suite>-<hash> if missing (a few minutes), else return at once
  tgsuite images build --force    # rebuild even though the tag exists
  tgsuite images show             # tag, image id, and the Debian package manifest recorded in its labels

The image is built offline: debootstrap --variant=minbase from the Debian mirror your apt sources name
(/etc/apt/sources.list{,.d/*}), then `docker import`. Needs root, debootstrap and a running Docker engine.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "images",
        help="build / show the offline Docker base image",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="images_command", metavar="ACTION")
    build = sub.add_parser(
        "build", help="build the base image if missing", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    build.add_argument("--force", action="store_true", help="rebuild even if the content-hash tag exists")
    build.add_argument("--suite", default=None, help="Debian suite (default: bookworm, Python 3.11)")
    build.add_argument("--mirror", default=None, help="Debian mirror URL (default: the one your apt sources name)")
    build.add_argument("--build-dir", default=None, help="scratch directory for the rootfs (default: $TMPDIR)")
    build.set_defaults(func=_build)
    show = sub.add_parser("show", help="print the base image tag, id and package manifest", epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=_show)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _client() -> object:
    from harness.images import connect
    from harness.sandbox import SandboxUnavailable

    try:
        return connect()
    except SandboxUnavailable as exc:
        raise CLIError(str(exc)) from exc


def _build(args: argparse.Namespace) -> int:
    from harness import images

    client = _client()
    suite = args.suite or images.DEFAULT_SUITE
    if not suite.replace("-", "").isalnum():
        raise CLIError(f"--suite {suite!r} is not a Debian suite name. Fix: use e.g. --suite bookworm.")
    start = time.monotonic()
    try:
        tag = images.ensure_base_image(
            client, force=args.force, suite=suite, mirror=args.mirror, build_dir=args.build_dir
        )
    except images.ImageBuildError as exc:
        raise CLIError(str(exc)) from exc
    print(f"{tag}  ({images.image_digest(client, tag)}, {time.monotonic() - start:.1f} s)")
    return 0


def _show(args: argparse.Namespace) -> int:
    from harness import images

    client = _client()
    tag = images.base_image_tag()
    if not images.image_present(client, tag):
        raise CLIError(f"base image {tag} is not built on this engine. Fix: run `tgsuite images build`.")
    packages = images.image_manifest(client, tag)
    info = {"tag": tag, "id": images.image_digest(client, tag), "packages": packages}
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print(f"{tag}  {info['id']}  ({len(packages)} Debian packages)")
        for name, version in sorted(packages.items()):
            print(f"  {name} {version}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m tgsuite.commands.images build``), used by scripts/setup.sh."""
    import logging
    import sys

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="tgsuite")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["images", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"tgsuite images: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
