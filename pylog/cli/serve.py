"""``pylog serve STORE``: serve a store over Kafka's wire protocol until SIGTERM or Ctrl-C.

Any Kafka client (kafka-python, aiokafka, confluent-kafka, the Java client, kcat ...) then produces to and
consumes from the store with ``bootstrap_servers="HOST:PORT"``; pylog's own clients, this command line and
the Spark source keep working on the same directory at the same time. The store is created when the
directory is missing or empty; a directory holding other files is refused. Listens on 127.0.0.1:9092 unless
told otherwise; before listening on another address, enable TLS (``--tls-cert`` / ``--tls-key``) and SASL
(``--sasl-users``). docs/SERVER.md has the details.

A clean stop (SIGTERM, SIGINT) answers the requests under way, then closes the store: everything
acknowledged is fsynced before the command exits.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
from typing import Any, Callable, TextIO

from .. import prometheus
from ..errors import CommandError
from .base import ExitCode, check_store_path, non_negative, positive

__all__ = ["register"]


#: The resource limits of the server (docs/SERVER.md "Options"): flag, type, metavar, help. Unset, the
#: ServerConfig default applies (named in the help).
_LIMITS: list[tuple[str, Callable[[str], Any], str, str]] = [
    ("--queued-max-request-bytes", positive, "N", "bytes all connections' requests and fetch answers may hold "
     "(Kafka's queued.max.request.bytes; default 128 MiB, at least --max-request-bytes)"),
    ("--request-receive-timeout-ms", non_negative, "MS", "close a connection whose request is not whole this "
     "long after its first byte (default 30000, 0: never)"),
    ("--response-send-timeout-ms", non_negative, "MS", "close a connection that reads none of its answer for "
     "this long (default 30000, 0: never)"),
    ("--max-connections", positive, "N", "connections beyond are closed at accept (Kafka's max.connections; "
     "default 1000)"),
    ("--max-connections-per-ip", positive, "N", "connections from one address beyond are closed at accept "
     "(Kafka's max.connections.per.ip; default 500)"),
    ("--max-request-items", positive, "N", "most topics, partitions, groups ... one request may name (default "
     "50000)"),
    ("--max-topics", positive, "N", "clients create no topic beyond this many in the store (default 10000)"),
    ("--max-partitions", positive, "N", "clients create no partition beyond this many in the store (default "
     "100000)"),
    ("--controller-mutation-rate", float, "N", "partitions clients may create or delete per second, in bursts of "
     "10 s worth (default 1000)"),
    ("--group-max-size", positive, "N", "members per consumer group (Kafka's group.max.size; default 1000)"),
    ("--max-groups", positive, "N", "consumer groups the coordinator holds at once (default 10000)"),
    ("--max-group-member-bytes", positive, "N", "bytes the members of all groups may hold: subscriptions and "
     "assignments (default 268435456)"),
    ("--offset-metadata-max-bytes", non_negative, "N", "longest metadata of a committed offset (Kafka's "
     "offset.metadata.max.bytes; default 4096)"),
    ("--auto-create-topics-per-request", positive, "N", "most topics one Metadata request may auto-create "
     "(default 100)"),
    ("--group-commit-syncfs-partitions", non_negative, "N", "acks=all: from this many partitions waiting for an "
     "fsync on, make them durable with one syncfs of their file system (default 0: an fdatasync each; 8 suits a "
     "store on a file system of its own)"),
    ("--socket-receive-buffer-bytes", int, "N", "kernel receive buffer of each connection (Kafka's "
     "socket.receive.buffer.bytes; default 102400, -1: the system's)"),
]


def register(sub: Any) -> None:
    s = sub.add_parser("serve", help="serve the store over Kafka's wire protocol (Kafka clients use it)",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("store")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=non_negative, default=9092, help="port (default 9092; 0 picks a free one)")
    s.add_argument("--advertised-host", metavar="HOST", help="host name clients are told to connect to (default: "
                                                             "the --host address; 127.0.0.1 for 0.0.0.0)")
    s.add_argument("--advertised-port", type=positive, metavar="PORT", help="port clients are told (default: --port)")
    s.add_argument("--no-auto-create-topics", action="store_true",
                   help="a Metadata request naming a missing topic gets UNKNOWN_TOPIC_OR_PARTITION instead of "
                        "creating it")
    s.add_argument("--num-partitions", type=positive, metavar="N",
                   help="partitions of a topic created without a count: auto-created, or by CreateTopics with -1 "
                        "(Kafka's num.partitions; default: the store's num.partitions setting, 1)")
    s.add_argument("--max-request-bytes", type=positive, default=100 * 1024 * 1024, metavar="N",
                   help="largest request accepted (default 100 MiB); larger ones close the connection")
    s.add_argument("--max-partitions-per-topic", type=positive, default=10_000, metavar="N",
                   help="most partitions CreateTopics / CreatePartitions give a topic (default 10000)")
    s.add_argument("--connections-max-idle-ms", type=non_negative, default=600_000, metavar="MS",
                   help="close a connection idle this long (Kafka's connections.max.idle.ms; default 600000, 0: never)")
    s.add_argument("--max-open-descriptors", type=non_negative, default=0, metavar="N",
                   help="file descriptors the store's partitions may hold (default 0: half of `ulimit -n`)")
    s.add_argument("--transactional-id-expiration-ms", type=positive, metavar="MS",
                   help="forget a transactional id whose last transaction ended this long ago (Kafka's "
                        "transactional.id.expiration.ms; default: the store's, 604800000, 7 days)")
    s.add_argument("--remote-storage-location", metavar="s3://BUCKET/PREFIX",
                   help="tiered storage: ship the topics with remote.storage.enable there and serve their shipped "
                        "offsets from it (the store's remote.storage.location; credentials, region: boto3's chain)")
    s.add_argument("--remote-storage-endpoint-url", metavar="URL",
                   help="the S3 API to use (remote.storage.endpoint.url; default: AWS_ENDPOINT_URL, else AWS's)")
    s.add_argument("--connection-failed-authentication-delay-ms", type=non_negative, default=100, metavar="MS",
                   help="answer a failed SASL login after this delay, doubled per further failure from the address "
                        "(Kafka's connection.failed.authentication.delay.ms; default 100)")
    s.add_argument("--connection-failed-authentication-delay-max-ms", type=non_negative, default=5000, metavar="MS",
                   help="the longest that delay grows to (default 5000)")
    for flag, kind, metavar, text in _LIMITS:
        s.add_argument(flag, type=kind, metavar=metavar, help=text)
    s.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate chain")
    s.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    s.add_argument("--tls-ca", metavar="PEM", help="CA bundle that client certificates must chain to")
    s.add_argument("--tls-require-client-cert", action="store_true", help="refuse clients without a certificate")
    s.add_argument("--sasl-users", metavar="JSON", help="require SASL: the users file (docs/SERVER.md)")
    s.add_argument("--sasl-mechanisms", default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", metavar="LIST",
                   help="comma-separated SASL mechanisms offered (default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512)")
    s.add_argument("--authorizer", action="store_true",
                   help="check every request against the store's ACLs (Kafka's authorizer; docs/SERVER.md)")
    s.add_argument("--super-users", metavar="LIST", help="with --authorizer: principals allowed everything, "
                   "Kafka's super.users (e.g. 'User:admin;User:ops')")
    s.add_argument("--allow-everyone-if-no-acl-found", action="store_true",
                   help="with --authorizer: a resource no ACL names is open to everyone (Kafka's "
                   "allow.everyone.if.no.acl.found; default: refused)")
    s.add_argument("--quotas", metavar="JSON", help="client quotas: a JSON file mapping Kafka entities "
                   "('user=alice', 'client-id=etl', both, '<default>') to producer_byte_rate, consumer_byte_rate, "
                   "request_percentage (docs/SERVER.md)")
    s.add_argument("--metrics-port", type=non_negative, metavar="PORT",
                   help="also serve Prometheus metrics on http://METRICS-HOST:PORT/metrics and a /health probe "
                        "(needs the metrics extra; docs/OPERATIONS.md lists the metrics)")
    s.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="address of the metrics endpoint (default 127.0.0.1)")
    s.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="what the server logs to stderr (default INFO)")
    s.set_defaults(run=_serve)


def _serve(args: argparse.Namespace, out: TextIO) -> ExitCode:
    # Imported here: the other commands do not pay for the server (asyncio, the codec) at start-up.
    from ..server import Server, auth

    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    options: dict[str, Any] = {
        "host": args.host, "port": args.port, "advertised_host": args.advertised_host,
        "advertised_port": args.advertised_port, "auto_create_topics": not args.no_auto_create_topics,
        "max_request_bytes": args.max_request_bytes, "max_partitions_per_topic": args.max_partitions_per_topic,
        "connections_max_idle_ms": args.connections_max_idle_ms, "num_partitions": args.num_partitions,
        "authorizer": args.authorizer,
        "super_users": args.super_users, "allow_everyone_if_no_acl_found": args.allow_everyone_if_no_acl_found,
        "connection_failed_authentication_delay_ms": args.connection_failed_authentication_delay_ms,
        "connection_failed_authentication_delay_max_ms": args.connection_failed_authentication_delay_max_ms,
    }
    options["max_open_descriptors"] = args.max_open_descriptors
    if args.transactional_id_expiration_ms is not None:
        options["transactional_id_expiration_ms"] = args.transactional_id_expiration_ms
    for name in ("remote_storage_location", "remote_storage_endpoint_url"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    for flag, *_ in _LIMITS:  # given ones only: the defaults are ServerConfig's
        name = flag[2:].replace("-", "_")
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise CommandError("--tls-cert and --tls-key go together")
        options["ssl_context"] = auth.make_server_ssl_context(args.tls_cert, args.tls_key, cafile=args.tls_ca,
                                                              require_client_cert=args.tls_require_client_cert)
    elif args.tls_ca or args.tls_require_client_cert:
        raise CommandError("--tls-ca and --tls-require-client-cert need --tls-cert and --tls-key")
    if args.sasl_users:
        mechanisms = [m.strip() for m in args.sasl_mechanisms.split(",") if m.strip()]
        options["sasl_credentials"] = auth.Credentials.load(args.sasl_users)
        options["sasl_mechanisms"] = mechanisms
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.sasl_users:
        logging.getLogger("pylog.server").warning(
            "pylog serve: listening on %s without SASL: anyone who reaches this address can read and write the "
            "store (see --sasl-users and --tls-cert)", args.host)
    if args.quotas:
        options["quotas"] = _load_quotas(args.quotas)
    if args.metrics_port is not None:
        prometheus.require()  # before anything starts: a missing extra is a clear error, not a half-started server
    check_store_path(args.store, create=True)
    _return_large_buffers_to_the_os()
    server = Server(args.store, **options)
    endpoint = None
    if args.metrics_port is not None:
        endpoint = prometheus.start_http_server(prometheus.registry(server=server), args.metrics_port,
                                                args.metrics_host, prometheus.server_health(server))
        logging.getLogger("pylog.server").info("pylog serve: metrics on %s", endpoint.url)
    _freeze_start_up_objects()
    try:
        server.serve_forever(handle_signals=True)
    finally:
        if endpoint is not None:
            endpoint.close()
    return ExitCode.OK


#: glibc's ``M_MMAP_THRESHOLD`` (mallopt), and the value set: allocations from 128 KiB up get pages of their own.
_M_MMAP_THRESHOLD, _MMAP_FROM = -3, 128 * 1024


def _return_large_buffers_to_the_os() -> None:
    """Have glibc map every allocation of 128 KiB or more on its own and unmap it when freed. By default the
    threshold grows to 32 MiB after the first large free, and the request frames and fetch answers the server
    frees then stay in the heaps of the threads that built them: ~50 MiB more resident memory than the server
    holds, after a burst of large fetches (benchmarks/bench_hostile.py). Only for this process (the CLI); a no-op
    where the C library is not glibc."""
    import ctypes  # here, as the server: the other commands do not load it at start-up

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_FROM)
    except (OSError, AttributeError):
        pass


def _freeze_start_up_objects() -> None:
    """Move every object alive now (the modules, classes and functions imported at start-up, the server's
    configuration: ~45,000 objects) out of the cyclic GC's reach for the life of the process (``gc.freeze``),
    after one collection of the start-up's garbage. They live as long as the process anyway, and each full
    collection would walk them all again: 10-25 ms of the event loop's time on a loaded 2-core machine, a pause
    for every connection, and set off whenever enough objects have survived, so by when the process started and
    what it imported (benchmarks/bench_metrics.py saw one land in a timed round of the metrics-on server and not
    in the metrics-off one: a 2-4% difference that was no cost of the metrics). A full collection then walks
    only what the server made since. Only for this process (the CLI): an application embedding the server
    manages its own heap."""
    gc.collect()
    gc.freeze()
    logging.getLogger("pylog.server").debug("pylog serve: %d start-up objects frozen out of the cyclic GC's reach",
                                            gc.get_freeze_count())


def _load_quotas(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise CommandError(f"--quotas {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise CommandError(f"--quotas {path}: expected a JSON object of entities")
    return doc
