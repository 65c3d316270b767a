"""SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and TLS for ``pylog serve``.

The server side of Kafka's SASL exchange, without I/O: the connection code hands each client token to a
:class:`SaslSession` and sends back what it returns. One :class:`SaslServer` per connection, over one
:class:`Credentials` shared by all connections.

Credentials file
----------------
A JSON object with one required key, ``"users"``, mapping each user name to either a password or an object::

    {
      "users": {
        "alice": "alice-secret",
        "bob":   {"password": "bob-secret", "iterations": 8192},
        "carol": {"SCRAM-SHA-256": {"salt": "<base64>", "iterations": 4096,
                                    "stored_key": "<base64>", "server_key": "<base64>"},
                  "SCRAM-SHA-512": {"salt": "...", "iterations": 4096, "stored_key": "...", "server_key": "..."}}
      },
      "iterations": 4096
    }

- A password (a string, or ``{"password": ...}``) serves PLAIN and both SCRAM mechanisms: the SCRAM secrets are
  derived when the file is loaded, with a fresh random 32-byte salt and ``iterations`` PBKDF2 rounds (the
  entry's ``"iterations"``, else the file's top-level ``"iterations"``, else 4096).
- Pre-salted entries (RFC 5802's SaltedPassword reduced to StoredKey and ServerKey, as Kafka keeps them; make
  them with :func:`scram_entry`) keep passwords out of the file. Such a user can use the SCRAM mechanisms it has
  an entry for, and PLAIN (the password is checked against one of the entries, which costs one PBKDF2 run).
  ``stored_key`` and ``server_key`` are the mechanism's digest size (32 bytes for SHA-256, 64 for SHA-512).
- An entry holds either a password or pre-salted entries, never both. Iterations are 4096..16384 (Kafka's
  bounds for SCRAM). User names are non-empty and hold no NUL (PLAIN could not carry it), nor do passwords.
  Unknown keys, duplicate keys and wrong types are refused with a :class:`~pylog.errors.SecurityConfigError`
  naming the file and the user, never the password.
- Names and passwords are compared as their UTF-8 bytes, as Kafka does (no SASLprep).
- A file readable by every user, or writable by its group or by every user, is loaded with a warning on the
  ``pylog.server`` logger.

In code: ``Credentials({"alice": "secret"})`` takes the ``"users"`` object; ``Credentials.from_json(doc)`` the
whole document; ``Credentials.load(path)`` the file.

The exchange (what the connection code does)
-------------------------------------------
- A connection with SASL enabled answers only ApiVersions (18), SaslHandshake (17) and SaslAuthenticate (36)
  until :attr:`SaslServer.authenticated` (:meth:`SaslServer.allows` says so per api key).
- SaslHandshake: :meth:`SaslServer.start` with the requested mechanism returns the session; it raises
  :class:`~pylog.errors.UnsupportedSaslMechanismError` (error code 33) for a mechanism not enabled, and
  :class:`~pylog.errors.IllegalSaslStateError` (34) for a second handshake. The response lists
  :attr:`SaslServer.mechanisms` either way.
- Each token (a SaslAuthenticate request's ``auth_bytes``, or after a v0 handshake a raw size-prefixed frame)
  goes to :meth:`SaslSession.step`, which returns ``(challenge, done)``: send ``challenge`` back (in
  ``auth_bytes``, or as a raw frame; an empty one too: PLAIN answers ``b""`` and clients wait for it). When
  ``done``, :attr:`SaslSession.principal` is the user's name. A failure raises
  :class:`~pylog.errors.AuthenticationError` (error code 58, :func:`error_code` maps each class), whose message
  is safe to send to the client; the session is then dead, and Kafka closes the connection after the response.

SCRAM follows RFC 5802 and RFC 7677 as Kafka does: the GS2 header is ``n,,`` (or ``n,a=<the same user>,``),
channel binding is refused, the ``tokenauth`` extension (delegation tokens) is refused and other extensions are
ignored. The client-final message's nonce must end with the exchange's nonce, as Kafka 3.8.1 to 3.9 check it
(librdkafka before 2.6.1 repeats its client nonce in front of it; Kafka 4 refuses that).

An unknown user gets a server-first message shaped like a known user's (the iteration count and salt size most
users of the mechanism have; the file's ``"iterations"`` and 32 bytes when none has it) with a salt derived from
a server secret and the name (the same for each attempt; across restarts too when every user is pre-salted,
since the secret then derives from their ServerKeys; else it is drawn at start-up, as password users' salts
are) and fails at the proof, with the message a wrong password gets.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import ssl
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pylog.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    SecurityConfigError,
    UnsupportedSaslMechanismError,
)

__all__ = [
    "MECHANISMS",
    "MAX_TOKEN_BYTES",
    "PRE_AUTH_API_KEYS",
    "Credentials",
    "ScramSecret",
    "SaslServer",
    "SaslSession",
    "error_code",
    "scram_entry",
    "make_server_ssl_context",
    "plain_exposed_addresses",
]

log = logging.getLogger("pylog.server")

#: Every mechanism this module implements, in the order a server offers them by default.
MECHANISMS: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# mechanism -> hashlib name; the digest size is the length of StoredKey, ServerKey and the client proof.
_SCRAM_HASHES: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's bounds for a SCRAM iteration count.
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 32
#: The largest SASL token a session takes; a larger one fails the authentication (the connection code should
#: also refuse a raw v0 frame above it before reading it whole).
MAX_TOKEN_BYTES = 64 * 1024

#: ApiVersions, SaslHandshake, SaslAuthenticate: what a SASL connection may send before it is authenticated.
PRE_AUTH_API_KEYS: frozenset[int] = frozenset({18, 17, 36})

_ERROR_CODES: tuple[tuple[type[AuthenticationError], int], ...] = (
    (UnsupportedSaslMechanismError, 33),  # UNSUPPORTED_SASL_MECHANISM
    (IllegalSaslStateError, 34),  # ILLEGAL_SASL_STATE
    (AuthenticationError, 58),  # SASL_AUTHENTICATION_FAILED
)


def error_code(exc: AuthenticationError) -> int:
    """The Kafka error code for a SASL failure: 33 (unsupported mechanism), 34 (illegal state), else 58."""
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return 58


# --------------------------------------------------------------------------------------------- SCRAM math

def _hmac(hashname: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashname).digest()


def _digest_size(mechanism: str) -> int:
    return hashlib.new(_SCRAM_HASHES[mechanism]).digest_size


@dataclass(frozen=True)
class ScramSecret:
    """What the server keeps for one user and one SCRAM mechanism (RFC 5802 section 3), never the password.

    Invariants: ``mechanism`` is SCRAM-SHA-256 or SCRAM-SHA-512, ``salt`` is non-empty, ``stored_key`` and
    ``server_key`` are the mechanism's digest size.
    """

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(cls, mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
               salt: bytes | None = None) -> ScramSecret:
        """The secret for ``password`` (a fresh random salt unless ``salt`` is given)."""
        hashname = _SCRAM_HASHES[mechanism]
        salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
        salted = hashlib.pbkdf2_hmac(hashname, password.encode("utf-8"), salt, iterations)
        client_key = _hmac(hashname, salted, b"Client Key")
        return cls(mechanism, salt, iterations, hashlib.new(hashname, client_key).digest(),
                   _hmac(hashname, salted, b"Server Key"))

    def check_password(self, password: str) -> bool:
        """Whether ``password`` is the one this secret was derived from (one PBKDF2 run; constant-time compare)."""
        other = ScramSecret.derive(self.mechanism, password, iterations=self.iterations, salt=self.salt)
        return hmac.compare_digest(other.stored_key, self.stored_key)

    def to_json(self) -> dict[str, Any]:
        """The credentials file's pre-salted entry for this secret."""
        b64 = base64.b64encode
        return {"salt": b64(self.salt).decode(), "iterations": self.iterations,
                "stored_key": b64(self.stored_key).decode(), "server_key": b64(self.server_key).decode()}


