"""``pylog restore`` and ``pylog verify-remote`` (also ``pylog verify --remote``): a store rebuilt from the
bucket it was shipped to, and a bucket checked against its remote manifests (tiered storage:
docs/ARCHITECTURE.md).

Both take the location as ``s3://bucket/prefix``; the endpoint, region and profile come from the options or
boto3's standard chain (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``~/.aws``), credentials from that chain only.
Neither writes to the bucket.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..tiered import restore
from .base import ExitCode, open_store
from .maintenance import verify
from .remote_check import client_options, objects_of, verify_remote

__all__ = ["register"]


def register(sub: Any) -> None:
    r = sub.add_parser("restore", help="rebuild a store from the bucket it was shipped to (tiered storage)",
                       description="Download every shipped segment, index and producer snapshot, each checked "
                                   "against its remote manifest (size, CRC-32C), plus the topics' files and the "
                                   "groups' committed offsets, into DIR "
                                   "(missing or empty), then verify the restored store as `pylog verify` does. "
                                   "What was appended after the last shipped segment is not in the bucket. Exit 1 "
                                   "when the verification finds problems.")
    r.add_argument("location", help="s3://bucket/prefix the store was shipped to")
    r.add_argument("directory", help="where to restore it (missing or empty)")
    client_options(r)
    r.set_defaults(run=_restore)
    v = sub.add_parser("verify-remote", help="check a bucket's shipped segments against their manifests",
                       description="For every partition shipped under LOCATION (or only TOPICs), check that each "
                                   "object its remote manifest names exists with the manifest's size; with --full, "
                                   "download each and compare its CRC-32C too. Exit 1 on any problem.")
    v.add_argument("location", help="s3://bucket/prefix")
    v.add_argument("topics", nargs="*", metavar="topic", help="only these topics (default: all)")
    v.add_argument("--full", action="store_true", help="download every object and check its CRC-32C")
    client_options(v)
    v.set_defaults(run=_verify_remote)


def _restore(args: argparse.Namespace, out: TextIO) -> ExitCode:
    restored = restore(args.location, args.directory, remote_storage_endpoint_url=args.endpoint_url,
                       remote_storage_region=args.region, remote_storage_profile=args.profile)
    for topic, partitions in sorted(restored.partitions.items()):
        for number, (start, end) in sorted(partitions.items()):
            print(f"{topic}-{number}: restored offsets [{start}, {end})", file=out)
    for group, offsets in sorted(restored.group_offsets.items()):
        print(f"group {group}: {len(offsets)} committed offset(s) restored", file=out)
    with open_store(args.directory) as store:
        return ExitCode.OK if not verify(store, [], out) else ExitCode.PROBLEMS


def _verify_remote(args: argparse.Namespace, out: TextIO) -> ExitCode:
    problems = verify_remote(objects_of(args.location, args), args.topics, args.full, out)
    return ExitCode.OK if not problems else ExitCode.PROBLEMS
