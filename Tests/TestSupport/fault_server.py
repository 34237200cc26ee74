#!/usr/bin/env python3
"""A small HTTP/1.1 server that misbehaves on purpose, for syncagent's tests.

It serves files from --root. Faults are chosen per request by query
parameters, so one server covers every case:

  drop_after=N      close the connection after N body bytes
  drop_times=K      ... only for the first K requests of this path (default: always)
  drop_request=K    ... only for request K of this path
  stall_after=N     stop sending after N body bytes for stall=S seconds (then close)
  stall_request=K   ... only for request K of this path
  hold_after=N      stop sending after N body bytes until the file ROOT/NAME named by
  release=NAME      release exists (at most 120 s), then send the rest: a test acts
                    mid-body, however slow the machine, and then lets the body end
  ignore_range=1    answer 200 with the whole file even to a Range request
  ignore_range_from=K  ... from request K of this path on
  ignore_range_end=1  answer bytes=A-B with everything from A to the end of the file
  cap_range=N       answer a range with at most N bytes (an honest, shorter 206)
  wrong_range=1     answer a Range request with 206 from a different offset
  corrupt_request=K  send the body of request K of this path with every byte inverted (headers intact)
  early_range=N     answer a Range request with the range it asked for in Content-Range, but a body
                    (and Content-Length) starting N bytes earlier
  range_no_length=1  answer a Range request without Content-Length (the body ends at the close)
  no_content_range=1  answer a Range request with 206 but no Content-Range
  etag_changes=1    a new ETag on every request (If-Range never matches)
  etag_changes_from=K  another ETag from request K of this path on (the file changed under a download)
  ignore_if_range=1  answer a Range request with 206 even when If-Range names another validator
  no_validators_206=1  send no ETag or Last-Modified with a 206
  no_etag=1         send no ETag at all (Last-Modified is the only validator)
  no_last_modified=1  send no Last-Modified (the ETag is the only validator)
  weak_etag=1       send the ETag weak (W/"…"), as Apache does for a file changed within the
                    second, and judge If-Range as Apache then does: a weak ETag never matches,
                    nor does a date (Apache holds a date weak for a minute after the change)
  weak_etag_times=K ... only for the first K requests of this path (then strong, as Apache's
                    ETag for the same file a second later)
  always_416=1      answer every Range request with 416
  fail_status=C     answer status C (e.g. 503) ...
  fail_times=K      ... for the first K requests of this path (default: always)
  fail_from=K       ... starting with request K of this path (default: 1)
  retry_after=S     ... with Retry-After: S
  rate=B            send at most B bytes per second
  chunk=N           send the body N bytes at a time (default 65536): with rate, a trickle
  slow_start=N      with rate: slow only the answer whose body starts at byte N (one range at a trickle)
  slow_from=K       with rate: slow only request K and later of this path (the connections opened last)
  fast_rate=B       with slow_start or slow_from: the rate of the answers not slowed (default: none);
                    chunk then applies to the slowed ones alone
  set_cookie=NAME   answer with Set-Cookie: NAME=s3cr3t-NAME; Max-Age=3600; Path=/
  require_cookie=NAME  answer 401 unless the request sends that cookie
                    (the value never appears in a URL, so tests can look for it in output)
  partial_from=N    answer every GET, ranged or not, with 206 and the bytes from N
  content_length=N  send this Content-Length (absurd ones too), then the body as it is
  header=NAME:VALUE add a hostile header (repeatable); a NAME of a header the server
                    sends anyway (Content-Range, ETag …) replaces it
  extra_length=N    send a second Content-Length: N after the true one (a smuggler's framing)
  header_bytes=N    add one header line of N bytes (X-Padding: aaa…), past what a client keeps
  redirect_to=URL   answer 302 with Location: URL (to a request with a body:
                    only with fail_status=3xx, which sets the status)
  answer_after=N    to a request with a body: answer 200 after reading N bytes of it, and close
  forbid_header=NAME  answer 400 if the request carries that header (a leaked credential),
                    with or without a body
  not_http=1        answer with a status line that is not HTTP/1.x or 2 (HTTP/1.2)
  limit_concurrent=N  answer 503 to a GET while N other GETs (of any path) are being answered
  no_accept_ranges=1  send no Accept-Ranges header (Range is still honoured)
  not_modified=ETAG answer 304 with ETag: ETAG to any conditional request
                    (If-None-Match or If-Modified-Since), whatever it asked
  disposition=VALUE send Content-Disposition: VALUE with every answer of this path
                    (a redirect's too), its UTF-8 bytes as they are; {n} in it is
                    the request's number for this path (a name that changes),
                    {pad} disposition_pad=N times "é" (a name too long for any file)

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
so tests can count requests and bytes sent. (For the request-body answers
above, BYTES_SENT is the size of the JSON answer, and a drop_after is logged
as status 0 with 0 bytes; the two upload protocols below log otherwise.)

RESUMABLE UPLOADS. Two protocols are served under their own prefixes; the
query parameters above do not apply there, their knobs are listed below.
Uploads live in ROOT/.uploads/<id> (bodies are read in pieces of at most
256 KiB, Content-Length or chunked, never held whole in memory); their state
lives in memory, so it dies with the server. Ids are random hex.

Knobs come from the query string of the request that CREATES an upload
(POST /tus/?knobs, POST /ietf/?knobs) and stay with that upload: they govern
its later requests too, on URLs that carry no query string (the Location
answered never carries it). A "data request" of an upload is a tus PATCH, or
an IETF PATCH, or an IETF creation that carries a body (Content-Length > 0 or
chunked); data requests are numbered 1, 2, ... per upload, in arrival order,
once they pass validation (a 409/412/415 answer is not one).
  drop_after=N      on a data request, after reading N body bytes keep them and
                    close the connection abruptly (nothing answered) ...
  drop_times=K      ... on the first K data requests of the upload (default 1)
  fail_status=C     answer status C to data requests (body read and dropped,
                    nothing stored; IETF: with Upload-Complete: ?0, no Location) ...
  fail_times=K      ... only the first K data requests (default: all of them)
  retry_after=S     ... with Retry-After: S
  stall_after=N     on data request 1, after N body bytes stop reading (bytes kept) ...
  stall=S           ... for S seconds (default 30), then close the connection
  expire_after=K    after data request K, whatever its outcome, the upload is
                    forgotten (bytes deleted): every later request to it gets 404 ...
  expire_status=C   ... or C (410)
  corrupt_times=K   tus: the first K PATCHes carrying Upload-Checksum are taken as
                    mismatching (460, chunk discarded), as if a byte flipped on the wire
  offset_lies=1     HEAD (and GET) report Upload-Offset = length + 1000 (offset + 1000
                    while the length is unknown): a hostile server
  head_offset=N     HEAD (and GET) report Upload-Offset = N (at most the length), whatever
                    the upload holds: a server claiming bytes it never received
  no_104=1          IETF: never send the 104 interim response
  only_upload=K     the fault knobs above (drop_after, fail_status, stall_after,
                    expire_after, corrupt_times, offset_lies, head_offset, no_104) act only on the
                    K-th upload created with exactly this query string (1-based, in
                    arrival order; a tus final concatenation is not counted)
  absolute_location=1  Location is http://HOST:PORT/... (Host header of the
                    request); by default it is a path: /tus/files/<id>, /ietf/files/<id>
  max_size=N        tus: Tus-Max-Size: N, 413 to a larger Upload-Length (or final
                    concatenation); IETF: Upload-Limit max-size=N, 413 to a larger
                    Upload-Length
  extensions=a,b    tus: the Tus-Extension list (also OPTIONS /tus/?extensions=...),
                    default creation,termination,checksum,concatenation,expiration;
                    an extension left out is refused (DELETE 405, Upload-Concat 400,
                    Upload-Checksum ignored, no Upload-Expires); creation-defer-length
                    enables Upload-Defer-Length: 1
  max_append_size=N, min_append_size=N, min_size=N, max_age=S
                    IETF: announced in Upload-Limit (max-append-size ... max-age);
                    a creation or append body over max-append-size, or (not
                    completing) under min-append-size, is answered 413
  interop_version=V IETF: the Upload-Draft-Interop-Version served (default 9)
  progress_104=N    IETF: during a body, a 104 with Upload-Offset every N bytes

Every data request is logged as
  METHOD PATH STATUS - BYTES_RECEIVED
where BYTES_RECEIVED counts the request-body bytes that arrived on that request
(also when they were dropped, failed or discarded); a request cut by drop_after,
by stall_after (logged when the stall begins), by the client going away, or by a
newer request to the same upload is logged with STATUS 0. Other requests log the
body bytes received (0), and a GET of an upload URL the bytes sent.

When an upload becomes complete, one JSON line goes into --received:
  {"protocol": "tus"|"ietf", "id": ID, "size": N, "sha256": HEX,
   "path": "/tus/files/ID" | "/ietf/files/ID", ...}
tus adds "metadata": {decoded Upload-Metadata}, "partial": true for a partial
upload, "concat": [ids of the partials] for a final one. IETF adds "target"
(the creation path), "content_type" and "content_disposition" of the creation
request. A GET of an upload URL answers the bytes it holds (offset bytes).

A request to an upload while an earlier data request to it is still being
read (the client gave up on it) first ends that earlier request (its
connection is shut down), as the IETF draft recommends; so HEAD answers an
offset that the next PATCH can use.

tus 1.0.0 (https://tus.io/protocols/resumable-upload), POST /tus/ creates,
uploads are /tus/files/<id>. Every response has Tus-Resumable: 1.0.0; every
request but OPTIONS (and GET) needs Tus-Resumable: 1.0.0, else 412 + Tus-Version.
  OPTIONS /tus/    204, Tus-Version: 1.0.0, Tus-Extension, Tus-Checksum-Algorithm:
                   sha1,md5, Tus-Max-Size when max_size is given
  POST /tus/       Upload-Length (or Upload-Defer-Length: 1 with
                   creation-defer-length), Upload-Metadata (key base64,...; bad
                   base64 400), Upload-Concat: partial, or Upload-Concat:
                   final;URL URL (paths or absolute URLs of complete partial
                   uploads, no Upload-Length; else 400): the final upload is
                   complete at once; 201 with Location is answered first, then its
                   bytes are assembled and its --received line written (and
                   Upload-Expires with expiration). No body (creation-with-upload
                   is not offered: 400). Upload-Length: 0 is complete at once.
  HEAD             200, Upload-Offset, Upload-Length (or Upload-Defer-Length: 1),
                   Upload-Metadata, Upload-Concat, Cache-Control: no-store
  PATCH            Content-Type: application/offset+octet-stream (else 415),
                   Upload-Offset (400 if absent, 409 if not the offset), 413 if
                   the body would pass Upload-Length, 403 on a final upload.
                   Bytes are stored as they arrive and kept if the connection
                   drops. Upload-Checksum: sha1|md5 BASE64 verifies the chunk:
                   460 and the chunk discarded on mismatch (also when the body
                   did not arrive whole), 400 for another algorithm. 204 with
                   the new Upload-Offset (and Upload-Expires).
  DELETE           204, then the upload is gone (404).
  Unknown or forgotten uploads: 404 (expire_status for expire_after).

IETF draft-ietf-httpbis-resumable-upload (Resumable Uploads for HTTP, interop
version 9), POST (or PUT) /ietf/ (or any /ietf/... path that is not an upload
URL) creates, uploads are /ietf/files/<id>. Every request (but GET and
OPTIONS) needs Upload-Draft-Interop-Version: 9 (interop_version), else 400
with a body saying which version this server speaks (no 104 then).
  OPTIONS /ietf/   204, Upload-Limit, Upload-Draft-Interop-Version
  POST /ietf/      needs Upload-Complete: ?0/?1 (else 400); Upload-Length
                   optional; with or without a body. Before reading the body:
                   104 Upload Resumption Supported with Location, Upload-Limit,
                   Upload-Draft-Interop-Version (not with no_104). Bytes kept if
                   the connection drops. Then: Upload-Complete ?0: 201,
                   Location, Upload-Offset, Upload-Complete: ?0, Upload-Limit.
                   ?1: 200, Upload-Complete: ?1, Upload-Offset, Location,
                   a JSON body (the --received line). Upload-Limit is min-size=0
                   when no limit knob is given. Inconsistent Content-Length /
                   Upload-Length: 400 application/problem+json
                   (...#inconsistent-upload-length).
  HEAD             204, Upload-Offset, Upload-Complete, Upload-Length (when
                   known), Upload-Limit, Cache-Control: no-store
  PATCH            Content-Type: application/partial-upload (else 415),
                   Upload-Offset and Upload-Complete (else 400); a wrong offset:
                   409 application/problem+json, type
                   https://iana.org/assignments/http-problem-types#mismatching-upload-offset,
                   expected-offset, provided-offset, with Upload-Offset (the right
                   one) and Upload-Complete: ?0. Then as the creation's body:
                   204 + Upload-Offset + Upload-Complete: ?0, or (?1) 200 as above.
                   A completing append whose offset ends short of a known
                   length: 400 inconsistent-upload-length; bytes past a known
                   length: 400 and the upload is void (410). An empty ?1 PATCH
                   at the final offset of a complete upload replays its 200.
  DELETE           204, then the upload is gone (404).
"""
import base64
import binascii
import email.parser
import email.policy
import email.utils
import hashlib
import json
import argparse
import os
import secrets
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