def scram_entry(password: str, mechanisms: Iterable[str] = ("SCRAM-SHA-256", "SCRAM-SHA-512"), *,
                iterations: int = DEFAULT_ITERATIONS) -> dict[str, Any]:
    """A credentials file's user entry holding pre-salted SCRAM secrets for ``password`` (fresh random salts),
    so the file need not hold the password: ``{"users": {"alice": scram_entry("secret")}}``."""
    _check_iterations(iterations, "scram_entry")
    out: dict[str, Any] = {}
    for mechanism in mechanisms:
        if mechanism not in _SCRAM_HASHES:
            raise SecurityConfigError(f"scram_entry: {mechanism!r} is not a SCRAM mechanism "
                                      f"(use {', '.join(_SCRAM_HASHES)})")
        out[mechanism] = ScramSecret.derive(mechanism, password, iterations=iterations).to_json()
    return out


# ------------------------------------------------------------------------------------------- credentials

def _check_iterations(value: Any, where: str) -> int:
    if type(value) is not int or not MIN_ITERATIONS <= value <= MAX_ITERATIONS:
        raise SecurityConfigError(f"{where}: \"iterations\" must be an integer from {MIN_ITERATIONS} to "
                                  f"{MAX_ITERATIONS} (Kafka's bounds for SCRAM), not {value!r}")
    return value


