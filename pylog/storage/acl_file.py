"""The ACL file of a store (``<store>/__acls``): the access-control entries ``pylog serve``'s authorizer
enforces (see :mod:`pylog.server.authorizer` and docs/SERVER.md, "Authorization").

Layout (docs/FORMAT.md, "ACL file"): magic ``PLAC``, version byte ``1``, a msgpack document
``{"acls": [[resource_type, resource_name, pattern_type, principal, host, operation, permission], ...]}``
(Kafka's numeric codes for the enums), then the CRC-32C of everything before it.

Invariants:
- The file is only ever replaced whole with :func:`pylog.storage.fileio.write_checked` (temporary file, fsync,
  rename, fsync of the directory): a crash leaves the old or the new list, never a mix.
- A file that fails any check (magic, version, CRC, msgpack, the type and range of every field) raises
  :class:`~pylog.errors.CorruptRecordError`: a damaged ACL list is never taken for a shorter one (which could
  grant what a lost DENY entry refused).
- At most :data:`MAX_ACLS` entries and :data:`MAX_FILE_BYTES` bytes are read or written.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from ..errors import CorruptRecordError, InvalidArgumentError
from .fileio import decode_doc, encode_doc, read_checked, write_checked
from .filenames import ACLS_FILE

__all__ = ["AclEntry", "read_acls", "write_acls", "check_entry", "MAX_ACLS", "MAX_FILE_BYTES"]

MAGIC = b"PLAC"
VERSION = 1
#: The most entries a store keeps (each is at most a few hundred bytes).
MAX_ACLS = 100_000
#: The largest ACL file read: MAX_ACLS entries of the longest names fit.
MAX_FILE_BYTES = 64 << 20
#: The longest resource name, principal or host kept (bytes of UTF-8 are bounded by 4x this).
MAX_TEXT = 1000
#: Kafka's codes that may be stored: resource types TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5; pattern
#: types LITERAL 3, PREFIXED 4; operations ALL 2 .. IDEMPOTENT_WRITE 12; permissions DENY 2, ALLOW 3.
RESOURCE_TYPES = frozenset((2, 3, 4, 5))
PATTERN_TYPES = frozenset((3, 4))
OPERATIONS = frozenset(range(2, 13))
PERMISSIONS = frozenset((2, 3))


class AclEntry(NamedTuple):
    """One access-control entry, in Kafka's codes (see :mod:`pylog.server.authorizer` for their names)."""
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


def check_entry(e: Any) -> str | None:
    """What is wrong with ``e`` as a stored entry (a 7-sequence of the fields of :class:`AclEntry`), or None."""
    if not isinstance(e, (list, tuple)) or len(e) != 7:
        return "an entry is not 7 fields"
    rtype, name, ptype, principal, host, op, perm = e
    for text in (name, principal, host):
        if not isinstance(text, str) or not text or len(text) > MAX_TEXT:
            return f"a name, principal or host is not a non-empty str of at most {MAX_TEXT} characters"
    if not principal.startswith("User:"):
        return f"principal {principal!r} is not User:<name>"
    for value, allowed, what in ((rtype, RESOURCE_TYPES, "resource type"), (ptype, PATTERN_TYPES, "pattern type"),
                                 (op, OPERATIONS, "operation"), (perm, PERMISSIONS, "permission")):
        if type(value) is not int or value not in allowed:
            return f"{what} {value!r} is not one of {sorted(allowed)}"
    return None


def read_acls(store_path: str) -> list[AclEntry]:
    """The store's entries, in the order written; [] when the store has no ACL file.

    :raises CorruptRecordError: when the file fails a check (see the module docstring)."""
    path = os.path.join(store_path, ACLS_FILE)
    body = read_checked(path, MAX_FILE_BYTES + 1, "ACL file")
    if body is None:
        return []
    doc = decode_doc(MAGIC, VERSION, body, path, "ACL file")
    entries = doc.get("acls") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or len(entries) > MAX_ACLS:
        raise CorruptRecordError(f"ACL file: 'acls' is not a list of at most {MAX_ACLS} entries", path, 5)
    out = []
    for e in entries:
        problem = check_entry(e)
        if problem is not None:
            raise CorruptRecordError(f"ACL file: {problem}", path, 5)
        out.append(AclEntry(*e))
    return out


def write_acls(store_path: str, entries: list[AclEntry]) -> None:
    """Replace the store's ACL file with ``entries`` (crash-safely, durably; see the module docstring).

    :raises InvalidArgumentError: for an entry that :func:`check_entry` refuses, or more than MAX_ACLS."""
    if len(entries) > MAX_ACLS:
        raise InvalidArgumentError(f"at most {MAX_ACLS} ACLs are kept, got {len(entries)}")
    for e in entries:
        problem = check_entry(e)
        if problem is not None:
            raise InvalidArgumentError(f"ACL entry {e!r}: {problem}")
    body = encode_doc(MAGIC, VERSION, {"acls": [list(e) for e in entries]})
    write_checked(os.path.join(store_path, ACLS_FILE), body)
