"""A bucket checked against its remote manifests (tiered storage), for ``pylog verify-remote`` and ``pylog
verify --remote``: how to reach the bucket (options shared by the remote commands) and the check itself.

Nothing here writes to the bucket.
"""

from __future__ import annotations

import argparse
from typing import Sequence, TextIO

from ..storage.remote import ObjectStore, RemoteLog
from .output import report_partition

__all__ = ["client_options", "objects_of", "verify_remote"]


def client_options(parser: argparse.ArgumentParser) -> None:
    """The options saying how to reach a bucket (the location itself is the command's own argument)."""
    parser.add_argument("--endpoint-url", default="", help="the S3 API's URL (default: AWS_ENDPOINT_URL or AWS)")
    parser.add_argument("--region", default="", help="the bucket's region (default: AWS_REGION or the profile's)")
    parser.add_argument("--profile", default="", help="the AWS credentials profile")


def objects_of(location: str, args: argparse.Namespace) -> ObjectStore:
    """The bucket at ``location`` reached as :func:`client_options` say."""
    return ObjectStore.from_settings({"remote.storage.location": location,
                                      "remote.storage.endpoint.url": args.endpoint_url,
                                      "remote.storage.region": args.region, "remote.storage.profile": args.profile})


def verify_remote(objects: ObjectStore, topics: Sequence[str], full: bool, out: TextIO) -> int:
    """Check every partition shipped to ``objects`` (of ``topics``; all when empty) against its remote
    manifest (:meth:`RemoteLog.check`), printing a line per partition and each problem; returns the count."""
    problems = 0
    for topic in topics or sorted(objects.folders("")):
        for partition in sorted(int(p) for p in objects.folders(topic + "/") if p.isdigit()):
            remote = RemoteLog(objects, topic, partition)
            found = remote.check(full=full)
            m = remote.manifest()
            problems += len(found)
            report_partition(out, f"{topic}-{partition}", f"{len(m.segments)} shipped segments",
                             m.log_start_offset, m.end_offset, found)
    print("verify-remote: " + ("no problems" if not problems else f"{problems} problem(s)"), file=out)
    return problems