# ---------------------------------------------------------------------------
# Resumable uploads: tus 1.0.0 at /tus/, the IETF draft at /ietf/ (see the
# module docstring). Everything below serves only those two prefixes.

TUS_VERSION = "1.0.0"
TUS_EXTENSIONS = "creation,termination,checksum,concatenation,expiration"
IETF_INTEROP_VERSION = 9
CHUNK = 256 * 1024
MISMATCHING_OFFSET = "https://iana.org/assignments/http-problem-types#mismatching-upload-offset"
INCONSISTENT_LENGTH = "https://iana.org/assignments/http-problem-types#inconsistent-upload-length"
# Knobs that are faults: with only_upload=K they act on the K-th upload only.
FAULT_KNOBS = ("drop_after", "fail_status", "stall_after", "expire_after", "corrupt_times",
               "offset_lies", "head_offset", "no_104")

uploads = {}
uploads_lock = threading.Lock()
creations = {}


class Upload:
    def __init__(self, protocol, root, knobs, faults):
        self.protocol = protocol
        self.id = secrets.token_hex(12)
        self.path = f"/{protocol}/files/{self.id}"
        self.file = os.path.join(root, ".uploads", self.id)
        self.knobs = knobs
        self.faults = faults          # the fault knobs act on this upload
        self.lock = threading.Lock()
        self.writer = None            # the request now writing into it
        self.offset = 0
        self.length = None
        self.complete = False
        self.gone = None              # status answered once it is forgotten
        self.data_requests = 0        # requests carrying bytes, in order
        self.checksum_requests = 0
        self.metadata_header = None
        self.metadata = {}
        self.concat = None            # tus: "partial" or "final;..."
        self.final = None             # IETF: (status, headers, body) of the completing answer
        self.target = None
        self.content_type = None
        self.content_disposition = None

    def knob(self, name, default=None, fault=False):
        if fault and not self.faults:
            return default
        return self.knobs.get(name, default)

    def int_knob(self, name, default=None, fault=False):
        value = self.knob(name, None, fault)
        return default if value is None else int(value)


