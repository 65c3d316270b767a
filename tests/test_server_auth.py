"""pylog.server.auth: SASL PLAIN / SCRAM server sessions against real Kafka clients' SASL code, the credentials
file, and the server TLS context over a real handshake on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import ssl
import time
from pathlib import Path

import pytest
from aiokafka.conn import SaslPlainAuthenticator, ScramAuthenticator
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import ScramClient

from pylog.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    InvalidConfigError,
    PylogError,
    SecurityConfigError,
    UnsupportedSaslMechanismError,
)
from pylog.server.auth import (
    MAX_TOKEN_BYTES,
    MECHANISMS,
    Credentials,
    SaslServer,
    SaslSession,
    ScramSecret,
    error_code,
    make_server_ssl_context,
    plain_exposed_addresses,
    scram_entry,
)
from pylog.server.logins import LoginGuard

SCRAMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture(scope="module")
def creds() -> Credentials:
    return Credentials({"alice": "alice-secret", "a,b=c": "odd-name", "bob": {"password": "pw2", "iterations": 8192}})


def kafka_python_scram(session: SaslSession, user: str, password: str) -> ScramClient:
    """Runs kafka-python's SCRAM client against ``session``; returns the client (its checks raise ValueError)."""
    client = ScramClient(user, password, session.mechanism)
    challenge, done = session.step(client.first_message())
    assert not done
    client.process_server_first_message(challenge)
    challenge, done = session.step(client.final_message())
    assert done
    client.process_server_final_message(challenge)  # checks the ServerSignature
    return client


def aiokafka_drive(authenticator, session: SaslSession) -> None:
    """Runs one of aiokafka's (sans-I/O) SASL authenticator generators against ``session``."""
    gen = authenticator._authenticator
    token, _expects_answer = next(gen)
    while True:
        challenge, done = session.step(token)
        try:
            token, _expects_answer = gen.send(challenge)
        except StopIteration:
            break
        assert not done
    assert session.done


# ------------------------------------------------------------------------------------------------- PLAIN

def test_plain_success_with_real_clients(creds: Credentials) -> None:
    server = SaslServer(creds)
    assert server.mechanisms == list(MECHANISMS)
    assert not server.authenticated and server.principal is None
    session = server.start("PLAIN")
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    challenge, done = session.step(client.auth_bytes())
    assert (challenge, done) == (b"", True)
    client.receive(challenge)
    assert client.is_authenticated()
    assert session.principal == server.principal == "alice" and server.authenticated

    session = SaslServer(creds).start("PLAIN")
    aiokafka_drive(SaslPlainAuthenticator(loop=None, sasl_plain_username="a,b=c", sasl_plain_password="odd-name"),
                   session)
    assert session.principal == "a,b=c"


@pytest.mark.parametrize("token", [
    b"\0alice\0wrong",
    b"\0nobody\0alice-secret",
    b"\0alice\0alice-secret\0",
    b"alice\0alice-secret",
    b"\0\0alice-secret",
    b"\0alice\0",
    b"bob\0alice\0alice-secret",  # authzid other than the user
    b"\0al\xffice\0alice-secret",
])
def test_plain_failures(creds: Credentials, token: bytes) -> None:
    session = SaslServer(creds).start("PLAIN")
    with pytest.raises(AuthenticationError) as info:
        session.step(token)
    assert error_code(info.value) == 58
    assert b"alice-secret" not in str(info.value).encode() and "wrong" not in str(info.value)
    assert session.failed and session.principal is None
    with pytest.raises(IllegalSaslStateError):
        session.step(b"\0alice\0alice-secret")


def test_plain_authzid_equal_to_user(creds: Credentials) -> None:
    session = SaslServer(creds).start("PLAIN")
    assert session.step(b"alice\0alice\0alice-secret") == (b"", True)


def test_plain_unknown_user_reads_like_wrong_password(creds: Credentials) -> None:
    messages = set()
    for token in (b"\0alice\0nope", b"\0nobody\0nope"):
        with pytest.raises(AuthenticationError) as info:
            SaslServer(creds).start("PLAIN").step(token)
        messages.add(str(info.value))
    assert len(messages) == 1


# ------------------------------------------------------------------------------------------------- SCRAM

