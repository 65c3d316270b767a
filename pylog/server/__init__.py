"""pylog serve: a Kafka wire-protocol server over a pylog store."""