def _check_text(value: Any, what: str, where: str) -> str:
    # No value is echoed: this checks passwords too.
    if not isinstance(value, str) or not value:
        raise SecurityConfigError(f"{where}: the {what} must be a non-empty string")
    if "\0" in value:
        raise SecurityConfigError(f"{where}: the {what} holds a NUL character (SASL/PLAIN cannot carry it)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SecurityConfigError(f"{where}: the {what} is not valid Unicode (a lone surrogate)") from None
    return value


def _b64_field(entry: Mapping[str, Any], key: str, where: str, size: int | None) -> bytes:
    value = entry[key]
    if not isinstance(value, str):
        raise SecurityConfigError(f"{where}: {key!r} must be a base64 string")
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SecurityConfigError(f"{where}: {key!r} is not valid base64") from None
    if size is None and not raw:
        raise SecurityConfigError(f"{where}: {key!r} is empty")
    if size is not None and len(raw) != size:
        raise SecurityConfigError(f"{where}: {key!r} must decode to {size} bytes, not {len(raw)}")
    return raw


_SECRET_KEYS = frozenset({"salt", "iterations", "stored_key", "server_key"})


def _parse_secret(mechanism: str, entry: Any, where: str) -> ScramSecret:
    where = f"{where}: {mechanism}"
    if not isinstance(entry, Mapping):
        raise SecurityConfigError(f"{where}: must be an object with {', '.join(sorted(_SECRET_KEYS))}")
    keys = set(entry)
    if keys != _SECRET_KEYS:
        missing, extra = sorted(_SECRET_KEYS - keys), sorted(map(str, keys - _SECRET_KEYS))
        raise SecurityConfigError(f"{where}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown key(s) {extra}"] if extra else [])))
    size = _digest_size(mechanism)
    return ScramSecret(mechanism, _b64_field(entry, "salt", where, None), _check_iterations(entry["iterations"], where),
                       _b64_field(entry, "stored_key", where, size), _b64_field(entry, "server_key", where, size))


@dataclass(frozen=True)
class _User:
    # sha256 of the UTF-8 password when the password is known (compared in constant time), else None.
    plain_digest: bytes | None
    scram: Mapping[str, ScramSecret]


def _server_secret(users: Iterable[_User]) -> bytes:
    """The key unknown users' decoy SCRAM secrets derive from (see :meth:`Credentials.decoy_secret`)."""
    users = list(users)
    if not users or any(u.plain_digest is not None for u in users):
        return secrets.token_bytes(32)
    keys = sorted(s.server_key for u in users for s in u.scram.values())
    return hashlib.sha256(b"pylog decoy secret\0" + b"".join(len(k).to_bytes(2, "big") + k for k in keys)).digest()


def _most_common(values: list[tuple[int, int]], default: tuple[int, int]) -> tuple[int, int]:
    """The most frequent value (ties: the largest), or ``default`` when there is none."""
    if not values:
        return default
    return max(set(values), key=lambda v: (values.count(v), v))