@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_with_kafka_python_client(creds: Credentials, mechanism: str) -> None:
    server = SaslServer(creds)
    session = server.start(mechanism)
    kafka_python_scram(session, "bob", "pw2")
    assert server.authenticated and server.principal == "bob"
    with pytest.raises(IllegalSaslStateError):
        session.step(b"c=biws")
    with pytest.raises(IllegalSaslStateError):  # one exchange per connection (no re-authentication)
        server.start("PLAIN")


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_with_aiokafka_client_and_escaped_name(creds: Credentials, mechanism: str) -> None:
    session = SaslServer(creds).start(mechanism)
    # aiokafka escapes ',' and '=' in the name (=2C, =3D): the server must unescape them.
    aiokafka_drive(ScramAuthenticator(loop=None, sasl_plain_username="a,b=c", sasl_plain_password="odd-name",
                                      sasl_mechanism=mechanism), session)
    assert session.principal == "a,b=c"


def test_scram_rfc7677_test_vector() -> None:
    # RFC 7677 section 3: user "user", password "pencil", fixed nonces and salt, 4096 iterations.
    secret = ScramSecret.derive("SCRAM-SHA-256", "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    creds = Credentials({"user": {"SCRAM-SHA-256": secret.to_json()}})
    server = SaslServer(creds, nonce_factory=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    session = server.start("SCRAM-SHA-256")
    assert session.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", False)
    assert session.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == (
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", True)
    assert session.principal == "user"


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_wrong_password_and_unknown_user_fail_alike(creds: Credentials, mechanism: str) -> None:
    failures = []
    firsts = []
    for user, password in [("alice", "wrong"), ("nobody", "wrong"), ("nobody", "alice-secret")]:
        session = SaslServer(creds).start(mechanism)
        client = ScramClient(user, password, mechanism)
        first, _ = session.step(client.first_message())
        firsts.append(dict(kv.split("=", 1) for kv in first.decode().split(",")))
        client.process_server_first_message(first)
        with pytest.raises(AuthenticationError) as info:
            session.step(client.final_message())
        assert error_code(info.value) == 58 and session.principal is None
        failures.append(str(info.value))
    assert len(set(failures)) == 1, failures
    assert "invalid credentials" in failures[0]
    # The server-first message does not tell an unknown user: same salt size and iterations as a known one,
    # and the same (decoy) salt on each attempt for the same unknown user.
    known, unknown1, unknown2 = firsts
    assert len(base64.b64decode(known["s"])) == len(base64.b64decode(unknown1["s"]))
    assert known["i"] == unknown1["i"] == "4096"
    assert unknown1["s"] == unknown2["s"]


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_tampered_proof(creds: Credentials, mechanism: str) -> None:
    session = SaslServer(creds).start(mechanism)
    client = ScramClient("alice", "alice-secret", mechanism)
    client.process_server_first_message(session.step(client.first_message())[0])
    final = client.final_message()
    head, proof = final.split(b",p=")
    raw = bytearray(base64.b64decode(proof))
    raw[0] ^= 1
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        session.step(head + b",p=" + base64.b64encode(raw))
    assert session.failed


@pytest.mark.parametrize("proof", [b"", b"AAAA", base64.b64encode(bytes(100))])
def test_scram_proof_of_wrong_length(creds: Credentials, proof: bytes) -> None:
    session = SaslServer(creds, nonce_factory=lambda: "SRV").start("SCRAM-SHA-256")
    session.step(b"n,,n=alice,r=CLI")
    with pytest.raises(AuthenticationError):
        session.step(b"c=biws,r=CLISRV,p=" + proof)


def test_scram_replayed_client_final_is_refused(creds: Credentials) -> None:
    # A client-final message recorded from a successful exchange, replayed on a new connection after the same
    # client-first message: the new exchange's server nonce differs, so the replay fails on the nonce.
    mechanism = "SCRAM-SHA-256"
    session = SaslServer(creds).start(mechanism)
    client = ScramClient("alice", "alice-secret", mechanism)
    first = client.first_message()
    client.process_server_first_message(session.step(first)[0])
    final = client.final_message()
    session.step(final)
    assert session.done

    replay = SaslServer(creds).start(mechanism)
    replay.step(first)
    with pytest.raises(AuthenticationError, match="nonce"):
        replay.step(final)


def test_scram_nonce_must_be_the_exchange_s(creds: Credentials) -> None:
    session = SaslServer(creds, nonce_factory=lambda: "SRV").start("SCRAM-SHA-256")
    assert session.step(b"n,,n=alice,r=CLI")[0].startswith(b"r=CLISRV,")
    with pytest.raises(AuthenticationError, match="nonce"):
        session.step(b"c=biws,r=CLI,p=" + base64.b64encode(bytes(32)))


def _client_final(server_first: bytes, client_first_bare: bytes, nonce: bytes, password: bytes,
                  hashname: str = "sha256") -> tuple[bytes, bytes]:
    """A client-final message (and the ServerSignature it must get) for ``nonce``, computed by hand."""
    fields = dict(kv.split(b"=", 1) for kv in server_first.split(b","))
    salted = hashlib.pbkdf2_hmac(hashname, password, base64.b64decode(fields[b"s"]), int(fields[b"i"]))
    client_key = hmac.new(salted, b"Client Key", hashname).digest()
    without_proof = b"c=biws,r=" + nonce
    auth_message = client_first_bare + b"," + server_first + b"," + without_proof
    signature = hmac.new(hashlib.new(hashname, client_key).digest(), auth_message, hashname).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", hashname).digest()
    return (without_proof + b",p=" + base64.b64encode(proof),
            b"v=" + base64.b64encode(hmac.new(server_key, auth_message, hashname).digest()))


def test_scram_librdkafka_before_2_6_1_repeated_client_nonce_is_accepted(creds: Credentials) -> None:
    # librdkafka < 2.6.1 (kcat 1.7 of Debian 12, confluent-kafka < 2.6.1) puts its client nonce in front of the
    # combined nonce once more: r=<client><client><server> (librdkafka PR #4895). Kafka 3.8.1 to 3.9 check that
    # the nonce ENDS with the exchange's, so they let it in; so does pylog.
    session = SaslServer(creds, nonce_factory=lambda: "SRV").start("SCRAM-SHA-256")
    server_first = session.step(b"n,,n=alice,r=CLI")[0]
    assert server_first.startswith(b"r=CLISRV,")
    final, server_final = _client_final(server_first, b"n=alice,r=CLI", b"CLI" + b"CLISRV", b"alice-secret")
    assert session.step(final) == (server_final, True)
    assert session.principal == "alice"
    # Only a nonce that ends with the exchange's: not one with something after it, nor a shortened one.
    for nonce in (b"CLISRVX", b"CLISR", b"SRV" + b"CLI"):
        session = SaslServer(creds, nonce_factory=lambda: "SRV").start("SCRAM-SHA-256")
        server_first = session.step(b"n,,n=alice,r=CLI")[0]
        with pytest.raises(AuthenticationError, match="nonce"):
            session.step(_client_final(server_first, b"n=alice,r=CLI", nonce, b"alice-secret")[0])


def test_scram_unknown_user_first_message_shaped_like_presalted_users(tmp_path: Path) -> None:
    # Every user pre-salted at 8192 rounds with 16-byte salts (the file's default would be 4096 and 32): an
    # unknown user's server-first message has the same shape, and the same salt after a restart (a fresh load).
    def entry(password: str) -> dict:
        out = {}
        for mechanism, hashname in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
            salt = os.urandom(16)
            secret = ScramSecret.derive(mechanism, password, iterations=8192, salt=salt)
            out[mechanism] = secret.to_json()
        return out

    path = write(tmp_path, {"users": {"carol": entry("c"), "dave": entry("d")}})
    shapes = {}
    for load in range(2):
        creds = Credentials.load(path)
        for mechanism in SCRAMS:
            for user in ("carol", "nobody"):
                first = SaslServer(creds, nonce_factory=lambda: "S").start(mechanism).step(f"n,,n={user},r=C"
                                                                                          .encode())[0]
                fields = dict(kv.split(b"=", 1) for kv in first.split(b","))
                shapes[load, mechanism, user] = (len(base64.b64decode(fields[b"s"])), fields[b"i"], fields[b"s"])
    for mechanism in SCRAMS:
        known, unknown = shapes[0, mechanism, "carol"], shapes[0, mechanism, "nobody"]
        assert known[:2] == unknown[:2] == (16, b"8192")
        assert shapes[1, mechanism, "nobody"] == unknown and shapes[1, mechanism, "carol"] == known
        assert known[2] != unknown[2]


@pytest.mark.parametrize("first, match", [
    (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
    (b"y,,n=alice,r=abc", "GS2"),
    (b"n,,m=ext,n=alice,r=abc", "mandatory"),
    (b"n,,n=alice", "client-first"),
    (b"n,,r=abc,n=alice", "client-first"),
    (b"n,,n=,r=abc", "user name"),
    (b"n,,n=al=ice,r=abc", "user name"),
    (b"n,,n=alice,r=", "nonce"),
    (b"n,,n=alice,r=a b", "nonce"),
    (b"n,a=bob,n=alice,r=abc", "authorization id"),
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation"),
    (b"n,,n=alice,r=abc,=x", "extension"),
    (b"n,,", "client-first"),
    (b"", "client-first"),
    (b"n,,n=al\xffice,r=abc", "UTF-8"),
])
def test_scram_malformed_client_first(creds: Credentials, first: bytes, match: str) -> None:
    session = SaslServer(creds).start("SCRAM-SHA-256")
    with pytest.raises(AuthenticationError, match=match):
        session.step(first)


def test_scram_authzid_equal_to_user_and_extensions(creds: Credentials) -> None:
    # A GS2 header with an authzid equal to the user, and an extension: the proof covers c=base64("n,a=alice,").
    session = SaslServer(creds, nonce_factory=lambda: "S").start("SCRAM-SHA-256")
    server_first = session.step(b"n,a=alice,n=alice,r=C,ext=1")[0]
    salt = base64.b64decode(server_first.split(b",s=")[1].split(b",")[0])
    salted = hashlib.pbkdf2_hmac("sha256", b"alice-secret", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = b"c=" + base64.b64encode(b"n,a=alice,") + b",r=CS"
    auth_message = b"n=alice,r=C,ext=1," + server_first + b"," + without_proof
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final, done = session.step(without_proof + b",p=" + base64.b64encode(proof))
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    assert done and final == b"v=" + base64.b64encode(hmac.new(server_key, auth_message, "sha256").digest())
    assert session.principal == "alice"

    # "biws" (the header n,,) does not match a client-first message that had an authzid.
    session = SaslServer(creds, nonce_factory=lambda: "S").start("SCRAM-SHA-256")
    session.step(b"n,a=alice,n=alice,r=C")
    with pytest.raises(AuthenticationError, match="channel binding"):
        session.step(b"c=biws,r=CS,p=" + base64.b64encode(bytes(32)))


@pytest.mark.parametrize("final, match", [
    (b"c=biws,r=CLISRV", "no proof"),
    (b"r=CLISRV,c=biws,p=AAAA", "client-final"),
    (b"c=bi!s,r=CLISRV,p=AAAA", "base64"),
    (b"c=biws,r=CLISRV,p=AA!A", "base64"),
    (b"c=eSws,r=CLISRV,p=" + base64.b64encode(bytes(32)), "channel binding"),  # "y,,"
    (b"c=biws,r=CLISRV,x,p=" + base64.b64encode(bytes(32)), "extension"),
])
def test_scram_malformed_client_final(creds: Credentials, final: bytes, match: str) -> None:
    session = SaslServer(creds, nonce_factory=lambda: "SRV").start("SCRAM-SHA-256")
    session.step(b"n,,n=alice,r=CLI")
    with pytest.raises(AuthenticationError, match=match):
        session.step(final)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_oversized_token_is_refused(creds: Credentials, mechanism: str) -> None:
    session = SaslServer(creds).start(mechanism)
    with pytest.raises(AuthenticationError, match="larger than"):
        session.step(b"n,,n=alice,r=" + b"x" * MAX_TOKEN_BYTES)


@settings(max_examples=300)
@given(mechanism=st.sampled_from(MECHANISMS), tokens=st.lists(st.binary(max_size=200), min_size=1, max_size=3),
       first_valid=st.booleans())
def test_random_tokens_raise_only_authentication_errors(mechanism: str, tokens: list[bytes],
                                                        first_valid: bool) -> None:
    session = SaslServer(_FUZZ_CREDS).start(mechanism)
    if first_valid and mechanism != "PLAIN":
        session.step(b"n,,n=alice,r=abc")
    for token in tokens:
        try:
            session.step(token)
        except AuthenticationError:
            assert session.failed and session.principal is None
            return
    assert not session.done  # random bytes never log in


_FUZZ_CREDS = Credentials({"alice": "alice-secret"})


@settings(max_examples=200)
@given(st.text(alphabet=st.sampled_from("n,=ar=cpbiwsSRV2C3D"), max_size=40))
def test_random_scram_shaped_text_raises_only_authentication_errors(text: str) -> None:
    session = SaslServer(_FUZZ_CREDS, nonce_factory=lambda: "SRV").start("SCRAM-SHA-256")
    for token in (text.encode(), ("c=biws,r=abcSRV,p=" + text).encode()):
        try:
            session.step(token)
        except AuthenticationError:
            return


def test_mechanism_selection_and_error_codes(creds: Credentials) -> None:
    server = SaslServer(creds, ["SCRAM-SHA-512", "PLAIN", "PLAIN"])
    assert server.mechanisms == ["SCRAM-SHA-512", "PLAIN"]
    for name in ("SCRAM-SHA-256", "GSSAPI", "plain"):
        with pytest.raises(UnsupportedSaslMechanismError) as info:
            server.start(name)
        assert error_code(info.value) == 33 and "SCRAM-SHA-512, PLAIN" in str(info.value)
    server.start("PLAIN")
    with pytest.raises(IllegalSaslStateError) as state:
        server.start("PLAIN")
    assert error_code(state.value) == 34
    assert isinstance(state.value, AuthenticationError) and isinstance(state.value, PylogError)
    with pytest.raises(SecurityConfigError, match="GSSAPI"):
        SaslServer(creds, ["GSSAPI"])
    with pytest.raises(SecurityConfigError):
        SaslServer(creds, [])


def test_allows_only_sasl_requests_before_authentication(creds: Credentials) -> None:
    server = SaslServer(creds)
    assert [k for k in range(80) if server.allows(k)] == [17, 18, 36]
    session = server.start("PLAIN")
    assert not server.allows(0)
    session.step(b"\0alice\0alice-secret")
    assert all(server.allows(k) for k in range(80))


# ----------------------------------------------------------------------------------------------- credentials

def write(tmp_path: Path, document: object, mode: int = 0o600) -> Path:
    path = tmp_path / "users.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    path.chmod(mode)
    return path


def test_credentials_file_plain_and_presalted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    doc = {"users": {"alice": "alice-secret", "carol": scram_entry("carol-pw"),
                     "dave": scram_entry("dave-pw", ["SCRAM-SHA-512"], iterations=4100)},
           "iterations": 5000}
    with caplog.at_level(logging.WARNING, logger="pylog.server"):
        creds = Credentials.load(write(tmp_path, doc))
    assert not caplog.records
    assert creds.usernames == ["alice", "carol", "dave"] and len(creds) == 3 and "carol" in creds
    assert creds.mechanisms_of("dave") == ["PLAIN", "SCRAM-SHA-512"] and creds.mechanisms_of("x") == []
    alice = creds.scram_secret("SCRAM-SHA-256", "alice")
    assert alice is not None and alice.iterations == 5000 and len(alice.salt) == 32
    # A pre-salted user logs in with SCRAM and with PLAIN (checked against the stored secret).
    for mechanism in SCRAMS:
        kafka_python_scram(SaslServer(creds).start(mechanism), "carol", "carol-pw")
    assert SaslServer(creds).start("PLAIN").step(b"\0carol\0carol-pw") == (b"", True)
    assert SaslServer(creds).start("PLAIN").step(b"\0dave\0dave-pw") == (b"", True)
    for token in (b"\0carol\0wrong", b"\0nobody\0carol-pw"):  # an unknown user costs a PBKDF2 run here too
        with pytest.raises(AuthenticationError, match="Invalid username or password"):
            SaslServer(creds).start("PLAIN").step(token)
    # dave has no SCRAM-SHA-256 entry: he fails like an unknown user, at the proof.
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        kafka_python_scram(SaslServer(creds).start("SCRAM-SHA-256"), "dave", "dave-pw")


def test_credentials_file_readable_by_all_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pylog.server"):
        Credentials.load(write(tmp_path, {"users": {"alice": "s3cret"}}, mode=0o644))
    assert len(caplog.records) == 1 and "readable by every user" in caplog.text and "s3cret" not in caplog.text


@pytest.mark.parametrize("mode, who", [(0o620, "its group"), (0o602, "every user"), (0o660, "its group")])
def test_credentials_file_writable_by_others_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int,
                                                   who: str) -> None:
    with caplog.at_level(logging.WARNING, logger="pylog.server"):
        Credentials.load(write(tmp_path, {"users": {"alice": "s3cret"}}, mode=mode))
    assert len(caplog.records) == 1 and f"writable by {who}" in caplog.text and "s3cret" not in caplog.text
    assert caplog.records[0].levelno == logging.WARNING


@pytest.mark.parametrize("addresses, mechanisms, tls, exposed", [
    (["0.0.0.0"], None, False, ["0.0.0.0"]),
    (["::"], None, False, ["::"]),
    (["10.1.2.3", "127.0.0.1"], ["PLAIN"], False, ["10.1.2.3"]),
    (["127.0.0.1", "127.0.0.2", "::1"], None, False, []),
    (["0.0.0.0"], None, True, []),
    (["0.0.0.0"], ["SCRAM-SHA-256"], False, []),
])
def test_plain_without_tls_beyond_loopback_is_exposed(addresses: list, mechanisms: list | None, tls: bool,
                                                      exposed: list) -> None:
    assert plain_exposed_addresses(mechanisms, tls, addresses) == exposed


@pytest.mark.parametrize("document, match", [
    ("", "not valid JSON"),
    ('{"users": {"alice": "s3cret",}}', "not valid JSON.*line 1"),
    ('{"users": {"alice": "s3cret", "alice": "other"}}', "'alice' is given twice"),
    ('{"users": {"alice": NaN}}', "NaN"),
    ("[]", "JSON object"),
    ({}, "no \"users\""),
    ({"users": {}, "extra": 1}, "unknown key"),
    ({"users": []}, "\"users\" must be an object"),
    ({"users": {"alice": ""}}, "user 'alice': the password must be a non-empty"),
    ({"users": {"alice": 5}}, "password string or an object"),
    ({"users": {"": "s3cret"}}, "user name must be a non-empty"),
    ({"users": {"al\u0000ice": "s3cret"}}, "NUL"),
    ({"users": {"alice": "s3\u0000cret"}}, "password holds a NUL"),
    ({"users": {"alice": {"pasword": "s3cret"}}}, "unknown key"),
    ({"users": {"alice": {}}}, "no password"),
    ({"users": {"alice": {"password": "s3cret", "iterations": 100}}}, "4096 to 16384"),
    ({"users": {"alice": {"password": "s3cret", "iterations": True}}}, "iterations"),
    ({"users": {"alice": "s3cret"}, "iterations": 10**6}, "4096 to 16384"),
    ({"users": {"alice": {"password": "s3cret", "SCRAM-SHA-256": {}}}}, "not both"),
    ({"users": {"alice": {"iterations": 4096, "SCRAM-SHA-256": {}}}}, "goes with"),
    ({"users": {"alice": {"SCRAM-SHA-256": "x"}}}, "must be an object"),
    ({"users": {"alice": {"SCRAM-SHA-256": {"salt": "AAAA"}}}}, "missing iterations, server_key, stored_key"),
])
def test_credentials_file_is_validated_strictly(tmp_path: Path, document: object, match: str) -> None:
    with pytest.raises(SecurityConfigError, match=match) as info:
        Credentials.load(write(tmp_path, document))
    assert "s3cret" not in str(info.value) and str(tmp_path) in str(info.value)
    assert isinstance(info.value, InvalidConfigError)


@pytest.mark.parametrize("change, match", [
    ({"salt": ""}, "'salt' is empty"),
    ({"salt": "A?=="}, "'salt' is not valid base64"),
    ({"salt": 5}, "'salt' must be a base64 string"),
    ({"stored_key": base64.b64encode(bytes(31)).decode()}, "'stored_key' must decode to 32 bytes"),
    ({"server_key": "é"}, "'server_key' is not valid base64"),
    ({"iterations": 4095}, "iterations"),
    ({"extra": 1}, "unknown key"),
])
def test_presalted_entries_are_validated(change: dict, match: str) -> None:
    entry = scram_entry("pw", ["SCRAM-SHA-256"])
    entry["SCRAM-SHA-256"].update(change)
    with pytest.raises(SecurityConfigError, match=match):
        Credentials({"alice": entry})


def test_credentials_file_missing_or_directory(tmp_path: Path) -> None:
    with pytest.raises(SecurityConfigError, match="not found"):
        Credentials.load(tmp_path / "nope.json")
    with pytest.raises(SecurityConfigError, match="is a directory"):
        Credentials.load(tmp_path)
    (tmp_path / "bin.json").write_bytes(b'{"users": {"\xff": "x"}}')
    with pytest.raises(SecurityConfigError, match="not UTF-8"):
        Credentials.load(tmp_path / "bin.json")


def test_scram_entry_refuses_unknown_mechanism_and_iterations() -> None:
    with pytest.raises(SecurityConfigError, match="not a SCRAM mechanism"):
        scram_entry("pw", ["PLAIN"])
    with pytest.raises(SecurityConfigError, match="iterations"):
        scram_entry("pw", iterations=10)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(0, 20000) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["users", "iterations", "password", "SCRAM-SHA-256", "salt", "stored_key", "server_key",
                         "alice", "x"]), inner, max_size=4),
    max_leaves=8)


@settings(max_examples=150)
@given(_json_values)
def test_random_documents_raise_only_security_config_errors(document: object) -> None:
    try:
        Credentials.from_json(document)
    except SecurityConfigError:
        pass


# ----------------------------------------------------------------------------------------------------- TLS

def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, *,
          ca: bool, sans: list[x509.GeneralName] | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1/localhost, a client certificate, written as PEM files."""
    d = tmp_path_factory.mktemp("pki")
    ca_key, server_key, client_key, other_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(4))
    ca = _cert("pylog test CA", ca_key, "pylog test CA", ca_key, ca=True)
    server = _cert("localhost", server_key, "pylog test CA", ca_key, ca=False,
                   sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client = _cert("client-1", client_key, "pylog test CA", ca_key, ca=False)
    files = {
        "ca": ca.public_bytes(serialization.Encoding.PEM),
        "cert": server.public_bytes(serialization.Encoding.PEM),
        "key": _pem_key(server_key),
        "key_encrypted": _pem_key(server_key, b"hunter2"),
        "other_key": _pem_key(other_key),
        "client_cert": client.public_bytes(serialization.Encoding.PEM),
        "client_key": _pem_key(client_key),
        "garbage": b"not a pem file\n",
    }
    out = {}
    for name, data in files.items():
        (d / f"{name}.pem").write_bytes(data)
        out[name] = str(d / f"{name}.pem")
    return out


async def _echo_over_tls(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[bytes, list]:
    """One TLS connection to an asyncio echo server on 127.0.0.1: (what came back, the peer certs the server saw)."""
    seen: list = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            seen.append(writer.get_extra_info("peercert"))
            writer.write(await reader.readexactly(5))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1"), 10)
        try:
            writer.write(b"hello")
            data = await asyncio.wait_for(reader.read(5), 10)
        finally:
            writer.close()
        return data, seen
    finally:
        server.close()
        await server.wait_closed()


def test_tls_handshake_verifies_the_server(pki: dict[str, str]) -> None:
    ctx = make_server_ssl_context(pki["cert"], pki["key"])
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.verify_mode == ssl.CERT_NONE
    client = ssl.create_default_context(cafile=pki["ca"])
    data, _ = asyncio.run(_echo_over_tls(ctx, client))
    assert data == b"hello"

    # A client that does not trust the CA refuses the server's certificate.
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_echo_over_tls(ctx, ssl.create_default_context()))


def test_tls_client_certificates(pki: dict[str, str]) -> None:
    ctx = make_server_ssl_context(pki["cert"], pki["key"], cafile=pki["ca"], require_client_cert=True)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    client = ssl.create_default_context(cafile=pki["ca"])
    client.load_cert_chain(pki["client_cert"], pki["client_key"])
    data, seen = asyncio.run(_echo_over_tls(ctx, client))
    assert data == b"hello"
    assert seen[0]["subject"] == ((("commonName", "client-1"),),)

    # Without a client certificate: refused (under TLS 1.3 the client learns it at its first read).
    try:
        data, seen = asyncio.run(_echo_over_tls(ctx, ssl.create_default_context(cafile=pki["ca"])))
    except (ssl.SSLError, ConnectionError):
        pass
    else:
        assert data == b"" and not seen

    assert make_server_ssl_context(pki["cert"], pki["key"], cafile=pki["ca"]).verify_mode == ssl.CERT_OPTIONAL


def test_tls_encrypted_key(pki: dict[str, str]) -> None:
    with pytest.raises(SecurityConfigError, match="encrypted: give its password"):
        make_server_ssl_context(pki["cert"], pki["key_encrypted"])
    with pytest.raises(SecurityConfigError, match="wrong password|cannot load"):
        make_server_ssl_context(pki["cert"], pki["key_encrypted"], password="nope")
    ctx = make_server_ssl_context(pki["cert"], pki["key_encrypted"], password="hunter2")
    data, _ = asyncio.run(_echo_over_tls(ctx, ssl.create_default_context(cafile=pki["ca"])))
    assert data == b"hello"


def test_tls_file_errors(pki: dict[str, str], tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(SecurityConfigError, match=f"certificate file {missing}: not found"):
        make_server_ssl_context(missing, pki["key"])
    with pytest.raises(SecurityConfigError, match="key file .*: not found"):
        make_server_ssl_context(pki["cert"], missing)
    with pytest.raises(SecurityConfigError, match="CA file .*: not found"):
        make_server_ssl_context(pki["cert"], pki["key"], cafile=missing)
    with pytest.raises(SecurityConfigError, match="is a directory"):
        make_server_ssl_context(str(tmp_path), pki["key"])
    with pytest.raises(SecurityConfigError, match="does not belong to the certificate"):
        make_server_ssl_context(pki["cert"], pki["other_key"])
    with pytest.raises(SecurityConfigError, match="cannot load"):
        make_server_ssl_context(pki["garbage"], pki["key"])
    with pytest.raises(SecurityConfigError, match="CA file"):
        make_server_ssl_context(pki["cert"], pki["key"], cafile=pki["garbage"])
    with pytest.raises(SecurityConfigError, match="needs cafile"):
        make_server_ssl_context(pki["cert"], pki["key"], require_client_cert=True)
    # The key may sit in the certificate file.
    both = tmp_path / "both.pem"
    both.write_bytes(Path(pki["cert"]).read_bytes() + Path(pki["key"]).read_bytes())
    assert isinstance(make_server_ssl_context(str(both)), ssl.SSLContext)
    assert os.path.exists(pki["ca"])


# ------------------------------------------------------------------------------------------ login throttling

def _guard_run(guard: LoginGuard, logins: list[tuple[str, bytes]], creds: Credentials) -> list[tuple[str, float]]:
    """Each (address, PLAIN token) as one connection's login, all at once; their outcomes and end times."""
    async def one(address: str, token: bytes, t0: float) -> tuple[str, float]:
        session = SaslServer(creds).start("PLAIN")
        try:
            await guard.step(address, session, token)
            outcome = "ok"
        except AuthenticationError:
            outcome = "failed"
        return outcome, time.monotonic() - t0

    async def main() -> list[tuple[str, float]]:
        t0 = time.monotonic()
        return list(await asyncio.gather(*(one(a, t, t0) for a, t in logins)))

    return asyncio.run(main())


def test_failed_logins_from_one_address_are_answered_after_a_doubling_delay(creds: Credentials) -> None:
    # Five wrong passwords at once from one address: they are taken one at a time, each failure held back
    # 50, 100, 200, 400, 400 ms (doubling up to the maximum): the last answer comes after at least their sum.
    guard = LoginGuard(delay_ms=50, max_delay_ms=400)
    results = _guard_run(guard, [("10.0.0.1", b"\0alice\0wrong")] * 5, creds)
    assert [r[0] for r in results] == ["failed"] * 5
    assert max(r[1] for r in results) >= 0.05 + 0.1 + 0.2 + 0.4 + 0.4
    assert guard.failures("10.0.0.1") == 5
    assert [guard.delay_after(n) for n in (1, 2, 3, 4, 10, 1000)] == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]
    guard.close()


