"""A store with tiered storage that writes, then runs one upload pass, stopping for the parent at one point
(tests/test_tiered_storage.py, which SIGKILLs it there).

    python tests/tiered_upload_child.py SETTINGS_JSON STORE_DIR TOPIC STOP_AT

STOP_AT is ``put`` (the first segment's log object PUT, its manifest not committed) or ``committed`` (the
first manifest commit, before local retention could delete anything). At that point it prints
``<event> <object name>`` and waits for a line on stdin (the parent kills it instead).
"""

from __future__ import annotations

import json
import sys

import pylog


def main(argv: list[str]) -> int:
    settings, root, topic, stop_at = json.loads(argv[0]), argv[1], argv[2], argv[3]
    opts = {k.replace(".", "_"): v for k, v in settings.items()}
    with pylog.open(root, log_cleaner_enable=False, remote_log_manager_task_interval_ms=10 ** 9, **opts) as store:
        store.create_topic(topic, config={"remote.storage.enable": True, "segment.bytes": 2048,
                                          "index.interval.bytes": 256, "retention.ms": -1,
                                          "local.retention.bytes": 0})
        part = store.topic(topic).partition(0)
        for i in range(80):
            part.append_values([f"r{i}-{j}".encode() * (1 + j) for j in range(5)])
        part.flush()

        def pause(event: str, name: str) -> None:
            if event == stop_at:
                print(event, name, flush=True)
                sys.stdin.readline()

        store.remote_log(topic, 0).on_event = pause
        store.upload_to_remote()
        part.enforce_retention()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
