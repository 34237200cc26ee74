#!/usr/bin/env python3
"""A real, third-party tus 1.0.0 server for syncagent's tests: aiohttp-tus.

Run with the Makefile's virtualenv (make test-deps installs aiohttp-tus there):

  .venv/bin/python Tests/TestSupport/tus_server.py --host 127.0.0.1 --port P \
      --dir UPLOAD_DIR [--log REQUEST_LOG] [--allow-overwrite]

It serves aiohttp-tus, unchanged, at http://HOST:P/uploads/ (POST there creates
an upload; HEAD, PATCH and DELETE go to the absolute Location it answers,
http://HOST:P/uploads/<uuid>). A finished upload is moved to UPLOAD_DIR/<filename>,
the `filename` of its Upload-Metadata (which aiohttp-tus requires); until then
its bytes live in UPLOAD_DIR/.resources/<uuid> and its offset in
UPLOAD_DIR/.metadata/<uuid>.json.

Only what aiohttp-tus leaves to its host application is set here:
  * client_max_size: aiohttp's default (1 MiB) would answer 413 to any PATCH
    larger than 1 MiB, since aiohttp-tus reads a PATCH body whole, in memory
    (request.read()). It is --max-request-size, 4 GiB by default (the
    Tus-Max-Size aiohttp-tus announces), so a single PATCH of a whole 4 GiB
    file is accepted too; such a PATCH costs about twice its size in memory.
  * allow_overwrite_files (--allow-overwrite): off, aiohttp-tus answers 409 to a
    POST whose filename's stem matches a file already in UPLOAD_DIR.

Every request is appended to --log, as soon as it is answered, as one line:
  METHOD PATH STATUS BODY_BYTES
where BODY_BYTES counts the request body bytes that actually arrived (read from
the socket by aiohttp, not the Content-Length), and STATUS is 499 when the
client closed the connection before the answer (a PATCH cut mid-body).

What aiohttp-tus 1.1.0 does (measured, aiohttp 3.14): Tus-Extension
creation,termination,file-check (only when OPTIONS carries Tus-Resumable; else
200 without tus headers); no checksum, concatenation, expiration,
creation-defer-length or creation-with-upload. Location is absolute, built from
the request's Host. A PATCH cut mid-body keeps nothing (the offset stays put).
HEAD answers 404 for an unknown id and also once the upload has finished.
PATCH to an unknown id: 500. POST without a `filename` metadata: 404; with a
metadata key that has no value: 500. The new offset is the PATCH's
Content-Length, not the bytes read (chunked PATCH: offset does not move), and is
never checked against Upload-Length. Upload-Length 0 leaves a 1-byte file (NUL).
"""
import argparse
import logging
import os
import sys
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp_tus import setup_tus

CLIENT_CLOSED = 499  # nginx's number for "client closed the request"


def make_app(upload_dir: Path, log_path, max_request_size: int, allow_overwrite: bool):
    log_file = open(log_path, "a", buffering=1) if log_path else None

    def log(request: web.Request, status: int) -> None:
        if log_file is None:
            return
        content = request.content  # the body's StreamReader: counts what came in
        received = getattr(content, "total_bytes", 0) or 0
        log_file.write(f"{request.method} {request.path} {status} {received}\n")

    @web.middleware
    async def request_log(request: web.Request, handler):
        try:
            response = await handler(request)
        except web.HTTPException as error:
            log(request, error.status)
            raise
        except (ConnectionError, aiohttp.ClientConnectionError):
            # The client went away mid-body: aiohttp-tus keeps nothing of it.
            # Nobody reads this answer; it spares stderr aiohttp's traceback.
            log(request, CLIENT_CLOSED)
            return web.Response(status=CLIENT_CLOSED)
        except BaseException:
            log(request, 500)
            raise
        log(request, response.status)
        return response

    app = web.Application(client_max_size=max_request_size, middlewares=[request_log])
    setup_tus(
        app,
        upload_path=upload_dir,
        upload_url="/uploads/",
        allow_overwrite_files=allow_overwrite,
    )
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True, help="where finished uploads go")
    parser.add_argument("--log", help="one line per request: METHOD PATH STATUS BODY_BYTES")
    parser.add_argument("--max-request-size", type=int, default=4 * 1024**3,
                        help="largest request body (one PATCH) accepted, in bytes")
    parser.add_argument("--allow-overwrite", action="store_true",
                        help="aiohttp-tus's allow_overwrite_files")
    args = parser.parse_args()

    upload_dir = Path(args.dir).absolute()
    # aiohttp-tus formats the path with str.format (for named upload URLs).
    if "{" in str(upload_dir) or "}" in str(upload_dir):
        sys.exit(f"tus_server: --dir may not contain braces: {upload_dir}")
    upload_dir.mkdir(parents=True, exist_ok=True)

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    app = make_app(upload_dir, args.log, args.max_request_size, args.allow_overwrite)

    # run_app stops cleanly on SIGTERM and SIGINT (GracefulExit).
    web.run_app(app, host=args.host, port=args.port, access_log=None,
                print=lambda *a, **k: None, shutdown_timeout=1)


if __name__ == "__main__":
    main()
