"""The object store behind tiered storage: an S3 API reached through boto3, with every failure a PylogError.

:class:`ObjectStore` is the only module of pylog that talks to the S3 API. It offers the handful of
requests tiered storage needs, each with the semantics it relies on:

- :meth:`ObjectStore.put_new`: create an object only if its key is free (``If-None-Match: *``);
  :meth:`ObjectStore.put_replacing`: replace one only if it is still the version read (``If-Match: <ETag>``).
  S3 (since 2024), MinIO, Ceph RGW, R2 and moto's server enforce both; a lost race is
  :class:`~pylog.errors.RemoteConflictError`, never a silent overwrite.
- :meth:`ObjectStore.get` with a byte range, and :meth:`ObjectStore.download` of a whole object to a file
  in bounded chunks (never a whole segment in memory).
- :meth:`ObjectStore.list` (keys under a prefix), :meth:`ObjectStore.folders` (one level down),
  :meth:`ObjectStore.head`
  and :meth:`ObjectStore.delete`.

Invariants:
- Every error of the client (an answer with an error code, a timeout, a refused connection, missing
  credentials, boto3 not installed) leaves here as a :class:`~pylog.errors.RemoteStorageError` subclass
  naming the object: a 412 or 409 on a conditional write is :class:`~pylog.errors.RemoteConflictError`,
  a missing key :class:`~pylog.errors.RemoteObjectMissingError`.
- Time is bounded: each attempt gives up after ``remote.storage.request.timeout.ms`` to connect and per
  read of the answer, and a request makes at most ``remote.storage.max.attempts`` attempts (botocore's
  "standard" retry mode: throttling, 5xx, timeouts and dropped connections, with jittered exponential
  back-off). A conditional write is retried by botocore only on errors where it did not take effect or
  where repeating it is harmless (a 412 after a retried success is resolved by the caller, which compares
  what is there: see :mod:`pylog.storage.remote.remote_log`).
- Memory is bounded: :meth:`get` refuses ranges over ``max_bytes`` and reads at most the length asked;
  :meth:`download` streams in 1 MiB pieces.
- A body is read once to send it: the client does not hash it (``UNSIGNED-PAYLOAD`` unless
  ``remote.storage.payload.signing.enabled``) nor recompute the CRC-32C the caller passes, which goes in
  ``x-amz-checksum-crc32c`` for the server to check.

Why boto3: it is the reference S3 client (AWS maintains it), it has ranged GETs, ``IfNoneMatch`` /
``IfMatch`` on PutObject (botocore 1.35.59+), the standard credential and endpoint chain (AWS_ENDPOINT_URL,
profiles), retry modes and timeouts, and it streams file bodies. obstore (Rust, faster for many parallel
small GETs) and s3fs (aiobotocore underneath) were the alternatives; docs/ARCHITECTURE.md ("Tiered storage")
compares them. boto3 is an optional dependency (the ``s3`` extra), imported on first use.

Thread safety: a boto3 client is thread-safe; one :class:`ObjectStore` may serve many threads.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator, Mapping, Protocol

from ...config import REMOTE_STORAGE_SETTINGS, validate
from ...errors import (InvalidConfigError, RemoteConflictError, RemoteDataCorruptError, RemoteObjectMissingError,
                       RemoteStorageError)
from ..records.format import crc32c

__all__ = ["ObjectStore", "RemoteStorageConfig", "ObjectInfo", "Sink", "parse_location", "DOWNLOAD_CHUNK"]

#: Bytes read from an answer at a time when an object is streamed into a file.
DOWNLOAD_CHUNK = 1 << 20
#: Keys one DeleteObjects request may name (the S3 API's limit).
_DELETE_BATCH = 1000
#: Error codes that mean "a conditional write lost" (412; 409 when two conditional writes of one key race).
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def parse_location(location: str) -> tuple[str, str]:
    """``("bucket", "prefix")`` of ``s3://bucket/prefix`` (the prefix without leading or trailing ``/``;
    empty when the location is the bucket itself).

    :raises InvalidConfigError: for any other form.
    """
    if not isinstance(location, str) or not location.startswith("s3://"):
        raise InvalidConfigError(f"remote.storage.location: expected s3://bucket/prefix, got {location!r:.100}")
    bucket, _, prefix = location[5:].partition("/")
    prefix = prefix.strip("/")
    if not bucket or "//" in prefix or any(part in (".", "..") for part in prefix.split("/")):
        raise InvalidConfigError(f"remote.storage.location: expected s3://bucket/prefix, got {location!r:.100}")
    return bucket, prefix


@dataclass(frozen=True)
class RemoteStorageConfig:
    """The validated settings of ``REMOTE_STORAGE_SETTINGS`` (docs/CONFIGURATION.md, "Remote storage
    settings")."""

    bucket: str
    prefix: str
    endpoint_url: str
    region: str
    profile: str
    request_timeout_ms: int
    max_attempts: int
    read_chunk_bytes: int
    read_cache_bytes: int
    payload_signing: bool

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "RemoteStorageConfig":
        """:raises InvalidConfigError: on an unknown name, a bad value or a missing location."""
        values = {k: s.default for k, s in REMOTE_STORAGE_SETTINGS.items()}
        values.update(validate(settings, REMOTE_STORAGE_SETTINGS))
        bucket, prefix = parse_location(values["remote.storage.location"])
        return cls(bucket, prefix, values["remote.storage.endpoint.url"], values["remote.storage.region"],
                   values["remote.storage.profile"], values["remote.storage.request.timeout.ms"],
                   values["remote.storage.max.attempts"], values["remote.storage.read.chunk.bytes"],
                   values["remote.storage.read.cache.bytes"], values["remote.storage.payload.signing.enabled"])

    @property
    def location(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD or a listing says about one object."""

    #: The object's name relative to the location (what :meth:`ObjectStore.key` turns into its key).
    key: str
    size: int
    etag: str
    #: User metadata (``x-amz-meta-*``), lower-case names; empty from a listing.
    metadata: Mapping[str, str]


class Sink(Protocol):
    """Where :meth:`ObjectStore.download` writes (a binary file, or anything with ``write``)."""

    def write(self, data: bytes, /) -> object: ...


def _boto() -> tuple[Any, Any, Any]:
    try:
        import boto3  # noqa: PLC0415 - optional dependency, imported on first use (not to dodge a cycle)
        import botocore.config  # noqa: PLC0415
        import botocore.exceptions  # noqa: PLC0415
    except ImportError as exc:
        raise RemoteStorageError(f"tiered storage needs boto3: pip install 'pylog-embedded[s3]' ({exc})") from None
    return boto3, botocore.config, botocore.exceptions


class ObjectStore:
    """One bucket (and key prefix) of an S3-compatible object store.

    :param config: the bucket and how to reach it (:meth:`RemoteStorageConfig.from_settings`).
    :raises RemoteStorageError: when boto3 is missing or the client cannot be made (a bad profile).
    """

    def __init__(self, config: RemoteStorageConfig) -> None:
        boto3, bconfig, exceptions = _boto()
        self._exc: Any = exceptions
        self.config = config
        self.bucket = config.bucket
        timeout = config.request_timeout_ms / 1000
        # payload_signing_enabled=False: botocore then sends UNSIGNED-PAYLOAD instead of hashing every body with
        # SHA-256 (which it does on plain http unless told; over https it already does not). The body's
        # integrity rests on the CRC-32C header _put sends, which the server checks (docs/CONFIGURATION.md).
        client_config = bconfig.Config(connect_timeout=timeout, read_timeout=timeout,
                                       retries={"total_max_attempts": config.max_attempts, "mode": "standard"},
                                       s3={"payload_signing_enabled": config.payload_signing})
        try:
            session = boto3.session.Session(profile_name=config.profile or None, region_name=config.region or None)
            self._client = session.client("s3", endpoint_url=config.endpoint_url or None, config=client_config)
        except self._exc.BotoCoreError as exc:
            raise RemoteStorageError(f"cannot make an S3 client for {config.location}: {exc}") from None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "ObjectStore":
        return cls(RemoteStorageConfig.from_settings(settings))

    def key(self, name: str) -> str:
        """The object key of ``name`` under the location's prefix."""
        return f"{self.config.prefix}/{name}" if self.config.prefix else name

    def url(self, name: str) -> str:
        """``s3://bucket/key`` of ``name``, for messages."""
        return f"s3://{self.bucket}/{self.key(name)}"

    # ------------------------------------------------------------------------------------------- errors

    def _fail(self, exc: BaseException, doing: str, name: str) -> RemoteStorageError:
        """``exc`` of the client as the PylogError the module docstring promises."""
        code = None
        if isinstance(exc, self._exc.ClientError):
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = str(error.get("Code") or status)
            message = f"{doing} failed: {code} {error.get('Message', '')}".rstrip()
            if code in _CONFLICT_CODES or status in (409, 412):
                return RemoteConflictError(message, self.url(name), code)
            if code in _MISSING_CODES:
                return RemoteObjectMissingError(message, self.url(name), code)
            return RemoteStorageError(message, self.url(name), code)
        return RemoteStorageError(f"{doing} failed: {type(exc).__name__}: {exc}"[:500], self.url(name), code)

    def _errors(self) -> tuple[type[Exception], ...]:
        # A body stream can also fail with a plain OSError (connection reset while reading).
        return (self._exc.BotoCoreError, self._exc.ClientError, OSError)

    # --------------------------------------------------------------------------------------------- writes

    def put_new(self, name: str, body: bytes | BinaryIO, size: int, metadata: Mapping[str, str] | None = None,
                crc32c: int | None = None) -> str:
        """Create object ``name`` only if no object has that key. Returns its ETag.

        ``body`` is bytes or a seekable binary file positioned at the start (streamed; botocore seeks back
        to retry). ``crc32c``, when given, is sent as the object's ``x-amz-checksum-crc32c`` so that a
        store which checks checksums refuses a body damaged in transit.

        :raises RemoteConflictError: when the key is taken. :raises RemoteStorageError: on any other failure.
        """
        return self._put(name, body, size, metadata, crc32c, {"IfNoneMatch": "*"})

    def put_replacing(self, name: str, body: bytes, etag: str | None) -> str:
        """Replace object ``name`` only if its ETag is still ``etag`` (create it only if absent when ``etag``
        is None). Returns the new ETag.

        :raises RemoteConflictError: when another write came first.
        """
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        return self._put(name, body, len(body), None, None, condition)

    def _put(self, name: str, body: bytes | BinaryIO, size: int, metadata: Mapping[str, str] | None,
             crc32c: int | None, condition: dict[str, str]) -> str:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key(name), "Body": body, "ContentLength": size,
                                **condition}
        if metadata:
            args["Metadata"] = dict(metadata)
        if crc32c is not None:
            args["ChecksumCRC32C"] = base64.b64encode(crc32c.to_bytes(4, "big")).decode()
        try:
            return str(self._client.put_object(**args)["ETag"])
        except self._errors() as exc:
            raise self._fail(exc, "PUT", name) from None

    def delete(self, names: list[str]) -> None:
        """Delete objects ``names`` (absent ones count as deleted).

        :raises RemoteStorageError: when the store refuses any of them.
        """
        for i in range(0, len(names), _DELETE_BATCH):
            chunk = names[i:i + _DELETE_BATCH]
            try:
                answer = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": self.key(n)} for n in chunk], "Quiet": True})
            except self._errors() as exc:
                raise self._fail(exc, "DeleteObjects", chunk[0]) from None
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise RemoteStorageError(f"DeleteObjects refused {len(errors)} keys: {first.get('Code')} "
                                         f"{first.get('Message', '')}", f"s3://{self.bucket}/{first.get('Key')}",
                                         first.get("Code"))

    # ---------------------------------------------------------------------------------------------- reads

    def head(self, name: str) -> ObjectInfo | None:
        """What the store says about ``name``, or None when there is no such object."""
        try:
            answer = self._client.head_object(Bucket=self.bucket, Key=self.key(name))
        except self._errors() as exc:
            err = self._fail(exc, "HEAD", name)
            if isinstance(err, RemoteObjectMissingError):
                return None
            raise err from None
        return ObjectInfo(name, int(answer["ContentLength"]), str(answer["ETag"]),
                          {k.lower(): v for k, v in (answer.get("Metadata") or {}).items()})

    def get(self, name: str, start: int = 0, length: int | None = None, max_bytes: int = 64 << 20
            ) -> tuple[bytes, str]:
        """``(bytes, ETag)`` of object ``name``: ``length`` bytes from ``start`` (to the end when None, then
        at most ``max_bytes``). Fewer bytes come back only where the object ends.

        :raises RemoteObjectMissingError: when there is no such object. :raises RemoteStorageError: when
            the object is larger than ``max_bytes`` (whole reads) or the request fails.
        """
        if length is not None and length > max_bytes:
            raise RemoteStorageError(f"a read of {length} bytes is over the bound of {max_bytes}", self.url(name))
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key(name)}
        if start or length is not None:
            if length is not None and length <= 0:
                return b"", ""
            args["Range"] = f"bytes={start}-" + (str(start + length - 1) if length is not None else "")
        try:
            answer = self._client.get_object(**args)
            size = int(answer["ContentLength"])
            if size > (length if length is not None else max_bytes):
                answer["Body"].close()
                raise RemoteStorageError(f"GET answered {size} bytes, more than the {length or max_bytes} asked",
                                         self.url(name))
            data = answer["Body"].read(size + 1)
        except self._errors() as exc:
            err = self._fail(exc, "GET", name)
            if err.code == "InvalidRange":  # a range starting at or past the end: nothing there
                return b"", ""
            raise err from None
        if len(data) != size:
            raise RemoteStorageError(f"GET answered {len(data)} bytes where it announced {size}", self.url(name))
        return data, str(answer["ETag"])

    def download(self, name: str, out: Sink, expected_size: int) -> int:
        """Stream object ``name`` into ``out`` in :data:`DOWNLOAD_CHUNK` pieces. Returns the CRC-32C of the
        bytes written (the caller compares it with the manifest's).

        :raises RemoteDataCorruptError: when the object is not ``expected_size`` bytes long.
        """
        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=self.key(name))
            size = int(answer["ContentLength"])
            if size != expected_size:
                answer["Body"].close()
                raise RemoteDataCorruptError(f"object has {size} bytes, the manifest says {expected_size}",
                                             self.url(name), 0)
            crc, done, body = 0, 0, answer["Body"]
            while done < size:
                piece = body.read(min(DOWNLOAD_CHUNK, size - done))
                if not piece:
                    break
                out.write(piece)
                crc = crc32c(piece, crc)
                done += len(piece)
        except self._errors() as exc:
            raise self._fail(exc, "GET", name) from None
        if done != size:
            raise RemoteStorageError(f"GET ended after {done} of {size} bytes", self.url(name))
        return crc

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """The objects whose names start with ``prefix``, in key order (names relative to the location)."""
        base = len(self.key(""))
        for page in self._pages(prefix, {}):
            for entry in page.get("Contents") or []:
                yield ObjectInfo(entry["Key"][base:], int(entry["Size"]), str(entry.get("ETag", "")), {})

    def folders(self, prefix: str) -> Iterator[str]:
        """The names of the "folders" directly under ``prefix`` (``""`` or ending in ``/``), relative to it."""
        start = len(self.key(prefix))
        for page in self._pages(prefix, {"Delimiter": "/"}):
            for entry in page.get("CommonPrefixes") or []:
                yield entry["Prefix"][start:].rstrip("/")

    def _pages(self, prefix: str, extra: dict[str, str]) -> Iterator[dict]:
        try:
            yield from self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.key(prefix), **extra)
        except self._errors() as exc:
            raise self._fail(exc, "LIST", prefix) from None