class Writer:
    def __init__(self, connection):
        self.connection = connection
        self.cancel = threading.Event()
        self.done = threading.Event()


class BodyReader:
    """A request body, Content-Length or chunked, read in pieces; never all at once."""

    def __init__(self, rfile, headers):
        self.rfile = rfile
        self.chunked = "chunked" in (headers.get("Transfer-Encoding") or "").lower()
        self.declared = None if self.chunked else int(headers.get("Content-Length") or 0)
        self.left = self.declared
        self.chunk_left = 0
        self.done = not self.chunked and self.left == 0
        self.eof = False              # the connection ended before the body did
        self.got = 0

    def carries_bytes(self):
        return self.chunked or self.declared > 0

    def read(self, n):
        if self.done:
            return b""
        try:
            if self.chunked:
                if self.chunk_left == 0:
                    line = self.rfile.readline(65537)
                    if not line:
                        return self._ended()
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while True:
                            trailer = self.rfile.readline(65537)
                            if not trailer or trailer in (b"\r\n", b"\n"):
                                break
                        self.done = True
                        return b""
                    self.chunk_left = size
                data = self.rfile.read(min(n, self.chunk_left))
                if not data:
                    return self._ended()
                self.chunk_left -= len(data)
                if self.chunk_left == 0:
                    self.rfile.readline()
            else:
                data = self.rfile.read(min(n, self.left))
                if not data:
                    return self._ended()
                self.left -= len(data)
                self.done = self.left == 0
        except (OSError, ValueError):
            return self._ended()
        self.got += len(data)
        return data

    def _ended(self):
        self.eof = True
        self.done = True
        return b""

    def drain(self):
        while self.read(CHUNK):
            pass
        return self.got


def sf_integer(value):
    """A structured-field Integer >= 0 (RFC 9651 3.3.1), else None."""
    if value is None:
        return None
    value = value.strip().split(";")[0].strip()
    if value.isdigit() and len(value) <= 15:
        return int(value)
    return None


def sf_boolean(value):
    if value is None:
        return None
    value = value.strip().split(";")[0].strip()
    return {"?1": True, "?0": False}.get(value)


def plain_integer(value):
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while True:
            block = source.read(1024 * 1024)
            if not block:
                return digest.hexdigest()
            digest.update(block)


