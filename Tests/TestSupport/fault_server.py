#!/usr/bin/env python3
"""A small HTTP/1.1 server that misbehaves on purpose, for syncagent's tests.

It serves files from --root. Faults are chosen per request by query
parameters, so one server covers every case:

  drop_after=N      close the connection after N body bytes
  drop_times=K      ... only for the first K requests of this path (default: always)
  stall_after=N     stop sending after N body bytes for stall=S seconds (then close)
  ignore_range=1    answer 200 with the whole file even to a Range request
  wrong_range=1     answer a Range request with 206 from a different offset
  no_content_range=1  answer a Range request with 206 but no Content-Range
  etag_changes=1    a new ETag on every request (If-Range never matches)
  always_416=1      answer every Range request with 416
  fail_status=C     answer status C (e.g. 503) ...
  fail_times=K      ... for the first K requests of this path (default: always)
  retry_after=S     ... with Retry-After: S
  rate=B            send at most B bytes per second

Every request is appended to --log as one line:
  METHOD PATH STATUS RANGE BYTES_SENT
so tests can count requests and bytes sent.
"""
import argparse
import os
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

counts = {}
counts_lock = threading.Lock()
log_lock = threading.Lock()


def next_count(path):
    with counts_lock:
        counts[path] = counts.get(path, 0) + 1
        return counts[path]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def record(self, status, range_header, sent):
        with log_lock, open(self.server.log_path, "a") as log:
            log.write(f"{self.command} {self.path} {status} {range_header or '-'} {sent}\n")

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        number = next_count(url.path)
        path = os.path.join(self.server.root, url.path.lstrip("/"))
        range_header = self.headers.get("Range")

        def within(times_key):
            return times_key not in query or number <= int(query[times_key])

        if "fail_status" in query and within("fail_times"):
            status = int(query["fail_status"])
            body = f"failure {status} on purpose\n".encode()
            self.send_response(status)
            if "retry_after" in query:
                self.send_header("Retry-After", query["retry_after"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.record(status, range_header, len(body))
            return

        if not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.record(404, range_header, 0)
            return

        size = os.path.getsize(path)
        stat = os.stat(path)
        etag = f'"{stat.st_ino:x}-{size:x}"'
        if query.get("etag_changes"):
            etag = f'"{stat.st_ino:x}-{size:x}-{number}"'

        start = 0
        status = 200
        if range_header and range_header.startswith("bytes=") and not query.get("ignore_range"):
            if_range = self.headers.get("If-Range")
            if if_range is None or if_range == etag:
                first = range_header[len("bytes="):].split("-")[0]
                start = int(first) if first else 0
                status = 206
                if query.get("always_416") or start >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.send_header("ETag", etag)
                    self.end_headers()
                    self.record(416, range_header, 0)
                    return

        body_start = start
        if status == 206 and query.get("wrong_range"):
            body_start = max(0, start - 1000)
        length = size - body_start

        self.send_response(status)
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", self.date_time_string(stat.st_mtime))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(length))
        if status == 206 and not query.get("no_content_range"):
            self.send_header("Content-Range", f"bytes {body_start}-{size - 1}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            self.record(status, range_header, 0)
            return

        drop_after = int(query["drop_after"]) if "drop_after" in query and within("drop_times") else None
        stall_after = int(query["stall_after"]) if "stall_after" in query else None
        rate = int(query["rate"]) if "rate" in query else None
        sent = 0
        began = time.monotonic()
        try:
            with open(path, "rb") as source:
                source.seek(body_start)
                while sent < length:
                    chunk = source.read(min(64 * 1024, length - sent))
                    if drop_after is not None:
                        chunk = chunk[: max(0, drop_after - sent)]
                    if stall_after is not None:
                        chunk = chunk[: max(0, stall_after - sent)]
                    if chunk:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        sent += len(chunk)
                    if drop_after is not None and sent >= drop_after:
                        self.connection.shutdown(socket.SHUT_RDWR)
                        break
                    if stall_after is not None and sent >= stall_after:
                        # Logged now: the test may read the log before the stall ends.
                        self.record(status, range_header, sent)
                        time.sleep(float(query.get("stall", "30")))
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if rate:
                        ahead = sent / rate - (time.monotonic() - began)
                        if ahead > 0:
                            time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = drop_after is not None or stall_after is not None
        self.record(status, range_header, sent)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--log", required=True)
    options = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
    server.daemon_threads = True
    server.root = options.root
    server.log_path = options.log
    server.serve_forever()


if __name__ == "__main__":
    main()
