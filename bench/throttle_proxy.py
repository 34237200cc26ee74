#!/usr/bin/env python3
"""A TCP proxy that limits the speed of EACH connection, for make bench.

  python3 bench/throttle_proxy.py --listen-port L --target-host 127.0.0.1 \
      --target-port T --rate BYTES_PER_SECOND [--down-rate BYTES_PER_SECOND] \
      [--delay-ms MS]

Every connection accepted on L (127.0.0.1 unless --listen-host) gets its own
connection to T and its own token buckets: client->server (uploads) at --rate,
server->client at --down-rate (--rate unless given; 0 means unlimited). So N
parallel connections get N times the rate in total, as behind a server or a
link that limits each TCP connection, and a client that opens more connections
goes faster. There is no limit on the number of connections.

--delay-ms holds every byte that long in each direction before it is passed
on (pipelined, so it costs latency, not throughput), and opens the
connection to T two delays after accepting one, as a TCP handshake across
the link would take: a link of 2 × MS round trip, for kernels without
`sch_netem` (this machine's has none).

The proxy reads no faster than the rate allows, so TCP's flow control holds
the sender back; the socket buffers on the proxy's side are kept small
(--socket-buffer) so a sender is at most that far ahead of what was
forwarded. Reads are of up to 64 KiB (less for slow rates) to keep CPU low.
Half-closes are forwarded. Standard library only; stops cleanly (exit 0) on
SIGTERM or SIGINT, closing every connection.
"""
import argparse
import asyncio
import signal
import socket
import sys
import time

MAX_READ = 64 * 1024


class Bucket:
    """A token bucket: take(n) waits until n bytes fit in the rate."""

    def __init__(self, rate: float):
        self.rate = rate
        # At most 1/20 s of budget at once, so the pace is smooth at any rate.
        self.read_size = MAX_READ if rate <= 0 else int(min(MAX_READ, max(1024, rate / 20)))
        self.burst = self.read_size
        self.tokens = float(self.burst)
        self.stamp = time.monotonic()

    async def take(self, n: int) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= n
        if self.tokens < 0:
            await asyncio.sleep(-self.tokens / self.rate)


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bucket: Bucket, delay: float) -> None:
    """Passes what `reader` reads to `writer` at the bucket's rate, each piece
    `delay` seconds after it was read (a queue, so pieces in flight overlap)."""
    in_flight: asyncio.Queue = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await in_flight.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                if writer.can_write_eof():
                    writer.write_eof()  # the half-close, forwarded
                return
            writer.write(data)
            await writer.drain()

    delivering = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(bucket.read_size)
            await bucket.take(len(data))
            in_flight.put_nowait((time.monotonic() + delay, data or None))
            if not data:
                break
            # Bounded: a sender may be at most a second's worth of reads ahead.
            while in_flight.qsize() > 1024 and not delivering.done():
                await asyncio.sleep(delay or 0.001)
        await delivering
    except (ConnectionError, OSError):
        writer.close()  # the other side's pump then ends too
    finally:
        delivering.cancel()


class Proxy:
    def __init__(self, args):
        self.args = args
        self.tasks = set()
        self.writers = set()

    def set_buffers(self, sock: socket.socket) -> None:
        size = self.args.socket_buffer
        if size > 0 and sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)

    async def handle(self, client_reader, client_writer) -> None:
        task = asyncio.current_task()
        self.tasks.add(task)
        self.writers.add(client_writer)
        server_writer = None
        try:
            self.set_buffers(client_writer.get_extra_info("socket"))
            delay = self.args.delay_ms / 1000
            await asyncio.sleep(2 * delay)
            try:
                server_reader, server_writer = await asyncio.open_connection(
                    self.args.target_host, self.args.target_port, limit=MAX_READ)
            except OSError as error:
                print(f"throttle_proxy: cannot reach {self.args.target_host}:{self.args.target_port}: {error}",
                      file=sys.stderr)
                return
            self.writers.add(server_writer)
            self.set_buffers(server_writer.get_extra_info("socket"))
            up = Bucket(self.args.rate)
            down = Bucket(self.args.rate if self.args.down_rate is None else self.args.down_rate)
            await asyncio.gather(pump(client_reader, server_writer, up, delay),
                                 pump(server_reader, client_writer, down, delay))
        except asyncio.CancelledError:
            pass
        finally:
            for writer in (client_writer, server_writer):
                if writer is not None:
                    writer.close()
                    self.writers.discard(writer)
            self.tasks.discard(task)

    async def run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        # Accepted sockets inherit the listening socket's buffer sizes, set
        # before listen(), so the window a client sees is small from the start.
        listener = socket.socket(socket.AF_INET6 if ":" in self.args.listen_host else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.set_buffers(listener)
        listener.bind((self.args.listen_host, self.args.listen_port))
        server = await asyncio.start_server(self.handle, sock=listener, limit=MAX_READ, backlog=1024)
        await stop.wait()
        server.close()
        for writer in list(self.writers):
            writer.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await server.wait_closed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen-host", default="127.0.0.1")
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--target-host", default="127.0.0.1")
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True,
                        help="bytes per second of each connection, client->server (0: unlimited)")
    parser.add_argument("--down-rate", type=float,
                        help="bytes per second of each connection, server->client (default: --rate)")
    parser.add_argument("--socket-buffer", type=int, default=256 * 1024,
                        help="SO_RCVBUF/SO_SNDBUF of the proxy's sockets (0: the kernel's autotuning)")
    parser.add_argument("--delay-ms", type=float, default=0,
                        help="one-way delay of the link, each direction (a round trip of twice it)")
    args = parser.parse_args()
    asyncio.run(Proxy(args).run())


if __name__ == "__main__":
    main()