class ResumableHandler:
    """Mixed into Handler: answers the /tus/ and /ietf/ prefixes."""

    # --- plumbing ---------------------------------------------------------

    def resumable(self):
        """Serves the request if it belongs to /tus/ or /ietf/; True if it did."""
        url = urllib.parse.urlsplit(self.path)
        for protocol in ("tus", "ietf"):
            if url.path == "/" + protocol or url.path.startswith(f"/{protocol}/"):
                break
        else:
            return False
        self.query = {}
        self.extra_headers = []
        self.url = url
        self.knobs = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        self.reader = None
        self.writer = None
        try:
            getattr(self, f"{protocol}_{self.command.lower()}", self.not_allowed)()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if self.writer is not None:
                self.writer.done.set()
        return True

    def not_allowed(self):
        self.drain_and_answer(405, body=f"{self.command} is not served here\n")

    def body(self):
        if self.reader is None:
            self.reader = BodyReader(self.rfile, self.headers)
        return self.reader

    def answer(self, status, headers=(), body=b""):
        """A final answer; logs `METHOD PATH STATUS - BYTES` (BYTES: body bytes received)."""
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if self.url.path.startswith("/tus"):
            self.send_header("Tus-Resumable", TUS_VERSION)
        if status != 204 and not (100 <= status < 200):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self.record(status, None, self.reader.got if self.reader is not None else 0)

    def location(self, upload):
        if upload.knob("absolute_location") in ("1", "true"):
            host = self.headers.get("Host") or "%s:%d" % self.server.server_address[:2]
            return f"http://{host}{upload.path}"
        return upload.path

    def find(self):
        """The upload this URL names, or None after answering 404/410."""
        upload_id = self.url.path.rstrip("/").rsplit("/", 1)[-1]
        with uploads_lock:
            upload = uploads.get(upload_id)
        if upload is not None and upload.path == self.url.path.rstrip("/") and upload.gone is None:
            return upload
        status = upload.gone if upload is not None and upload.gone else 404
        self.drain_and_answer(status, body=f"no upload at {self.url.path}\n")
        return None

    def drain_and_answer(self, status, headers=(), body=b""):
        # Read (and drop) a request body first: closing on unread bytes resets
        # the connection, and the client might never see this answer.
        if self.command in ("POST", "PUT", "PATCH"):
            self.body().drain()
        self.answer(status, headers, body)

    def create(self, protocol):
        knobs = self.knobs
        with uploads_lock:
            key = (protocol, self.url.query)
            creations[key] = creations.get(key, 0) + 1
            number = creations[key]
        faults = "only_upload" not in knobs or int(knobs["only_upload"]) == number
        upload = Upload(protocol, self.server.root, knobs, faults)
        os.makedirs(os.path.dirname(upload.file), exist_ok=True)
        open(upload.file, "wb").close()
        with uploads_lock:
            uploads[upload.id] = upload
        return upload

    def uncount_creation(self, protocol):
        with uploads_lock:
            creations[(protocol, self.url.query)] -= 1

    def exclusive(self, upload, writing):
        """Ends a request still writing into this upload (the client gave up on
        it), as the IETF draft's Concurrency section recommends; then, if
        `writing`, registers this request as the upload's writer."""
        with upload.lock:
            previous = upload.writer
        if previous is not None and not previous.done.is_set() and previous is not self.writer:
            previous.cancel.set()
            try:
                previous.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            previous.done.wait(30)
        if writing:
            self.writer = Writer(self.connection)
            with upload.lock:
                upload.writer = self.writer

    def forget(self, upload, status):
        with upload.lock:
            upload.gone = status
        try:
            os.remove(upload.file)
        except OSError:
            pass

    def completed(self, upload, extra):
        """The upload became complete: one JSON line into --received."""
        with upload.lock:
            upload.complete = True
        description = {"protocol": upload.protocol, "id": upload.id, "size": upload.offset,
                       "sha256": sha256_of(upload.file), "path": upload.path}
        description.update(extra)
        line = json.dumps(description, sort_keys=True)
        with log_lock, open(self.server.received_path, "a") as received:
            received.write(line + "\n")
        return line

    def pump(self, upload, reader, start, *, cap=None, keep=True, digest=None, progress=None):
        """Appends the request body to the upload from `start`, applying the
        drop/stall faults. Returns (bytes appended, how it ended): "done",
        "eof" (the client went away), "drop", "stall", "cancelled", "too_long"."""
        number = upload.data_requests
        drop_after = upload.int_knob("drop_after", fault=True)
        if drop_after is not None and number > upload.int_knob("drop_times", 1):
            drop_after = None
        stall_after = upload.int_knob("stall_after", fault=True) if number == 1 else None
        got = 0
        ended = "done"
        next_progress = progress
        with open(upload.file, "r+b", buffering=0) as sink:
            sink.seek(start)
            sink.truncate()
            while True:
                if self.writer.cancel.is_set():
                    ended = "cancelled"
                    break
                if reader.done:
                    ended = "eof" if reader.eof else "done"
                    break
                want = CHUNK
                if drop_after is not None:
                    if got >= drop_after:
                        ended = "drop"
                        break
                    want = min(want, drop_after - got)
                if stall_after is not None:
                    if got >= stall_after:
                        ended = "stall"
                        break
                    want = min(want, stall_after - got)
                if next_progress is not None:
                    want = min(want, next_progress - got)
                data = reader.read(want)
                if not data:
                    continue
                if cap is not None and got + len(data) > cap:
                    data = data[: cap - got]
                    ended = "too_long"
                sink.write(data)
                got += len(data)
                if digest is not None:
                    digest.update(data)
                if keep:
                    with upload.lock:
                        upload.offset = start + got
                if ended == "too_long":
                    break
                if next_progress is not None and got >= next_progress:
                    next_progress += progress
                    self.wfile.write(b"HTTP/1.1 104 Upload Resumption Supported\r\n"
                                     b"Upload-Offset: %d\r\nUpload-Draft-Interop-Version: %d\r\n\r\n"
                                     % (start + got, upload.int_knob("interop_version", IETF_INTEROP_VERSION)))
                    self.wfile.flush()
        return got, ended

    def interrupted(self, upload, ended, discard_from=None):
        """After pump() ended early: logs status 0 and the bytes received,
        stalls if asked, and closes the connection."""
        if discard_from is not None:
            with open(upload.file, "r+b") as sink:
                sink.truncate(discard_from)
        self.record(0, None, self.reader.got)
        if ended == "stall":
            self.writer.cancel.wait(float(upload.knob("stall", "30")))
        if ended in ("drop", "stall", "too_long"):
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.close_connection = True

    def injected_failure(self, upload, reader, headers):
        """fail_status/fail_times: the body is read and dropped, status C answered."""
        status = upload.int_knob("fail_status", fault=True)
        times = upload.int_knob("fail_times")
        if status is None or (times is not None and upload.data_requests > times):
            return False
        reader.drain()
        if upload.knob("retry_after") is not None:
            headers = list(headers) + [("Retry-After", upload.knob("retry_after"))]
        self.answer(status, headers, f"failure {status} on purpose\n")
        return True

    def after_data_request(self, upload):
        expire_after = upload.int_knob("expire_after", fault=True)
        if expire_after is not None and upload.data_requests >= expire_after:
            self.forget(upload, upload.int_knob("expire_status", 404))

    def serve_bytes(self, upload, headers):
        with upload.lock:
            size = upload.offset
        self.send_response(200)
        for name, value in headers:
            self.send_header(name, value)
        if self.url.path.startswith("/tus"):
            self.send_header("Tus-Resumable", TUS_VERSION)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        sent = 0
        with open(upload.file, "rb") as source:
            while sent < size:
                block = source.read(min(CHUNK, size - sent))
                if not block:
                    break
                self.wfile.write(block)
                sent += len(block)
        self.record(200, None, sent)

    # --- tus 1.0.0 ----------------------------------------------------------

    def tus_extensions(self, knobs):
        return [e for e in knobs.get("extensions", TUS_EXTENSIONS).split(",") if e]

    def tus_expires(self, upload):
        if "expiration" in self.tus_extensions(upload.knobs) and not upload.complete:
            return [("Upload-Expires", email.utils.formatdate(time.time() + 86400, usegmt=True))]
        return []

    def tus_version_ok(self):
        if self.headers.get("Tus-Resumable") == TUS_VERSION:
            return True
        self.drain_and_answer(412, [("Tus-Version", TUS_VERSION)],
                              f"Tus-Resumable: {TUS_VERSION} is required (got {self.headers.get('Tus-Resumable')!r})\n")
        return False

    def tus_options(self):
        headers = [("Tus-Version", TUS_VERSION), ("Tus-Checksum-Algorithm", "sha1,md5")]
        extensions = self.tus_extensions(self.knobs)
        if extensions:
            headers.append(("Tus-Extension", ",".join(extensions)))
        if "max_size" in self.knobs:
            headers.append(("Tus-Max-Size", self.knobs["max_size"]))
        self.answer(204, headers)

    def tus_is_creation_url(self):
        return not self.url.path.startswith("/tus/files/")

    def tus_post(self):
        if not self.tus_is_creation_url():
            return self.not_allowed()
        if not self.tus_version_ok():
            return
        knobs = self.knobs
        extensions = self.tus_extensions(knobs)
        if self.body().drain():
            return self.answer(400, body="creation-with-upload is not offered: POST without a body\n")
        metadata_header = self.headers.get("Upload-Metadata")
        metadata = {}
        if metadata_header:
            try:
                for pair in metadata_header.split(","):
                    key, _, value = pair.strip().partition(" ")
                    if not key:
                        raise ValueError("empty key")
                    metadata[key] = base64.b64decode(value.strip(), validate=True).decode("utf-8", "replace")
            except (ValueError, binascii.Error) as error:
                return self.answer(400, body=f"bad Upload-Metadata: {error}\n")
        concat = self.headers.get("Upload-Concat")
        if concat is not None and "concatenation" not in extensions:
            return self.answer(400, body="concatenation is not offered\n")
        max_size = int(knobs["max_size"]) if "max_size" in knobs else None
        if concat is not None and concat.startswith("final;"):
            return self.tus_concatenate(concat, metadata_header, metadata, max_size)
        if concat not in (None, "partial"):
            return self.answer(400, body=f"bad Upload-Concat: {concat!r}\n")
        length_header = self.headers.get("Upload-Length")
        defer = self.headers.get("Upload-Defer-Length")
        length = plain_integer(length_header)
        if defer is not None:
            if defer != "1" or "creation-defer-length" not in extensions or length_header is not None:
                return self.answer(400, body="Upload-Defer-Length: 1 needs creation-defer-length, and no Upload-Length\n")
        elif length is None:
            return self.answer(400, body=f"Upload-Length must be a non-negative integer (got {length_header!r})\n")
        if length is not None and max_size is not None and length > max_size:
            return self.answer(413, [("Tus-Max-Size", str(max_size))], f"Upload-Length {length} > Tus-Max-Size {max_size}\n")
        upload = self.create("tus")
        upload.length = length
        upload.metadata_header = metadata_header
        upload.metadata = metadata
        upload.concat = concat
        headers = [("Location", self.location(upload))] + self.tus_expires(upload)
        if length == 0:
            self.tus_completed(upload)
        self.answer(201, headers)

    def tus_completed(self, upload, extra=None):
        details = {"metadata": upload.metadata}
        if upload.concat == "partial":
            details["partial"] = True
        details.update(extra or {})
        self.completed(upload, details)

    def tus_concatenate(self, concat, metadata_header, metadata, max_size):
        if self.headers.get("Upload-Length") is not None:
            return self.answer(400, body="a final upload takes no Upload-Length\n")
        parts = []
        for reference in concat[len("final;"):].split():
            path = urllib.parse.urlsplit(reference).path.rstrip("/")
            with uploads_lock:
                part = uploads.get(path.rsplit("/", 1)[-1])
            if part is None or part.path != path or part.gone is not None:
                return self.answer(400, body=f"no upload at {reference}\n")
            if part.concat != "partial":
                return self.answer(400, body=f"{reference} is not a partial upload\n")
            if not part.complete:
                return self.answer(400, body=f"partial upload {reference} is not complete "
                                             f"({part.offset} of {part.length} bytes)\n")
            parts.append(part)
        if not parts:
            return self.answer(400, body="Upload-Concat: final; names no partial upload\n")
        total = sum(part.offset for part in parts)
        if max_size is not None and total > max_size:
            return self.answer(413, [("Tus-Max-Size", str(max_size))], f"{total} bytes > Tus-Max-Size {max_size}\n")
        upload = Upload("tus", self.server.root, self.knobs, False)
        os.makedirs(os.path.dirname(upload.file), exist_ok=True)
        upload.offset = upload.length = total
        upload.metadata_header = metadata_header
        upload.metadata = metadata
        upload.concat = concat
        with uploads_lock:
            uploads[upload.id] = upload
        # Answered first, then assembled (and its line written to --received) as a
        # server that concatenates lazily would: a 1 GiB copy and hash in Python
        # would otherwise be most of a fast parallel upload's time.
        self.answer(201, [("Location", self.location(upload))])
        with open(upload.file, "wb") as sink:
            for part in parts:
                with open(part.file, "rb") as source:
                    size = os.fstat(source.fileno()).st_size
                    copied = 0
                    while copied < size:
                        moved = os.copy_file_range(source.fileno(), sink.fileno(), size - copied)
                        if moved == 0:
                            break
                        copied += moved
        self.tus_completed(upload, {"concat": [part.id for part in parts]})

    def tus_head(self):
        if self.tus_is_creation_url():
            return self.not_allowed()
        if not self.tus_version_ok():
            return
        upload = self.find()
        if upload is None:
            return
        self.exclusive(upload, writing=False)
        self.answer(200, self.tus_state(upload))

    def tus_state(self, upload):
        with upload.lock:
            offset, length = upload.offset, upload.length
        if upload.knob("offset_lies", fault=True) in ("1", "true"):
            offset = (length if length is not None else offset) + 1000
        claimed = upload.knob("head_offset", fault=True)
        if claimed is not None:
            offset = min(int(claimed), length) if length is not None else int(claimed)
        headers = [("Upload-Offset", str(offset)), ("Cache-Control", "no-store")]
        if length is None:
            headers.append(("Upload-Defer-Length", "1"))
        else:
            headers.append(("Upload-Length", str(length)))
        if upload.metadata_header:
            headers.append(("Upload-Metadata", upload.metadata_header))
        if upload.concat:
            headers.append(("Upload-Concat", upload.concat))
        return headers + self.tus_expires(upload)

    def tus_get(self):
        # Not tus: lets a test read back what arrived (no Tus-Resumable needed).
        if self.tus_is_creation_url():
            return self.not_allowed()
        upload = self.find()
        if upload is not None:
            self.serve_bytes(upload, self.tus_state(upload))

    def tus_delete(self):
        if self.tus_is_creation_url():
            return self.not_allowed()
        if not self.tus_version_ok():
            return
        upload = self.find()
        if upload is None:
            return
        if "termination" not in self.tus_extensions(upload.knobs):
            return self.answer(405, body="termination is not offered\n")
        self.exclusive(upload, writing=False)
        self.forget(upload, 404)
        self.answer(204)

    def tus_patch(self):
        if self.tus_is_creation_url():
            return self.not_allowed()
        if not self.tus_version_ok():
            return
        upload = self.find()
        if upload is None:
            return
        self.exclusive(upload, writing=True)
        if upload.concat and upload.concat.startswith("final;"):
            return self.drain_and_answer(403, body="a final upload takes no PATCH\n")
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/offset+octet-stream":
            return self.drain_and_answer(415, body=f"Content-Type must be application/offset+octet-stream (got {content_type!r})\n")
        offset = plain_integer(self.headers.get("Upload-Offset"))
        if offset is None:
            return self.drain_and_answer(400, body="Upload-Offset must be a non-negative integer\n")
        with upload.lock:
            current = upload.offset
        if offset != current:
            return self.drain_and_answer(409, body=f"Upload-Offset {offset} does not match the upload's offset {current}\n")
        if upload.length is None and self.headers.get("Upload-Length") is not None:
            length = plain_integer(self.headers.get("Upload-Length"))
            if length is None or length < current:
                return self.drain_and_answer(400, body="bad Upload-Length\n")
            upload.length = length
        reader = self.body()
        room = None if upload.length is None else upload.length - current
        if room is not None and reader.declared is not None and reader.declared > room:
            return self.drain_and_answer(413, body=f"{reader.declared} bytes at offset {current} exceed Upload-Length {upload.length}\n")
        with upload.lock:
            upload.data_requests += 1
        try:
            self.tus_append(upload, reader, current, room)
        finally:
            self.after_data_request(upload)

    def tus_append(self, upload, reader, start, room):
        if self.injected_failure(upload, reader, self.tus_expires(upload)):
            return
        checksum = self.headers.get("Upload-Checksum") if "checksum" in self.tus_extensions(upload.knobs) else None
        digest = None
        if checksum is not None:
            algorithm, _, expected = checksum.strip().partition(" ")
            if algorithm not in ("sha1", "md5"):
                reader.drain()
                return self.answer(400, body=f"checksum algorithm {algorithm!r} is not supported (sha1, md5)\n")
            digest = hashlib.new(algorithm)
            with upload.lock:
                upload.checksum_requests += 1
        got, ended = self.pump(upload, reader, start, cap=room, keep=digest is None, digest=digest)
        if ended == "too_long":
            with upload.lock:
                upload.offset = start
            with open(upload.file, "r+b") as sink:
                sink.truncate(start)
            return self.drain_and_answer(413, body=f"the chunk runs past Upload-Length {upload.length}: discarded\n")
        if ended != "done":
            # A chunk under a checksum is kept only when verified whole.
            return self.interrupted(upload, ended, discard_from=start if digest is not None else None)
        if digest is not None:
            corrupt = upload.int_knob("corrupt_times", 0, fault=True) >= upload.checksum_requests
            if corrupt or base64.b64encode(digest.digest()).decode() != expected.strip():
                with open(upload.file, "r+b") as sink:
                    sink.truncate(start)
                return self.answer(460, body="Checksum Mismatch: the chunk was discarded\n")
            with upload.lock:
                upload.offset = start + got
        headers = [("Upload-Offset", str(upload.offset))] + self.tus_expires(upload)
        if upload.length is not None and upload.offset == upload.length and not upload.complete:
            self.tus_completed(upload)
        self.answer(204, headers)

    # --- IETF draft: Resumable Uploads for HTTP -----------------------------

    def ietf_limits(self, knobs):
        limits = []
        for knob, key in (("max_size", "max-size"), ("min_size", "min-size"),
                          ("max_append_size", "max-append-size"),
                          ("min_append_size", "min-append-size"), ("max_age", "max-age")):
            if knob in knobs:
                limits.append(f"{key}={int(knobs[knob])}")
        return ", ".join(limits) or "min-size=0"

    def ietf_version_ok(self, knobs):
        wanted = int(knobs.get("interop_version", IETF_INTEROP_VERSION))
        sent = self.headers.get("Upload-Draft-Interop-Version")
        if sf_integer(sent) == wanted:
            return True
        self.drain_and_answer(400, [("Upload-Draft-Interop-Version", str(wanted)), ("Content-Type", "text/plain")],
                              f"this server implements draft-ietf-httpbis-resumable-upload interop version {wanted}: "
                              f"send Upload-Draft-Interop-Version: {wanted} (got {sent!r})\n")
        return False

    def ietf_is_creation_url(self):
        return not self.url.path.startswith("/ietf/files/")

    def ietf_options(self):
        self.answer(204, [("Upload-Limit", self.ietf_limits(self.knobs)),
                          ("Upload-Draft-Interop-Version", str(self.knobs.get("interop_version", IETF_INTEROP_VERSION))),
                          ("Allow", "OPTIONS, POST, PUT")])

    def ietf_problem(self, status, upload, type_, title, extra=None, headers=()):
        problem = {"type": type_, "title": title}
        problem.update(extra or {})
        headers = [("Content-Type", "application/problem+json"), ("Upload-Complete", "?0")] + list(headers)
        if upload is not None:
            headers.append(("Upload-Limit", self.ietf_limits(upload.knobs)))
        self.drain_and_answer(status, headers, json.dumps(problem) + "\n")

    def ietf_post(self):
        if not self.ietf_is_creation_url():
            return self.not_allowed()
        knobs = self.knobs
        if not self.ietf_version_ok(knobs):
            return
        complete = sf_boolean(self.headers.get("Upload-Complete"))
        if complete is None:
            return self.drain_and_answer(400, body="Upload-Complete: ?0 or ?1 is required to create an upload\n")
        length = sf_integer(self.headers.get("Upload-Length"))
        reader = self.body()
        limits = [("Upload-Limit", self.ietf_limits(knobs))]
        if complete and length is not None and reader.declared is not None and reader.declared != length:
            return self.ietf_problem(400, None, INCONSISTENT_LENGTH, "inconsistent length values for upload",
                                     headers=limits)
        if complete and length is None and reader.declared is not None:
            length = reader.declared
        if "max_size" in knobs and length is not None and length > int(knobs["max_size"]):
            return self.drain_and_answer(413, limits, f"{length} bytes > max-size {knobs['max_size']}\n")
        if reader.declared is not None and "max_append_size" in knobs and reader.declared > int(knobs["max_append_size"]):
            return self.drain_and_answer(413, limits, f"{reader.declared} bytes > max-append-size {knobs['max_append_size']}\n")
        if (reader.declared and not complete and "min_append_size" in knobs
                and reader.declared < int(knobs["min_append_size"])):
            return self.drain_and_answer(413, limits, f"{reader.declared} bytes < min-append-size {knobs['min_append_size']}\n")
        upload = self.create("ietf")
        upload.length = length
        upload.target = self.url.path
        upload.content_type = self.headers.get("Content-Type")
        upload.content_disposition = self.headers.get("Content-Disposition")
        self.exclusive(upload, writing=True)
        location = self.location(upload)
        if not upload.knob("no_104", fault=True) in ("1", "true"):
            self.wfile.write(("HTTP/1.1 104 Upload Resumption Supported\r\n"
                              f"Location: {location}\r\n"
                              f"Upload-Limit: {self.ietf_limits(knobs)}\r\n"
                              f"Upload-Draft-Interop-Version: {upload.int_knob('interop_version', IETF_INTEROP_VERSION)}\r\n"
                              "\r\n").encode())
            self.wfile.flush()
        if reader.carries_bytes():
            with upload.lock:
                upload.data_requests += 1
        try:
            self.ietf_append(upload, reader, 0, complete, location)
        finally:
            if reader.carries_bytes():
                self.after_data_request(upload)

    ietf_put = ietf_post

    def ietf_append(self, upload, reader, start, complete, location):
        """The body of a creation (start 0) or of a PATCH, then the answer."""
        limits = ("Upload-Limit", self.ietf_limits(upload.knobs))
        failure_headers = [("Upload-Complete", "?0"), limits]
        if upload.data_requests and self.injected_failure(upload, reader, failure_headers):
            return
        room = None if upload.length is None else upload.length - start
        progress = upload.int_knob("progress_104")
        got, ended = self.pump(upload, reader, start, cap=room, progress=progress)
        if ended == "too_long":
            self.forget(upload, 410)
            return self.ietf_problem(400, upload, INCONSISTENT_LENGTH,
                                     f"more than the upload's length of {upload.length} bytes: the upload is void")
        if ended != "done":
            return self.interrupted(upload, ended)
        offset = upload.offset
        headers = [("Upload-Offset", str(offset)), limits]
        if location is not None:
            headers.append(("Location", location))
        if not complete:
            if location is not None:      # creation
                return self.answer(201, headers + [("Upload-Complete", "?0")])
            return self.answer(204, headers + [("Upload-Complete", "?0")])
        if upload.length is not None and upload.length != offset:
            return self.ietf_problem(400, upload, INCONSISTENT_LENGTH,
                                     f"the upload completes at {offset} bytes, not its length of {upload.length}")
        upload.length = offset
        line = self.completed(upload, {"target": upload.target, "content_type": upload.content_type,
                                    "content_disposition": upload.content_disposition})
        headers = [("Upload-Complete", "?1"), ("Upload-Offset", str(offset)), limits,
                   ("Location", location or self.location(upload)), ("Content-Type", "application/json")]
        upload.final = (200, headers, line + "\n")
        self.answer(200, headers, line + "\n")

    def ietf_state(self, upload):
        with upload.lock:
            offset, length, complete = upload.offset, upload.length, upload.complete
        if upload.knob("offset_lies", fault=True) in ("1", "true"):
            offset = (length if length is not None else offset) + 1000
        claimed = upload.knob("head_offset", fault=True)
        if claimed is not None:
            offset = min(int(claimed), length) if length is not None else int(claimed)
        headers = [("Upload-Offset", str(offset)), ("Upload-Complete", "?1" if complete else "?0"),
                   ("Upload-Limit", self.ietf_limits(upload.knobs)), ("Cache-Control", "no-store")]
        if length is not None:
            headers.append(("Upload-Length", str(length)))
        return headers

    def ietf_head(self):
        if self.ietf_is_creation_url():
            return self.not_allowed()
        upload = self.find()
        if upload is None:
            return
        if not self.ietf_version_ok(upload.knobs):
            return
        self.exclusive(upload, writing=False)
        self.answer(204, self.ietf_state(upload))

    def ietf_get(self):
        # Offset retrieval may use GET too; the bytes come along so tests can compare.
        if self.ietf_is_creation_url():
            return self.not_allowed()
        upload = self.find()
        if upload is not None:
            self.serve_bytes(upload, self.ietf_state(upload))

    def ietf_delete(self):
        if self.ietf_is_creation_url():
            return self.not_allowed()
        upload = self.find()
        if upload is None or not self.ietf_version_ok(upload.knobs):
            return
        self.exclusive(upload, writing=False)
        self.forget(upload, 404)
        self.answer(204)

    def ietf_patch(self):
        if self.ietf_is_creation_url():
            return self.not_allowed()
        upload = self.find()
        if upload is None or not self.ietf_version_ok(upload.knobs):
            return
        self.exclusive(upload, writing=True)
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/partial-upload":
            return self.drain_and_answer(415, [("Upload-Complete", "?0")],
                                         f"Content-Type must be application/partial-upload (got {content_type!r})\n")
        complete = sf_boolean(self.headers.get("Upload-Complete"))
        offset = sf_integer(self.headers.get("Upload-Offset"))
        if complete is None or offset is None:
            return self.drain_and_answer(400, [("Upload-Complete", "?0")],
                                         "an append needs Upload-Complete (?0/?1) and Upload-Offset (an integer)\n")
        with upload.lock:
            current = upload.offset
        if offset != current:
            return self.ietf_problem(409, upload, MISMATCHING_OFFSET,
                                     "offset from request does not match offset of resource",
                                     {"expected-offset": current, "provided-offset": offset},
                                     [("Upload-Offset", str(current))])
        reader = self.body()
        if upload.complete:
            if complete and not reader.carries_bytes() and upload.final is not None:
                return self.answer(*upload.final)         # the lost answer, once more
            return self.drain_and_answer(400, [("Upload-Complete", "?0")], "the upload is already complete\n")
        length = sf_integer(self.headers.get("Upload-Length"))
        if complete and reader.declared is not None:
            if length is not None and length != current + reader.declared:
                length = -1
            else:
                length = current + reader.declared
        if length is not None and (length < current or (upload.length is not None and length != upload.length)):
            return self.ietf_problem(400, upload, INCONSISTENT_LENGTH, "inconsistent length values for upload")
        if length is not None:
            upload.length = length
        limits = [("Upload-Limit", self.ietf_limits(upload.knobs)), ("Upload-Complete", "?0")]
        knobs = upload.knobs
        if reader.declared is not None and "max_append_size" in knobs and reader.declared > int(knobs["max_append_size"]):
            return self.drain_and_answer(413, limits, f"{reader.declared} bytes > max-append-size {knobs['max_append_size']}\n")
        if (reader.declared is not None and not complete and "min_append_size" in knobs
                and reader.declared < int(knobs["min_append_size"])):
            return self.drain_and_answer(413, limits, f"{reader.declared} bytes < min-append-size {knobs['min_append_size']}\n")
        with upload.lock:
            upload.data_requests += 1
        try:
            self.ietf_append(upload, reader, current, complete, None)
        finally:
            self.after_data_request(upload)


