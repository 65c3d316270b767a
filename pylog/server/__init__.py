"""``pylog serve``: Kafka's wire protocol over a pylog store, so kafka-python, aiokafka, confluent-kafka (and
any other Kafka client) produce to and consume from the same files pylog's own clients, CLI and Spark source
use. ``pylog.serve(store, port=0)`` embeds one in a background thread; ``pylog serve STORE`` runs one in the
foreground. docs/SERVER.md is the user's guide; docs/ARCHITECTURE.md places the modules.
"""

from .server import Server, ServerConfig, serve

__all__ = ["Server", "ServerConfig", "serve"]