class Credentials:
    """The users a server lets in, and what it checks their passwords and SCRAM proofs against.

    ``users`` is the credentials file's ``"users"`` object (see the module docstring): user name -> password or
    entry object. ``iterations`` is the PBKDF2 count for SCRAM secrets derived from passwords. ``source`` names
    where the users came from in error messages. Immutable once built; safe to share between connections.
    """

    def __init__(self, users: Mapping[str, Any], *, iterations: int = DEFAULT_ITERATIONS,
                 source: str = "credentials") -> None:
        if not isinstance(users, Mapping):
            raise SecurityConfigError(f"{source}: \"users\" must be an object mapping user names to passwords")
        iterations = _check_iterations(iterations, source)
        self._users: dict[str, _User] = {}
        for name, entry in users.items():
            where = f"{source}: user {name!r}" if isinstance(name, str) else f"{source}: a user name"
            _check_text(name, "user name", where)
            self._users[name] = self._parse_user(entry, iterations, where)
        # Keys a failed lookup is answered with, so an unknown user costs (and reads) like a known one. The decoy
        # salts derive from this secret: drawn at start-up when some user has a password (whose SCRAM salts are
        # drawn at start-up too), else derived from the pre-salted ServerKeys (secret, as hard to guess as the
        # passwords), so that unknown users' salts stay put across restarts as the pre-salted users' salts do.
        self._secret = _server_secret(self._users.values())
        self._dummy_digest = secrets.token_bytes(32)
        # What an unknown user is shown per mechanism: the iteration count and salt size most users have (the
        # file's "iterations" and 32 bytes when no user has that mechanism).
        self._decoy_shape = {m: _most_common([(s.iterations, len(s.salt)) for u in self._users.values()
                                              for n, s in u.scram.items() if n == m], (iterations, SALT_BYTES))
                             for m in _SCRAM_HASHES}
        # When some user's password is checked with PBKDF2, an unknown user's is too: the time tells nothing.
        self._decoy_mechanism = next((next(iter(u.scram)) for u in self._users.values() if u.plain_digest is None),
                                     None)

    @staticmethod
    def _parse_user(entry: Any, iterations: int, where: str) -> _User:
        if isinstance(entry, str):
            entry = {"password": entry}
        if not isinstance(entry, Mapping):
            raise SecurityConfigError(f"{where}: must be a password string or an object")
        known = {"password", "iterations", *_SCRAM_HASHES}
        unknown = sorted(map(str, set(entry) - known))
        if unknown:
            raise SecurityConfigError(f"{where}: unknown key(s) {unknown} (use password and iterations, or "
                                      f"pre-salted {' / '.join(_SCRAM_HASHES)} entries)")
        salted = [m for m in _SCRAM_HASHES if m in entry]
        if "password" in entry:
            if salted:
                raise SecurityConfigError(f"{where}: give either a password or pre-salted {'/'.join(salted)} "
                                          "entries, not both")
            password = _check_text(entry["password"], "password", where)
            rounds = _check_iterations(entry["iterations"], where) if "iterations" in entry else iterations
            return _User(hashlib.sha256(password.encode("utf-8")).digest(),
                         {m: ScramSecret.derive(m, password, iterations=rounds) for m in _SCRAM_HASHES})
        if "iterations" in entry:
            raise SecurityConfigError(f"{where}: \"iterations\" goes with \"password\" (a pre-salted entry has its "
                                      "own)")
        if not salted:
            raise SecurityConfigError(f"{where}: has no password and no pre-salted SCRAM entry")
        return _User(None, {m: _parse_secret(m, entry[m], where) for m in salted})

    @classmethod
    def from_json(cls, document: Any, *, source: str = "credentials") -> Credentials:
        """Credentials from a parsed credentials file: ``{"users": {...}, "iterations": 4096}``."""
        if not isinstance(document, Mapping):
            raise SecurityConfigError(f"{source}: must be a JSON object with a \"users\" object")
        unknown = sorted(map(str, set(document) - {"users", "iterations"}))
        if unknown:
            raise SecurityConfigError(f"{source}: unknown key(s) {unknown} (the file has \"users\" and optionally "
                                      "\"iterations\")")
        if "users" not in document:
            raise SecurityConfigError(f"{source}: has no \"users\" object")
        return cls(document["users"], iterations=document.get("iterations", DEFAULT_ITERATIONS), source=source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Credentials:
        """Credentials from a JSON credentials file (format in the module docstring).

        Raises :class:`~pylog.errors.SecurityConfigError` for a missing, unreadable or malformed file; warns
        (logger ``pylog.server``) when the file is readable by every user or writable by its group or every user.
        """
        path = os.fspath(path)
        where = f"credentials file {path}"
        raw, mode = _read_file(path, where)
        if mode & stat.S_IROTH:
            log.warning("credentials file %s is readable by every user (mode %03o): it holds secrets, "
                        "`chmod o-r` it", path, stat.S_IMODE(mode))
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            log.warning("credentials file %s is writable by %s (mode %03o): whoever can write it can add a user "
                        "and log in; `chmod go-w` it", path,
                        "every user" if mode & stat.S_IWOTH else "its group", stat.S_IMODE(mode))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SecurityConfigError(f"{where}: not UTF-8 (bad byte at position {e.start})") from None

        def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for key, value in pairs:
                if key in out:
                    raise SecurityConfigError(f"{where}: key {key!r} is given twice in one object")
                out[key] = value
            return out

        def no_constant(name: str) -> Any:
            raise SecurityConfigError(f"{where}: {name} is not JSON")

        try:
            document = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
        except json.JSONDecodeError as e:
            # e.msg never quotes the document (it could be a password).
            raise SecurityConfigError(f"{where}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") \
                from None
        except RecursionError:
            raise SecurityConfigError(f"{where}: nested too deeply") from None
        return cls.from_json(document, source=where)

    def __len__(self) -> int:
        return len(self._users)

    def __contains__(self, user: object) -> bool:
        return user in self._users

    @property
    def usernames(self) -> list[str]:
        """The user names, sorted."""
        return sorted(self._users)

    def mechanisms_of(self, user: str) -> list[str]:
        """The mechanisms ``user`` can authenticate with ([] for an unknown user)."""
        entry = self._users.get(user)
        return [] if entry is None else ["PLAIN", *(m for m in _SCRAM_HASHES if m in entry.scram)]

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (False for an unknown user). Constant-time in the password; an
        unknown user costs what a user with a known password does, plus one PBKDF2 run when some user has only
        pre-salted entries (such a user's check is one PBKDF2 run: a few milliseconds at 4096 iterations)."""
        entry = self._users.get(user)
        given = hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest()
        if entry is None:
            hmac.compare_digest(given, self._dummy_digest)
            if self._decoy_mechanism is not None:
                self.decoy_secret(self._decoy_mechanism, user).check_password(password)
            return False
        if entry.plain_digest is not None:
            return hmac.compare_digest(given, entry.plain_digest)
        return next(iter(entry.scram.values())).check_password(password)

    def scram_secret(self, mechanism: str, user: str) -> ScramSecret | None:
        """``user``'s secret for a SCRAM mechanism, or None (an unknown user, or no entry for the mechanism)."""
        entry = self._users.get(user)
        return None if entry is None else entry.scram.get(mechanism)

    def decoy_secret(self, mechanism: str, user: str) -> ScramSecret:
        """A secret no password matches, the same for each call with the same arguments: what the server shows a
        user it does not know, so that the server-first message does not tell."""
        hashname = _SCRAM_HASHES[mechanism]
        seed = f"{mechanism}\0{user}".encode("utf-8", "surrogatepass")

        def derive(label: bytes, size: int) -> bytes:
            return hmac.new(self._secret, label + b"\0" + seed, "sha512").digest()[:size]

        size = hashlib.new(hashname).digest_size
        iterations, salt_bytes = self._decoy_shape[mechanism]
        salt = b"".join(derive(b"salt%d" % i, 64) for i in range(salt_bytes // 64 + 1))[:salt_bytes]
        return ScramSecret(mechanism, salt, iterations, derive(b"stored", size), derive(b"server", size))


# ------------------------------------------------------------------------------------------------- SASL

class SaslSession:
    """One SASL exchange with one client, for one mechanism (made by :meth:`SaslServer.start`).

    Invariants: :attr:`principal` is None until :attr:`done`; after ``done`` or a failure (:attr:`failed`),
    :meth:`step` raises :class:`~pylog.errors.IllegalSaslStateError`.
    """

    mechanism: str

    def __init__(self, mechanism: str, credentials: Credentials) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self.principal: str | None = None
        self.done = False
        self.failed = False

    def step(self, token: bytes | bytearray | memoryview) -> tuple[bytes, bool]:
        """Take the client's next token; return ``(challenge, done)``: the bytes to send back (possibly empty;
        send them anyway) and whether the exchange is over and succeeded. Raises
        :class:`~pylog.errors.AuthenticationError` when it failed (the session is then dead)."""
        if self.done or self.failed:
            raise IllegalSaslStateError(f"SASL {self.mechanism} exchange is already "
                                        f"{'complete' if self.done else 'failed'}: no more tokens are taken")
        data = bytes(token)
        try:
            if len(data) > MAX_TOKEN_BYTES:
                raise AuthenticationError(f"Authentication failed: SASL token of {len(data)} bytes is larger than "
                                          f"{MAX_TOKEN_BYTES}")
            challenge, self.done = self._step(data)
        except AuthenticationError:
            self.failed = True
            raise
        return challenge, self.done

    def _step(self, token: bytes) -> tuple[bytes, bool]:
        raise NotImplementedError

    def _authenticated(self, user: str) -> None:
        self.principal = user


def _utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"Authentication failed: {what} is not valid UTF-8") from None


class _PlainSession(SaslSession):
    """RFC 4616: one token ``authzid NUL authcid NUL passwd``; the answer is empty."""

    def _step(self, token: bytes) -> tuple[bytes, bool]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationError("Authentication failed: invalid SASL/PLAIN request: expected "
                                      "[authzid] NUL username NUL password")
        authzid, user, password = (_utf8(p, "SASL/PLAIN request") for p in parts)
        if not user or not password:
            raise AuthenticationError("Authentication failed: username or password not specified")
        if authzid and authzid != user:
            raise AuthenticationError("Authentication failed: Client requested an authorization id that is "
                                      "different from username")
        if not self._credentials.check_password(user, password):
            raise AuthenticationError("Authentication failed: Invalid username or password")
        self._authenticated(user)
        return b"", True


_SASLNAME = re.compile(r"(?:[^=,]|=2C|=3D)+")
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # printable ASCII but ','
_EXTENSION = re.compile(r"[A-Za-z]+=[^,]*")


def _saslname(text: str, what: str) -> str:
    if not _SASLNAME.fullmatch(text):
        raise AuthenticationError(f"Authentication failed: invalid SCRAM {what} (empty, or '=' not escaped as =3D, "
                                  "',' as =2C)")
    return text.replace("=2C", ",").replace("=3D", "=")


class _ScramSession(SaslSession):
    """RFC 5802 / RFC 7677: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, credentials: Credentials, nonce: str) -> None:
        super().__init__(mechanism, credentials)
        self._hash = _SCRAM_HASHES[mechanism]
        self._server_nonce = nonce
        self._state = 0
        # Set by the client-first message:
        self._user = ""
        self._known = False
        self._secret: ScramSecret | None = None
        self._gs2_header = b""
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""

    def _fail_malformed(self, what: str) -> AuthenticationError:
        return AuthenticationError(f"Authentication failed: invalid SCRAM {what} message for {self.mechanism}")

    def _fail_credentials(self) -> AuthenticationError:
        # Kafka's wording; the same for an unknown user, a wrong password and a tampered proof.
        return AuthenticationError("Authentication failed during authentication due to invalid credentials with "
                                   f"SASL mechanism {self.mechanism}")

    def _step(self, token: bytes) -> tuple[bytes, bool]:
        if self._state == 0:
            self._state = 1
            return self._client_first(_utf8(token, "SCRAM client-first message")), False
        return self._client_final(_utf8(token, "SCRAM client-final message")), True

    def _client_first(self, text: str) -> bytes:
        # gs2-header: gs2-cbind-flag "," [authzid] ","
        if text.startswith("p="):
            raise AuthenticationError("Authentication failed: SCRAM channel binding is not supported")
        if not text.startswith("n,"):
            raise self._fail_malformed("client-first (the GS2 header must be 'n,,')")
        comma = text.find(",", 2)
        if comma < 0:
            raise self._fail_malformed("client-first")
        authzid_field = text[2:comma]
        self._gs2_header = text[:comma + 1].encode("utf-8")
        bare = text[comma + 1:]
        fields = bare.split(",")
        if len(fields) < 2:
            raise self._fail_malformed("client-first")
        if fields[0].startswith("m="):
            raise AuthenticationError("Authentication failed: SCRAM mandatory extensions (m=) are not supported")
        if not fields[0].startswith("n=") or not fields[1].startswith("r="):
            raise self._fail_malformed("client-first")
        user = _saslname(fields[0][2:], "user name")
        if authzid_field:
            if not authzid_field.startswith("a=") or _saslname(authzid_field[2:], "authorization id") != user:
                raise AuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        nonce = fields[1][2:]
        if not _NONCE.fullmatch(nonce):
            raise self._fail_malformed("client-first (bad nonce)")
        for extension in fields[2:]:
            if not _EXTENSION.fullmatch(extension):
                raise self._fail_malformed("client-first (bad extension)")
            if extension.split("=", 1)[0] == "tokenauth" and extension[10:].lower() == "true":
                raise AuthenticationError("Authentication failed: delegation tokens are not supported")
        secret = self._credentials.scram_secret(self.mechanism, user)
        self._known = secret is not None
        self._secret = secret if secret is not None else self._credentials.decoy_secret(self.mechanism, user)
        self._user = user
        self._nonce = nonce + self._server_nonce
        self._first_bare = bare
        self._server_first = (f"r={self._nonce},s={base64.b64encode(self._secret.salt).decode()},"
                              f"i={self._secret.iterations}")
        return self._server_first.encode("utf-8")

    def _client_final(self, text: str) -> bytes:
        cut = text.rfind(",p=")
        if cut < 0:
            raise self._fail_malformed("client-final (no proof)")
        without_proof, proof_text = text[:cut], text[cut + 3:]
        fields = without_proof.split(",")
        if len(fields) < 2 or not fields[0].startswith("c=") or not fields[1].startswith("r="):
            raise self._fail_malformed("client-final")
        if not all(_EXTENSION.fullmatch(f) for f in fields[2:]):
            raise self._fail_malformed("client-final (bad extension)")
        try:
            binding = base64.b64decode(fields[0][2:].encode("ascii"), validate=True)
            proof = base64.b64decode(proof_text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise self._fail_malformed("client-final (bad base64)") from None
        if binding != self._gs2_header:
            raise AuthenticationError("Authentication failed: SCRAM channel binding (c=) does not match the GS2 "
                                      "header of the client-first message")
        # Kafka 3.8.1 to 3.9 compare as here: the nonce must END with the exchange's (client + server) nonce.
        # librdkafka before 2.6.1 (kcat 1.7, confluent-kafka < 2.6.1) sends its client nonce once more in front
        # of it (librdkafka PR #4895); its proof covers the message as sent, so it still proves the password.
        sent, nonce = fields[1][2:].encode("utf-8"), self._nonce.encode("utf-8")
        if len(sent) < len(nonce) or not hmac.compare_digest(sent[len(sent) - len(nonce):], nonce):
            raise AuthenticationError("Authentication failed: SCRAM nonce mismatch (the client-final message's "
                                      "nonce does not end with this exchange's)")
        secret = self._secret
        assert secret is not None  # set by _client_first (state 1)
        auth_message = ",".join((self._first_bare, self._server_first, without_proof)).encode("utf-8")
        client_signature = _hmac(self._hash, secret.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise self._fail_credentials()
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        matches = hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), secret.stored_key)
        if not (matches and self._known):
            raise self._fail_credentials()
        self._authenticated(self._user)
        server_signature = _hmac(self._hash, secret.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


def _default_nonce() -> str:
    return secrets.token_urlsafe(24)  # 32 characters of [A-Za-z0-9_-]: printable, no ','


class SaslServer:
    """The SASL side of one connection: which mechanisms it offers, the exchange in progress, who logged in.

    ``mechanisms`` defaults to :data:`MECHANISMS`; each must be one of them (SecurityConfigError otherwise).
    ``nonce_factory`` makes the server's part of each SCRAM nonce (printable ASCII without ','); tests pass a
    fixed one, the default is 24 random bytes, URL-safe base64.

    Invariants: at most one exchange per connection (:meth:`start` once); :attr:`authenticated` only after that
    exchange succeeded, and then :attr:`principal` is the user's name.
    """

    def __init__(self, credentials: Credentials, mechanisms: Iterable[str] | None = None, *,
                 nonce_factory: Callable[[], str] | None = None) -> None:
        names = list(MECHANISMS if mechanisms is None else mechanisms)
        for name in names:
            if name not in MECHANISMS:
                raise SecurityConfigError(f"unknown SASL mechanism {name!r}: pylog serve has {', '.join(MECHANISMS)}")
        if not names:
            raise SecurityConfigError("no SASL mechanism enabled")
        self.credentials = credentials
        self.mechanisms: list[str] = list(dict.fromkeys(names))
        self.session: SaslSession | None = None
        self._nonce_factory = nonce_factory or _default_nonce

    @property
    def authenticated(self) -> bool:
        """Whether the connection's SASL exchange succeeded."""
        return self.session is not None and self.session.done

    @property
    def principal(self) -> str | None:
        """The authenticated user's name, None before then."""
        return self.session.principal if self.session is not None else None

    def allows(self, api_key: int) -> bool:
        """Whether a request with this api key may be served now: any once authenticated, else only
        ApiVersions, SaslHandshake and SaslAuthenticate."""
        return self.authenticated or api_key in PRE_AUTH_API_KEYS

    def start(self, mechanism: str) -> SaslSession:
        """Begin the exchange a SaslHandshake asks for (mechanism names are case-sensitive, as in Kafka).

        Raises UnsupportedSaslMechanismError (33) for a mechanism not enabled, IllegalSaslStateError (34) when
        this connection already had a handshake."""
        if self.session is not None:
            raise IllegalSaslStateError("Unexpected SaslHandshake request: this connection already "
                                        f"{'authenticated' if self.authenticated else 'began a SASL exchange'}")
        if mechanism not in self.mechanisms:
            raise UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {mechanism!r}: enabled mechanisms are "
                                                f"{', '.join(self.mechanisms)}")
        if mechanism == "PLAIN":
            session: SaslSession = _PlainSession(mechanism, self.credentials)
        else:
            nonce = self._nonce_factory()
            if not _NONCE.fullmatch(nonce):
                raise ValueError("nonce_factory must return printable ASCII without ','")
            session = _ScramSession(mechanism, self.credentials, nonce)
        self.session = session
        return session


def plain_exposed_addresses(mechanisms: Iterable[str] | None, tls: bool, addresses: Iterable[str]) -> list[str]:
    """The listening addresses on which SASL/PLAIN (among ``mechanisms``, default :data:`MECHANISMS`) would
    send passwords in the clear to other machines: every address but loopback ones (0.0.0.0 and :: included)
    when there is no TLS; [] with TLS or without PLAIN. The server warns at start-up when this is not empty."""
    if tls or "PLAIN" not in (MECHANISMS if mechanisms is None else list(mechanisms)):
        return []
    return [a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_loopback]


# -------------------------------------------------------------------------------------------------- TLS

def _read_file(path: str, where: str, read: bool = True) -> tuple[bytes, int]:
    """The bytes (with ``read``) and mode of a file the server is configured with; a missing, unreadable or
    directory path raises SecurityConfigError naming ``where``."""
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError
            return (f.read() if read else b""), mode
    except FileNotFoundError:
        raise SecurityConfigError(f"{where}: not found") from None
    except IsADirectoryError:
        raise SecurityConfigError(f"{where}: is a directory, not a file") from None
    except PermissionError:
        raise SecurityConfigError(f"{where}: not readable by this user") from None
    except OSError as e:
        raise SecurityConfigError(f"{where}: cannot be read ({e.strerror or e})") from None


def _check_file(path: str | os.PathLike[str], what: str) -> str:
    path = os.fspath(path)
    _read_file(path, f"TLS {what} {path}", read=False)
    return path


def make_server_ssl_context(certfile: str | os.PathLike[str], keyfile: str | os.PathLike[str] | None = None,
                            cafile: str | os.PathLike[str] | None = None, require_client_cert: bool = False, *,
                            password: str | None = None) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 and newer) for a listener.

    ``certfile``: PEM certificate chain, the server's own first; ``keyfile``: its PEM private key (None when
    ``certfile`` holds it too); ``password``: the key's password if it is encrypted. ``cafile``: PEM CA
    certificates client certificates are checked against; with it, clients are asked for a certificate
    (Kafka's ``ssl.client.auth=requested``), and ``require_client_cert`` refuses those without one
    (``required``; it needs ``cafile``). Missing, unreadable or malformed files, a key that does not match the
    certificate, an encrypted key without its password: :class:`~pylog.errors.SecurityConfigError`.
    """
    cert = _check_file(certfile, "certificate file")
    key = _check_file(keyfile, "key file") if keyfile is not None else None
    ca = _check_file(cafile, "CA file") if cafile is not None else None
    if require_client_cert and ca is None:
        raise SecurityConfigError("require_client_cert needs cafile: the CA certificates client certificates "
                                  "are checked against")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2

    def ask_password() -> str:
        if password is None:  # without a callback OpenSSL would prompt on the terminal
            raise SecurityConfigError(f"TLS key file {key or cert}: the private key is encrypted: give its "
                                      "password")
        return password

    files = f"{cert}" + (f" and key file {key}" if key else "")
    try:
        context.load_cert_chain(cert, key, password=ask_password)
    except SecurityConfigError:
        raise  # from ask_password, through OpenSSL
    except ssl.SSLError as e:
        reason = e.reason or str(e)
        hint = {"KEY_VALUES_MISMATCH": "the private key does not belong to the certificate",
                "BAD_DECRYPT": "wrong password for the encrypted private key"}.get(str(reason), str(reason))
        raise SecurityConfigError(f"TLS certificate file {files}: cannot load the certificate and its private "
                                  f"key ({hint}); both must be PEM") from None
    if ca is not None:
        try:
            context.load_verify_locations(cafile=ca)
        except ssl.SSLError as e:
            raise SecurityConfigError(f"TLS CA file {ca}: no PEM CA certificate could be loaded "
                                      f"({e.reason or e})") from None
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context