class Handler(ResumableHandler, BaseHTTPRequestHandler):
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
        if "extra_length" in getattr(self, "query", {}):
            super().send_header("Content-Length", self.query["extra_length"])
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
        if "header_bytes" in self.query:
            self.extra_headers.append(["X-Padding", "a" * max(0, int(self.query["header_bytes"]) - len("X-Padding: "))])
        self.number = next_count(url.path)
        if "disposition" in self.query:
            value = self.query["disposition"].replace("{n}", str(self.number))
            value = value.replace("{pad}", "\u00e9" * int(self.query.get("disposition_pad", "0")))
            # send_header writes ISO-8859-1: the UTF-8 bytes go out as they are.
            self.extra_headers.append(["Content-Disposition", value.encode("utf-8").decode("latin-1")])
        return url

    def within(self, times_key):
        return times_key not in self.query or self.number <= int(self.query[times_key])

    def refused(self, range_header=None):
        """Answers an injected failure or a missing cookie; True if it did."""
        query = self.query
        status = None
        if "fail_status" in query and self.within("fail_times") and self.number >= int(query.get("fail_from", 1)):
            status = int(query["fail_status"])
        elif self.command != "GET" and "forbid_header" in query and self.headers.get(query["forbid_header"]) is not None:
            status = 400
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
        if status in (301, 302, 303, 307, 308) and "redirect_to" in query:
            self.send_header("Location", query["redirect_to"])
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
        if self.resumable():
            return
        self.receive()

    def do_OPTIONS(self):
        if not self.resumable():
            self.send_error(501, f"Unsupported method ('{self.command}')")

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
        if "answer_after" in self.query:
            # A final answer before the body is all read, then the connection closed.
            self.rfile.read(min(length, int(self.query["answer_after"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            self.record(200, None, 0)
            return
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
        if self.resumable():
            return
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
        if "etag_changes_from" in query and number >= int(query["etag_changes_from"]):
            etag = f'"{stat.st_ino:x}-{size:x}-changed"'
        weak = query.get("weak_etag") and within("weak_etag_times")
        if weak:
            etag = "W/" + etag
        if range_header:
            with log_lock, open(self.server.log_path + ".if-range", "a") as log:
                log.write(json.dumps({"path": url.path, "range": range_header, "if_range": self.headers.get("If-Range")}) + "\n")

        start = 0
        end = None
        status = 200
        ignores_range = query.get("ignore_range") or ("ignore_range_from" in query and number >= int(query["ignore_range_from"]))
        if range_header and range_header.startswith("bytes=") and not ignores_range:
            if_range = self.headers.get("If-Range")
            # (RFC 9110 §13.1.5: If-Range matches a strong validator only; weak, Apache refuses a date too.)
            if if_range is None or (if_range == etag and not weak) or query.get("ignore_if_range"):
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
        claimed_start = body_start
        if status == 206 and range_header and "early_range" in query:
            body_start = max(0, start - int(query["early_range"]))
        end = size if end is None else min(end, size)
        length = end - body_start

        self.send_response(status)
        if not (status == 206 and query.get("no_validators_206")):
            if not query.get("no_etag"):
                self.send_header("ETag", etag)
            if not query.get("no_last_modified"):
                self.send_header("Last-Modified", self.date_time_string(stat.st_mtime))
        if not query.get("no_accept_ranges"):
            self.send_header("Accept-Ranges", "bytes")
        if status == 206 and query.get("range_no_length"):
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(length))
        if status == 206 and not query.get("no_content_range"):
            self.send_header("Content-Range", f"bytes {claimed_start}-{end - 1}/{size}")
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
        piece = max(1, int(query.get("chunk", 64 * 1024)))
        if "slow_start" in query or "slow_from" in query:
            slowed = ("slow_start" in query and body_start == int(query["slow_start"])) or \
                ("slow_from" in query and number >= int(query["slow_from"]))
            rate = rate if slowed else (int(query["fast_rate"]) if "fast_rate" in query else None)
            if not slowed:
                piece = 64 * 1024
        hold_after = int(query["hold_after"]) if "hold_after" in query else None
        sent = 0
        began = time.monotonic()
        try:
            with open(path, "rb") as source:
                source.seek(body_start)
                while sent < length:
                    wanted = min(piece, length - sent)
                    if hold_after is not None and sent < hold_after:
                        wanted = min(wanted, hold_after - sent)
                    chunk = source.read(wanted)
                    if drop_after is not None:
                        chunk = chunk[: max(0, drop_after - sent)]
                    if stall_after is not None:
                        chunk = chunk[: max(0, stall_after - sent)]
                    if "corrupt_request" in query and number == int(query["corrupt_request"]):
                        chunk = bytes(byte ^ 0xFF for byte in chunk)
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
                    if hold_after is not None and sent >= hold_after:
                        hold_after = None
                        if not self.held_until_released(query.get("release", "release")):
                            break
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

    def held_until_released(self, name):
        """Waits for ROOT/name to exist; False if the client hung up first."""
        release = os.path.join(self.server.root, name)
        deadline = time.monotonic() + 120
        while not os.path.exists(release) and time.monotonic() < deadline:
            if select.select([self.connection], [], [], 0.05)[0] and not self.connection.recv(1, socket.MSG_PEEK):
                return False
        return True


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
