#!/usr/bin/env python3
"""A small HTTP/1.1 server that misbehaves on purpose, for syncagent's tests.

It serves files from --root. Faults are chosen per request by query
parameters, so one server covers every case:

  drop_after=N      close the connection after N body bytes
  drop_times=K      ... only for the first K requests of this path (default: always)
  drop_request=K    ... only for request K of this path
  stall_after=N     stop sending after N body bytes for stall=S seconds (then close)
  stall_request=K   ... only for request K of this path
  ignore_range=1    answer 200 with the whole file even to a Range request
  ignore_range_end=1  answer bytes=A-B with everything from A to the end of the file
  cap_range=N       answer a range with at most N bytes (an honest, shorter 206)
  wrong_range=1     answer a Range request with 206 from a different offset
  no_content_range=1  answer a Range request with 206 but no Content-Range
  etag_changes=1    a new ETag on every request (If-Range never matches)
  always_416=1      answer every Range request with 416
  fail_status=C     answer status C (e.g. 503) ...
  fail_times=K      ... for the first K requests of this path (default: always)
  fail_from=K       ... starting with request K of this path (default: 1)
  retry_after=S     ... with Retry-After: S
  rate=B            send at most B bytes per second
  set_cookie=NAME   answer with Set-Cookie: NAME=s3cr3t-NAME; Max-Age=3600; Path=/
  require_cookie=NAME  answer 401 unless the request sends that cookie
                    (the value never appears in a URL, so tests can look for it in output)
  partial_from=N    answer every GET, ranged or not, with 206 and the bytes from N
  content_length=N  send this Content-Length (absurd ones too), then the body as it is
  header=NAME:VALUE add a hostile header (repeatable); a NAME of a header the server
                    sends anyway (Content-Range, ETag …) replaces it
  redirect_to=URL   answer 302 with Location: URL
  forbid_header=NAME  answer 400 if the request carries that header (a leaked credential)
  not_http=1        answer with a status line that is not HTTP/1.x or 2 (HTTP/1.2)
  limit_concurrent=N  answer 503 to a GET while N other GETs (of any path) are being answered
  no_accept_ranges=1  send no Accept-Ranges header (Range is still honoured)
  not_modified=ETAG answer 304 with ETag: ETAG to any conditional request
                    (If-None-Match or If-Modified-Since), whatever it asked

Any method with a request body (PUT, POST, PATCH, …) is read in chunks and
answered with a JSON description of what arrived: method, path, size,
sha256, content type, cookies, and for multipart/form-data every part (name,
filename, size, sha256, or value for small text fields). The same JSON goes
as one line into --received, so tests can check uploads whose answer the
agent does not keep. fail_status/fail_times, set_cookie and require_cookie
apply there too, and drop_after=N closes the connection after reading N
body bytes.

Every request is appended to --log as one line:
  METHOD PATH STATUS RANGE BYTES_SENT
so tests can count requests and bytes sent.
"""
import email.parser
import email.policy
import hashlib
import json
import argparse
import os
import select
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

