"""Ships every closed segment of one partition, pausing after each step for the parent (tests/test_remote_storage.py).

    python tests/remote_ship_child.py SETTINGS_JSON PARTITION_DIR TOPIC PARTITION [--no-pause]

After each object PUT and after the manifest commit it prints ``<event> <object name>`` and waits for a line
on stdin, so the parent can SIGKILL it at exactly that point (between two PUTs, or between the last PUT and
the commit); with ``--no-pause`` it goes straight on (two shippers racing). It prints ``done`` at the end.
"""

from __future__ import annotations

import json
import sys

from pylog.storage.filenames import list_segment_bases
from pylog.storage.remote import ObjectStore, RemoteLog


def main(argv: list[str]) -> int:
    settings, directory, topic, partition = json.loads(argv[0]), argv[1], argv[2], int(argv[3])
    wait = "--no-pause" not in argv[4:]

    def pause(event: str, name: str) -> None:
        print(event, name, flush=True)
        if wait:
            sys.stdin.readline()

    remote = RemoteLog(ObjectStore.from_settings(settings), topic, partition, on_event=pause)
    for base in list_segment_bases(directory)[:-1]:
        remote.ship_segment(directory, base)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
