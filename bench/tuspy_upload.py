#!/usr/bin/env python3
"""Upload one file with tuspy (the reference Python tus client).

  .venv/bin/python tuspy_upload.py FILE TUS_ENDPOINT [--chunk-size BYTES] [--filename NAME]

TUS_ENDPOINT is the creation URL (e.g. http://127.0.0.1:P/uploads/). Prints one
line of JSON: upload URL, bytes, seconds, MB/s. aiohttp-tus needs the
`filename` metadata (it names the finished file); it defaults to FILE's name.
"""
import argparse, json, os, sys, time
from tusclient.client import TusClient

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("endpoint")
p.add_argument("--chunk-size", type=int, default=64 * 1024 * 1024)
p.add_argument("--filename")
a = p.parse_args()

client = TusClient(a.endpoint, headers={})
uploader = client.uploader(file_path=a.file, chunk_size=a.chunk_size,
                           metadata={"filename": a.filename or os.path.basename(a.file)})
start = time.monotonic()
uploader.upload()  # POST (creation), then one PATCH per chunk, each on a new connection
seconds = time.monotonic() - start
size = os.path.getsize(a.file)
if uploader.offset != size:
    sys.exit(f"tuspy: stopped at offset {uploader.offset} of {size}")
print(json.dumps({"url": uploader.url, "bytes": size, "seconds": round(seconds, 3),
                  "MBps": round(size / seconds / 1e6, 1)}))