counts = {}
counts_lock = threading.Lock()
in_flight = {}
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

    def end_headers(self):
        # Hostile headers the response does not send anyway.
        for name, value in getattr(self, "extra_headers", []):
            super().send_header(name, value)
        self.extra_headers = []
        super().end_headers()

    def do_HEAD(self):
        self.do_GET()

    def send_header(self, keyword, value):
        overrides = {name.lower(): v for name, v in getattr(self, "extra_headers", [])}
        if keyword.lower() == "content-length" and "content_length" in getattr(self, "query", {}):
            value = self.query["content_length"]
        if keyword.lower() in overrides:
            value = overrides.pop(keyword.lower())
            self.extra_headers = [(n, v) for n, v in self.extra_headers if n.lower() != keyword.lower()]
        super().send_header(keyword, value)
        # Every response carries the cookie the query asks for.
        if keyword == "Content-Length" and "set_cookie" in getattr(self, "query", {}):
            name = self.query["set_cookie"]
            super().send_header("Set-Cookie", f"{name}=s3cr3t-{name}; Max-Age=3600; Path=/")

    def parse_query(self):
        url = urllib.parse.urlsplit(self.path)
        parsed = urllib.parse.parse_qs(url.query)
        self.query = {k: v[-1] for k, v in parsed.items()}
        self.extra_headers = [h.split(":", 1) for h in parsed.get("header", []) if ":" in h]
        self.number = next_count(url.path)
        return url

    def within(self, times_key):
        return times_key not in self.query or self.number <= int(self.query[times_key])

    def refused(self, range_header=None):
        """Answers an injected failure or a missing cookie; True if it did."""
        query = self.query
        status = None
        if "fail_status" in query and self.within("fail_times") and self.number >= int(query.get("fail_from", 1)):
            status = int(query["fail_status"])
        elif "require_cookie" in query and \
                f"{query['require_cookie']}=s3cr3t-{query['require_cookie']}" not in (self.headers.get("Cookie") or ""):
            status = 401
        if status is None:
            return False
        # Read (and drop) a request body first: closing on unread bytes resets
        # the connection, and the client might never see this answer.
        left = int(self.headers.get("Content-Length") or 0)
        while left > 0:
            chunk = self.rfile.read(min(256 * 1024, left))
            if not chunk:
                break
            left -= len(chunk)
        body = f"failure {status} on purpose\n".encode()
        self.send_response(status)
        if "retry_after" in query:
            self.send_header("Retry-After", query["retry_after"])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.record(status, range_header, len(body))
        # A request body we did not read must not be taken for the next request.
        self.close_connection = True
        return True

    def do_PUT(self):
        self.receive()

    do_POST = do_PATCH = do_DELETE = do_PUT

    def receive(self):
        url = self.parse_query()
        if self.refused():
            return
        length = int(self.headers.get("Content-Length") or 0)
        drop_after = int(self.query["drop_after"]) if "drop_after" in self.query and self.within("drop_times") else None
        content_type = self.headers.get("Content-Type") or ""
        multipart = content_type.startswith("multipart/form-data")
        digest = hashlib.sha256()
        kept = bytearray()
        got = 0
        while got < length:
            chunk = self.rfile.read(min(256 * 1024, length - got))
            if not chunk:
                break
            got += len(chunk)
            digest.update(chunk)
            if multipart:
                kept += chunk
            if drop_after is not None and got >= drop_after:
                self.record(0, None, 0)
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
        description = {
            "method": self.command, "path": url.path, "size": got, "sha256": digest.hexdigest(),
            "content_type": content_type, "cookie": self.headers.get("Cookie"),
        }
        if multipart:
            message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + bytes(kept))
            parts = []
            for part in message.iter_parts():
                payload = part.get_payload(decode=True) or b""
                entry = {"name": part.get_param("name", header="content-disposition"),
                         "filename": part.get_filename(), "size": len(payload),
                         "sha256": hashlib.sha256(payload).hexdigest()}
                if part.get_filename() is None:
                    entry["value"] = payload.decode("utf-8", "replace")
                parts.append(entry)
            description["parts"] = parts
        line = json.dumps(description, sort_keys=True)
        with log_lock, open(self.server.received_path, "a") as received:
            received.write(line + "\n")
        body = (line + "\n").encode()
        status = 201 if self.command == "PUT" else 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Received-Bytes", str(got))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.record(status, None, len(body))

    def do_GET(self):
        url = self.parse_query()
        query = self.query
        path = os.path.join(self.server.root, url.path.lstrip("/"))
        range_header = self.headers.get("Range")

        if self.refused(range_header):
            return
        with counts_lock:
            in_flight["GET"] = in_flight.get("GET", 0) + 1
            crowded = "limit_concurrent" in query and in_flight["GET"] > int(query["limit_concurrent"])
        try:
            if crowded:
                body = b"too many connections\n"
                self.send_response(503)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.record(503, range_header, len(body))
                return
            self.answer_get(url, path, range_header)
        finally:
            with counts_lock:
                in_flight["GET"] -= 1

    def answer_get(self, url, path, range_header):
        query = self.query
        within = self.within
        number = self.number

        if "forbid_header" in query and self.headers.get(query["forbid_header"]) is not None:
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.record(400, range_header, 0)
            return
        if "redirect_to" in query:
            self.send_response(302)
            self.send_header("Location", query["redirect_to"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.record(302, range_header, 0)
            return
        if "not_modified" in query and (self.headers.get("If-None-Match") or self.headers.get("If-Modified-Since")):
            self.send_response(304)
            self.send_header("ETag", query["not_modified"])
            self.end_headers()
            self.record(304, range_header, 0)
            return
        if query.get("not_http"):
            self.wfile.write(b"HTTP/1.2 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            self.close_connection = True
            self.record(200, range_header, 5)
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
        end = None
        status = 200
        if range_header and range_header.startswith("bytes=") and not query.get("ignore_range"):
            if_range = self.headers.get("If-Range")
            if if_range is None or if_range == etag:
                first, _, last = range_header[len("bytes="):].partition("-")
                start = int(first) if first else 0
                if last and not query.get("ignore_range_end"):
                    end = int(last) + 1
                if "cap_range" in query:
                    end = min(end if end is not None else size, start + int(query["cap_range"]))
                status = 206
                if query.get("always_416") or start >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.send_header("ETag", etag)
                    self.end_headers()
                    self.record(416, range_header, 0)
                    return

        if "partial_from" in query:
            start = min(int(query["partial_from"]), size)
            status = 206
        body_start = start
        if status == 206 and query.get("wrong_range"):
            body_start = max(0, start - 1000)
        end = size if end is None else min(end, size)
        length = end - body_start

        self.send_response(status)
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", self.date_time_string(stat.st_mtime))
        if not query.get("no_accept_ranges"):
            self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(length))
        if status == 206 and not query.get("no_content_range"):
            self.send_header("Content-Range", f"bytes {body_start}-{end - 1}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            self.record(status, range_header, 0)
            return

        drop_after = int(query["drop_after"]) if "drop_after" in query and within("drop_times") else None
        if "drop_request" in query and number != int(query["drop_request"]):
            drop_after = None
        stall_after = int(query["stall_after"]) if "stall_after" in query else None
        if "stall_request" in query and number != int(query["stall_request"]):
            stall_after = None
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
                        # Waits on the socket, not in sleep: a client that hangs up
                        # ends this answer at once (limit_concurrent counts it no longer).
                        if ahead > 0 and select.select([self.connection], [], [], ahead)[0]:
                            if not self.connection.recv(1, socket.MSG_PEEK):
                                break
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = drop_after is not None or stall_after is not None
        self.record(status, range_header, sent)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--root", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--received", required=True)
    options = parser.parse_args()
    server = ThreadingHTTPServer((options.host, options.port), Handler)
    server.daemon_threads = True
    server.root = options.root
    server.log_path = options.log
    server.received_path = options.received
    server.serve_forever()


if __name__ == "__main__":
    main()
