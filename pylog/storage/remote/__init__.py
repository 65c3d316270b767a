"""Tiered storage (issue 28): closed segments shipped to S3-compatible object storage, read back
from it, deleted by remote retention, and a store restored from it.

A helper package below the storage core: it works on a partition's files and the bucket, never on the
core's objects, so the core (the partition's read path, the maintenance layer's upload pass) can call it
without a cycle. docs/ARCHITECTURE.md ("Tiered storage") says how it hooks into the segment lifecycle (the
upload thread: :mod:`pylog.maintenance.remote_upload`).

- :mod:`.objects`: ObjectStore, the S3 API through boto3 (conditional writes, ranged GETs), every failure
  a :class:`~pylog.errors.RemoteStorageError` subclass, bounded time and memory.
- :mod:`.layout`: object names. :mod:`.manifest`: the per-partition remote manifest (PLRM).
- :mod:`.index_file`: sealed index files as bytes (checks before shipping, lookups for remote reads).
- :mod:`.remote_log`: RemoteLog, one partition's facade: the manifest and its commits, ship, read,
  retention, check, restore; its parts :mod:`.local_segment` (a closed segment read and checked for
  shipping), :mod:`.reading` (remote reads) and :mod:`.download` (a partition restored).
- :mod:`.chunks`: ChunkCache, the bounded cache of fetched pieces of shipped logs that remote reads use.
- :mod:`.group_offsets`: the groups' committed offsets as one object (PLGO).
- :mod:`.restore`: the store marker, topic files and group offsets, and a whole store restored from a
  location (or stubbed for a read-only attach: :func:`pylog.attach`).
"""

from .chunks import ChunkCache
from .manifest import Manifest, RemoteSegment
from .objects import ObjectStore, RemoteStorageConfig, parse_location
from .remote_log import RemoteBatches, RemoteLog, RemoteRetention
from .restore import RestoredStore, restore_store, ship_store_metadata

__all__ = ["ChunkCache", "ObjectStore", "RemoteStorageConfig", "parse_location", "Manifest", "RemoteSegment",
           "RemoteLog", "RemoteBatches", "RemoteRetention", "RestoredStore", "restore_store", "ship_store_metadata"]