def test_a_login_clears_its_address_failures_and_other_addresses_are_not_held(creds: Credentials) -> None:
    guard = LoginGuard(delay_ms=300, max_delay_ms=300)
    results = _guard_run(guard, [("10.0.0.1", b"\0alice\0wrong"), ("10.0.0.2", b"\0alice\0alice-secret")], creds)
    assert results[0][0] == "failed" and results[0][1] >= 0.3
    assert results[1][0] == "ok" and guard.failures("10.0.0.2") == 0
    assert guard.failures("10.0.0.1") == 1
    assert _guard_run(guard, [("10.0.0.1", b"\0alice\0alice-secret")], creds)[0][0] == "ok"
    assert guard.failures("10.0.0.1") == 0
    guard.close()


def test_login_guard_table_is_bounded(creds: Credentials) -> None:
    # 300 addresses, 10 at a time: the table keeps the 50 most recent (those with a login under way are kept).
    guard = LoginGuard(delay_ms=0, max_delay_ms=0, max_addresses=50)
    for batch in range(30):
        _guard_run(guard, [(f"10.0.{i // 256}.{i % 256}", b"\0alice\0wrong") for i in range(batch * 10,
                                                                                            batch * 10 + 10)], creds)
        assert len(guard) <= 60
    assert len(guard) <= 50
    guard.close()
    assert guard.failures("10.0.1.43") == 1  # the most recent ones are kept (299 = 1 * 256 + 43)
