"""Spark Connect sessions: what :mod:`pylog.spark`'s helpers do when the session is a Connect client.

A Spark Connect client (``SparkSession.builder.remote("sc://host:port")``) has no JVM and no SparkContext: the
Connect server plans and runs every query, so the server's classpath decides whether ``format("pylog")`` is
the JVM reader, and the server's Python workers run the Python source (writes, streams through the JVM
provider's hand-over to ``pylog-python``). This module asks the server what it has and, when it lacks the JVM
reader, adds the reader's jar to the client's own server-side session as an artifact (``addArtifacts``: Spark
loads a session's jars in that session's class loader, where the data source lookup finds the provider).

Invariants:
- Nothing here imports PySpark's Connect client but :func:`remote_session`, after :func:`require_client`
  found its dependencies: a session is recognised by the class of the client's module when that is loaded
  already (it is, once a Connect session exists). Importing the client without its dependencies (grpc, ...)
  from ``python -c`` exits the process: PySpark takes that for a doctest run.
- :func:`has_jvm_reader` runs one SQL expression on one row on the server (``reflect`` of Spark's own
  ``Utils.classIsLoadable`` in the session's class loader), reading no file; a server that refuses it answers
  None (not known), never a guess.
- :func:`add_jvm_reader` adds the jar only to a session whose server runs the pyspark version the jar was
  compiled against (the jar's name carries it: :mod:`pylog.jvm`), and says why when it does not.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import warnings
from typing import TYPE_CHECKING, Iterable, Mapping

from ..errors import SparkConnectUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["is_connect", "has_jvm_reader", "add_jvm_reader", "require_client", "remote_session",
           "LOCAL_SERVER_SETTINGS"]

#: Whether the server's session can load a class (the JVM reader's provider, pylog.jvm.PROVIDER): 'true'/'false'.
_PROBE = "SELECT reflect('org.apache.spark.util.Utils', 'classIsLoadable', '{cls}') AS loadable"
#: A local Connect server started by ``builder.remote("local[...]")`` listens on every interface unless told
#: otherwise; pylog's helper keeps it on the loopback interface (the client connects to localhost anyway).
LOCAL_SERVER_SETTINGS = {"spark.connect.grpc.binding.address": "127.0.0.1"}
#: The modules PySpark's Connect client needs (``pip install "pyspark[connect]"``; pylog's ``spark`` extra).
_CLIENT_MODULES = ("grpc", "grpc_status", "google.rpc", "zstandard", "pandas", "pyarrow")


def is_connect(spark: "SparkSession") -> bool:
    """Whether ``spark`` is a Spark Connect client session (no JVM in this process)."""
    client = sys.modules.get("pyspark.sql.connect.session")
    return client is not None and isinstance(spark, client.SparkSession)


def require_client() -> None:
    """Checks that PySpark's Connect client can be imported (before anything imports it).

    :raises SparkConnectUnavailableError: naming its missing dependencies and the install that brings them.
    """
    missing = []
    for name in _CLIENT_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package (google) is missing
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise SparkConnectUnavailableError(f"a Spark Connect session needs PySpark's Connect client, which lacks "
                                           f"{', '.join(missing)}: pip install 'pyspark[connect]' "
                                           "(pylog-embedded[spark] includes it)")


def has_jvm_reader(spark: "SparkSession", provider: str) -> bool | None:
    """Whether the Connect server can load ``provider`` (the JVM reader) in ``spark``'s session: from its
    classpath (``--jars``, ``spark.jars``) or a jar the session added. None when the server refused to say
    (``reflect`` disabled, an error)."""
    try:
        rows = spark.sql(_PROBE.format(cls=provider)).collect()
    except Exception:  # noqa: BLE001 - the client raises grpc's and PySpark's errors alike
        return None
    return rows[0][0] == "true" if rows else None


def add_jvm_reader(spark: "SparkSession", jar: str, provider: str) -> str | None:
    """Add the JVM reader's ``jar`` to ``spark``'s server-side session when the server lacks it; returns None
    when the session has the reader afterwards, else why not (for a warning).

    The jar is compiled against this client's pyspark; a server of another version is left alone.
    """
    if has_jvm_reader(spark, provider):
        return None
    server, client = spark.version, _pyspark_version()
    if server != client:
        return (f"the Spark Connect server runs Spark {server} and the JVM reader's jar here is built for pyspark "
                f"{client}; start the server with the jar `pylog spark-jar` prints on its own machine")
    spark.addArtifacts(jar)
    if not has_jvm_reader(spark, provider):
        return f"the Spark Connect server did not load the JVM reader's jar {jar} added to the session"
    return None


def _pyspark_version() -> str:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def remote_session(remote: str, app_name: str, settings: Mapping[str, str], given: Iterable[str]) -> "SparkSession":
    """A Connect session at ``remote`` (``pylog.spark.session(remote=...)``) with ``settings``, of which the
    keys ``given`` are the user's.

    A local server (``local[...]``) starts in this process with every setting (the jar in ``spark.jars``),
    bound to 127.0.0.1 unless ``settings`` say otherwise; PySpark then tries to set the same settings on the
    session and warns about each static one, which the server already has: those warnings are dropped. A
    remote server takes runtime SQL settings only: pylog's defaults that are not (the UI, ``spark.jars``: the
    jar goes as an artifact) are left out, the user's are passed on (PySpark warns about a static one).

    :raises SparkConnectUnavailableError: the Connect client's dependencies are missing.
    """
    require_client()
    from pyspark.sql import SparkSession

    local = remote.startswith("local")
    if local:
        wanted = {**LOCAL_SERVER_SETTINGS, **settings}
    else:
        user = set(given)
        wanted = {k: v for k, v in settings.items() if k in user or k.startswith("spark.sql.")}
    builder = SparkSession.builder.remote(remote).appName(app_name)
    for key, value in wanted.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        if local:
            warnings.filterwarnings("ignore", message="Failed to set spark[.]", category=UserWarning)
        return builder.getOrCreate()
