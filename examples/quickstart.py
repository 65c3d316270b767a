"""Quickstart: create a topic, append records, read them back by offset, by time and as columns.

Run:  python examples/quickstart.py [STORE_DIR]     (default ./pylog-data)
"""

from __future__ import annotations

import sys
import time

import pylog


def main(path: str = "./pylog-data") -> int:
    with pylog.open(path) as store:
        if "events" not in store:
            store.create_topic("events", partitions=3, config={"segment.bytes": 1 << 20})
        p = store.topic("events").partition(0)

        t0 = int(time.time() * 1000)
        first = p.append([pylog.Record(value=b"hello", key=b"user-1", headers=[("source", b"quickstart")],
                                       timestamp=t0)])
        p.append_values([f"event {i}".encode() for i in range(1000)],
                        keys=[f"user-{i % 10}".encode() for i in range(1000)])
        p.flush()  # fsync: survives a crash from here on

        print(f"store {store.path}: topics {store.topics()}")
        print(f"partition 0 holds offsets [{p.log_start_offset}, {p.log_end_offset})")
        for rec in p.read(first, max_records=3):
            print(f"  offset {rec.offset} key={rec.key!r} value={rec.value!r} headers={rec.headers}")
        print(f"first offset at or after {t0}: {p.offset_for_timestamp(t0)}")
        cols = p.read_columns(first, max_records=100_000)
        print(f"read {len(cols)} records as columns: {cols.value_lengths.sum()} value bytes, "
              f"offsets {cols.offsets[0]}..{cols.offsets[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
