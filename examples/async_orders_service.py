"""An asyncio web service: HTTP handlers produce with pylog.aio, a background task consumes.

``POST /orders`` (a JSON body ``{"customer": ..., "amount": ...}``) is answered once the order is in the
``orders`` topic (``send_and_wait``: its partition and offset). A background task reads ``orders`` as
member of the group ``totals`` (``async for``) and keeps each customer's total, committing after each
batch; ``GET /totals`` returns them. A handler never blocks the event loop: ``await send()`` queues, and
the consumer's wait for new orders sleeps in pylog's own wake-ups, not in a polling loop.

Standard library only: the HTTP server is ``asyncio.start_server`` with a minimal HTTP/1.1 parser (no
framework). Run as written, the script starts the service on a free port, acts as its own client (40
orders from 4 customers, then GET /totals), prints what it got and stops:

Run:  python examples/async_orders_service.py [STORE_DIR]     (default ./pylog-data-async)
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pylog
from pylog.aio import AIOKafkaConsumer, AIOKafkaProducer


class Service:
    """The web handlers and the consumer task, sharing one producer and one table of totals."""

    def __init__(self, store: pylog.Store) -> None:
        self.store = store
        self.producer = AIOKafkaProducer(bootstrap_servers=store, acks=1,
                                         value_serializer=lambda v: json.dumps(v).encode())
        self.totals: dict[str, float] = {}
        self.consumed = 0
        self.changed = asyncio.Condition()

    # ---------------------------------------------------------------- HTTP

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            method, target, _ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            headers = dict(line.split(": ", 1) for line in request.decode("latin-1").split("\r\n")[1:] if ": " in line)
            body = await reader.readexactly(int(headers.get("Content-Length", "0")))
            status, reply = await self.route(method, target, body)
        except (ValueError, KeyError, asyncio.IncompleteReadError) as exc:
            status, reply = 400, {"error": str(exc)}
        data = json.dumps(reply).encode()
        writer.write(f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                     "Connection: close\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()

    async def route(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        if method == "POST" and target == "/orders":
            order = json.loads(body)
            if not isinstance(order.get("customer"), str) or not isinstance(order.get("amount"), (int, float)):
                return 400, {"error": "an order is {\"customer\": str, \"amount\": number}"}
            meta = await self.producer.send_and_wait("orders", order, key=order["customer"].encode())
            return 200, {"partition": meta.partition, "offset": meta.offset}
        if method == "GET" and target == "/totals":
            return 200, {"consumed": self.consumed, "totals": self.totals}
        return 404, {"error": f"no route {method} {target}"}

    # ---------------------------------------------------------------- background consumer

    async def consume(self) -> None:
        consumer = AIOKafkaConsumer("orders", bootstrap_servers=self.store, group_id="totals",
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    value_deserializer=json.loads)
        async with consumer:
            while True:
                batch = await consumer.getmany(timeout_ms=1000, max_records=100)
                for records in batch.values():
                    for rec in records:
                        customer = rec.value["customer"]
                        self.totals[customer] = self.totals.get(customer, 0) + rec.value["amount"]
                        self.consumed += 1
                if batch:
                    await consumer.commit()  # after processing: at-least-once
                    async with self.changed:
                        self.changed.notify_all()


async def http(port: int, method: str, target: str, payload: Any = None) -> Any:
    """A minimal HTTP client for the demo."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b"" if payload is None else json.dumps(payload).encode()
    writer.write(f"{method} {target} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body)
    await writer.drain()
    response = await reader.read()
    writer.close()
    return json.loads(response.split(b"\r\n\r\n", 1)[1])


async def run(path: str) -> int:
    with pylog.open(path) as store:
        if "orders" not in store:
            store.create_topic("orders", partitions=3)
        service = Service(store)
        await service.producer.start()
        consumer_task = asyncio.create_task(service.consume())
        server = await asyncio.start_server(service.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        print(f"serving on http://127.0.0.1:{port} (store {store.path})")
        already = sum(om.offset for om in store.committed_offsets("totals").values()) \
            if "totals" in store.consumer_groups() else 0

        replies = await asyncio.gather(*(http(port, "POST", "/orders", {"customer": f"c{i % 4}", "amount": i})
                                         for i in range(40)))
        print(f"POST /orders x40: e.g. {replies[0]}")
        async with service.changed:  # wait for the background consumer to catch up with the 40 orders
            await asyncio.wait_for(service.changed.wait_for(lambda: service.consumed >= 40), 30)
        totals = await http(port, "GET", "/totals")
        print(f"GET /totals: {totals}")
        print(f"orders before this run: {already}; consumed in this run: {service.consumed}")

        server.close()
        await server.wait_closed()
        consumer_task.cancel()
        try:
            await consumer_task
        except asyncio.CancelledError:
            pass
        await service.producer.stop()
        print("stopped")
    return 0


def main(path: str = "./pylog-data-async") -> int:
    return asyncio.run(run(path))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
