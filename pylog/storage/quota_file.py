"""The client quota file of a store (``<store>/__quotas``): the changes AlterClientQuotas made to ``pylog
serve``'s client quotas (see :mod:`pylog.server.quotas` and docs/SERVER.md, "Quotas"), applied over the server's
``quotas`` setting each time it starts.

Layout (docs/FORMAT.md, "Client quota file"): magic ``PLQU``, version byte ``1``, a msgpack document
``{"quotas": [[user, client_id, {quota_name: value or nil}], ...]}`` (user and client id a name, ``<default>``
or nil for a part the entity leaves out; a nil value records a removed quota), then the CRC-32C of everything
before it.

Invariants:
- The file is only ever replaced whole with :func:`pylog.storage.fileio.write_checked` (temporary file, fsync,
  rename, fsync of the directory): a crash leaves the old or the new changes, never a mix.
- A file that fails any check (magic, version, CRC, msgpack, the type and range of every field) raises
  :class:`~pylog.errors.CorruptRecordError`; it is never read as fewer changes.
- At most :data:`MAX_ENTITIES` entities and :data:`MAX_FILE_BYTES` bytes are read or written.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ..errors import CorruptRecordError, InvalidArgumentError
from .fileio import decode_doc, encode_doc, read_checked, write_checked
from .filenames import QUOTAS_FILE

__all__ = ["QuotaChanges", "read_quota_changes", "write_quota_changes", "MAX_ENTITIES", "MAX_FILE_BYTES"]

MAGIC = b"PLQU"
VERSION = 1
#: The most entities whose quotas a store keeps changes of.
MAX_ENTITIES = 100_000
#: The largest quota file read: MAX_ENTITIES entities of the longest names fit.
MAX_FILE_BYTES = 64 << 20
#: The longest user name or client id kept, and the quota names' (Kafka's are at most 18 characters).
MAX_TEXT = 1000
MAX_NAME = 64

#: (user, client id) -> {quota name: value, or None for a removed quota}.
QuotaChanges = dict[tuple[str | None, str | None], dict[str, float | None]]


def _problem(e: Any) -> str | None:
    """What is wrong with ``e`` as a stored entity's changes ([user, client id, {name: value or None}]), or None."""
    if not isinstance(e, (list, tuple)) or len(e) != 3:
        return "an entry is not 3 fields"
    user, client, quotas = e
    for part in (user, client):
        if part is not None and (not isinstance(part, str) or not part or len(part) > MAX_TEXT):
            return f"a user or client id is not nil or a non-empty str of at most {MAX_TEXT} characters"
    if user is None and client is None:
        return "an entity names neither a user nor a client id"
    if not isinstance(quotas, dict) or not quotas:
        return "an entity's quotas are not a non-empty map"
    for name, value in quotas.items():
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            return f"a quota name is not a non-empty str of at most {MAX_NAME} characters"
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            return f"quota {name!r}: {value!r} is not nil or a positive number"
    return None


def read_quota_changes(store_path: str) -> QuotaChanges:
    """The store's quota changes; {} when the store has no quota file.

    :raises CorruptRecordError: when the file fails a check (see the module docstring)."""
    path = os.path.join(store_path, QUOTAS_FILE)
    body = read_checked(path, MAX_FILE_BYTES + 1, "client quota file")
    if body is None:
        return {}
    doc = decode_doc(MAGIC, VERSION, body, path, "client quota file")
    entries = doc.get("quotas") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or len(entries) > MAX_ENTITIES:
        raise CorruptRecordError(f"client quota file: 'quotas' is not a list of at most {MAX_ENTITIES} entries",
                                 path, 5)
    out: QuotaChanges = {}
    for e in entries:
        problem = _problem(e)
        if problem is not None:
            raise CorruptRecordError(f"client quota file: {problem}", path, 5)
        out[(e[0], e[1])] = {k: None if v is None else float(v) for k, v in e[2].items()}
    return out


def write_quota_changes(store_path: str, changes: QuotaChanges) -> None:
    """Replace the store's quota file with ``changes`` (crash-safely, durably; see the module docstring).

    :raises InvalidArgumentError: for an entity :func:`_problem` refuses, or more than MAX_ENTITIES."""
    if len(changes) > MAX_ENTITIES:
        raise InvalidArgumentError(f"changes of at most {MAX_ENTITIES} quota entities are kept, got {len(changes)}")
    entries = [[user, client, dict(quotas)] for (user, client), quotas in changes.items()]
    for e in entries:
        problem = _problem(e)
        if problem is not None:
            raise InvalidArgumentError(f"client quota entry {e!r}: {problem}")
    write_checked(os.path.join(store_path, QUOTAS_FILE), encode_doc(MAGIC, VERSION, {"quotas": entries}))
