#!/usr/bin/env python3
"""syncagent's benchmarks: the same workloads, in one run, the tools alternating.

Workloads (loopback nginx on 127.0.0.1, files generated here):
  1. one 1 GiB file
  2. 2,000 files of 16 KiB, CONCURRENCY at once
  3. replay of a 1,000,000-event log (`syncagent replay`) and agent start-up on it
  4. the agent holding 100,000 queued jobs: peak RSS, time to take them all,
     and `status` while they wait (at once, and once the agent has written
     its snapshot of them); then a 10,000,000-event log compacted
     (`compact`, the file left, start-up and `status` on it)
  5. latency from a job's rename into the inbox to its `started` event
  6. a 200-segment HLS VOD (about 1 MiB a segment, made by ffmpeg), against
     `ffmpeg -i URL -c copy` and `yt-dlp -N 6` (pip, in the Makefile's venv);
     and what the disk alone takes to write those segments durably
  7. 256 MiB from a server capping each connection at 10 MB/s, and 64 MiB
     at 5 MB/s: syncagent with `connections = 8`, aria2c -x8 -s8, curl; then
     the 256 MiB download killed
     with SIGKILL 10 times (what it fetched again per range and kill)
  8. 1,000 unchanged files with `overwrite = "update"`
  9. a 1 GiB upload through bench/throttle_proxy.py (20 MB/s per connection)
     to the project's tus/IETF server (Tests/TestSupport/fault_server.py):
     plain PUT, tus, tus with parallel = 4, and tuspy (the reference Python
     tus client, in the venv); then a tus upload killed with SIGKILL half-way
     and resumed, counting the bytes the server received twice

 10. through a shaped link (`ShapedLink`: a 20 ms round trip, nginx's
     `limit_rate 2500k` per connection, as a CDN gives one connection):
     2,000 files of 16 KiB, and a 200-segment HLS VOD of ~160 KiB segments
     against ffmpeg, yt-dlp -N 6 and streamlink (6 segment threads)

Tools: syncagent (jobs in its inbox, `run --exit-when-idle`, end to end),
curl (one process; -Z --parallel-max N for many files), aria2c (-i list -j N)
and a FoundationNetworking URLSession program (bench/URLSessionPeer). On the
loopback (1, 2) also "curl then sync" and "aria2c then sync": what a user who
needs the files on disk runs, against syncagent, which makes every file
durable before it says so. The 1 GiB file runs 5 rounds (--large-rounds), its
spread a result of its own. `--only big,many,...` runs some workloads (and
leaves bench/results.md alone); `--prebuilt DIR` takes the binaries from DIR.

Before each timed run the output folder is emptied and the disk synced, so
no tool pays for the writeback another left behind. Prints a Markdown table
of medians, ratios to curl, and peak RSS, and writes it to bench/results.md.
Options: --rounds N (default 3), --quick (smaller sizes, for trying the
harness out).
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONCURRENCY = 6
# Connections of the segmented download (and aria2c's -x/-s).
CONNECTIONS = 8
# SIGKILLs during one segmented download.
KILLS = 10
# Per connection, for the segmented download killed again and again (nginx's limit_rate, bytes a second).
TRICKLE_RATE = 1 << 20
# Size of each file of the overwrite = "update" workload.
SYNCED_SIZE = 256 << 10


def sh(*args, **kwargs):
    return subprocess.run(args, check=True, **kwargs)


def timed(command, env=None, cwd=None):
    """Runs a command under GNU time: (wall seconds, peak RSS KiB)."""
    stats = os.path.join(WORK, "time.out")
    started = time.perf_counter()
    result = subprocess.run(["/usr/bin/time", "-o", stats, "-f", "%M"] + command,
                            env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"benchmark command failed ({result.returncode}): {' '.join(command)}\n{result.stderr.decode()[-2000:]}")
    with open(stats) as f:
        rss = int(f.read().strip().splitlines()[-1])
    return wall, rss


# Deleting many files makes the next file creations slow for whoever comes
# next: ext4 without a journal (this machine's root) skips every inode freed
# in the last 60 s (`recently_deleted`, RECENTCY_MIN; 300 s more while the
# inode table block is dirty, so the disk is synced first) when it picks one
# for a new file. Deleting the last round's 2,000 files before a tool's run
# made curl's 2,000 creations take 1.9 s of kernel time instead of 0.2 s. So
# folders of many files are moved aside, and deleted between workloads, with
# time to age.
TRASH_AGE_S = 61
MANY_FILES = 100


def fresh(path):
    if os.path.isdir(path) and sum(len(files) for _, _, files in os.walk(path)) > MANY_FILES:
        trash = os.path.join(WORK, ".trash")
        os.makedirs(trash, exist_ok=True)
        os.rename(path, os.path.join(trash, str(time.time_ns())))
    else:
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def empty_trash():
    """Deletes what `fresh` moved aside, then waits until those inodes no longer slow a creation."""
    trash = os.path.join(WORK, ".trash")
    if not os.path.isdir(trash):
        return
    shutil.rmtree(trash)
    os.sync()
    time.sleep(TRASH_AGE_S)


def settled_output(aged=False):
    """An empty output folder, with the disk settled: the last tool's unsynced
    writes and the deleted files are flushed before the next tool's clock
    starts. Otherwise whoever syncs next (syncagent fdatasyncs every file; an
    ext4 journal commit carries every dirty file with it) pays for the writeback
    of whoever ran before, and a round's figure depends on the order.

    `aged`: for workloads that create many files, also wait until the files
    the last tool deleted (syncagent removes its job files as it takes them)
    no longer slow this tool's creations (see `fresh`)."""
    out = fresh(os.path.join(WORK, "out"))
    os.sync()
    if aged:
        time.sleep(TRASH_AGE_S)
    return out


def write_random(path, size):
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = min(left, 8 << 20)
            f.write(os.urandom(chunk))
            left -= chunk


class Nginx:
    def __init__(self, www):
        self.prefix = fresh(os.path.join(WORK, "nginx"))
        self.port = 18600 + os.getpid() % 1000
        conf = os.path.join(self.prefix, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""
worker_processes 1;
daemon off;
pid {self.prefix}/nginx.pid;
error_log {self.prefix}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  client_body_temp_path {self.prefix}/body;
  log_format sent '$request_uri $status $body_bytes_sent';
  server {{
    listen 127.0.0.1:{self.port};
    root {www};
    # A server that caps each connection (as CDNs do): what segmented downloads are for.
    location /capped/ {{ alias {www}/; limit_rate 10m; }}
    location /capped5/ {{ alias {www}/; limit_rate 5m; }}
    # Slower still, for killing a segmented download many times before it ends; logs what it sent.
    # Sent in small pieces: nginx's default 2 MiB would sit in socket buffers, counted as sent, never received.
    location /trickle/ {{
      alias {www}/; limit_rate {TRICKLE_RATE}; sendfile_max_chunk 64k; access_log {self.prefix}/trickle.log sent;
    }}
    # Behind ShapedLink: one connection as a CDN gives it.
    location /shaped/ {{ alias {www}/; limit_rate {SHAPED_RATE}; }}
    # The update workload counts the body bytes nginx sends.
    location /sync/ {{ alias {www}/sync/; access_log {self.prefix}/sync.log sent; }}
  }}
}}
""")
        self.process = subprocess.Popen(["/usr/sbin/nginx", "-p", self.prefix, "-c", conf])
        for _ in range(100):
            if subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{self.port}/"]).returncode in (0, 22):
                break
            time.sleep(0.05)

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"

    def log_end(self, log):
        """Where access log `log` (a name in the prefix) ends now: what `sent_since` counts from."""
        path = os.path.join(self.prefix, log)
        return os.path.getsize(path) if os.path.exists(path) else 0

    def sent_since(self, log, mark):
        """Body bytes access log `log` (format `sent`) records after `mark`."""
        with open(os.path.join(self.prefix, log)) as f:
            f.seek(mark)
            return sum(int(line.split()[2]) for line in f if line.strip())

    def stop(self):
        self.process.send_signal(signal.SIGQUIT)
        self.process.wait(timeout=10)


# ---------------------------------------------------------------- the tools


def syncagent_env():
    env = dict(os.environ)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env["SYNCAGENT_LOG_LEVEL"] = "error"
    return env


def syncagent_world(name, out, per_host=CONCURRENCY, keep_state=False):
    state = os.path.join(WORK, name, "state")
    if not keep_state:
        fresh(state)
    inbox = fresh(os.path.join(WORK, name, "inbox"))
    config = os.path.join(WORK, name, "config.toml")
    with open(config, "w") as f:
        f.write(f'download_dir = "{out}"\nmax_active = {CONCURRENCY}\nmax_per_host = {per_host}\nnotify = "none"\n')
    return state, inbox, config


def run_syncagent(urls, out):
    """Jobs written into the inbox, then the agent until idle: end to end."""
    jobs = {f"{index:05d}.job": f'url = "{url}"\ndest = "{dest}"\n' for index, (url, dest) in enumerate(urls)}
    return run_syncagent_jobs(jobs, out, "syncagent-run")


def curl_command(urls, out):
    if len(urls) == 1:
        url, dest = urls[0]
        return ["curl", "-s", "-f", "-o", os.path.join(out, dest), url]
    listing = os.path.join(WORK, "curl.config")
    with open(listing, "w") as f:
        for url, dest in urls:
            f.write(f'url = "{url}"\noutput = "{os.path.join(out, dest)}"\n')
    return ["curl", "-s", "-f", "-Z", "--parallel-max", str(CONCURRENCY), "--config", listing]


def aria2c_command(urls, out):
    listing = os.path.join(WORK, "aria2.list")
    with open(listing, "w") as f:
        for url, dest in urls:
            f.write(f"{url}\n  out={dest}\n")
    return ["aria2c", "-q", "-i", listing, "-j", str(CONCURRENCY), "-x1", "-s1", "-d", out,
            "--file-allocation=none", "--allow-overwrite=true", "--auto-file-renaming=false",
            "--console-log-level=error", "--summary-interval=0"]


def then_sync(command):
    """What a user who needs the files on disk runs: the tool, then `sync`
    (the disk was synced before the clock started, so `sync` writes only what
    the tool left dirty)."""
    return ["sh", "-c", '"$@" && exec sync', "sh"] + command


def run_curl(urls, out):
    return timed(curl_command(urls, out))


def run_curl_then_sync(urls, out):
    return timed(then_sync(curl_command(urls, out)))


def run_aria2c(urls, out):
    return timed(aria2c_command(urls, out))


def run_aria2c_then_sync(urls, out):
    return timed(then_sync(aria2c_command(urls, out)))


def run_urlsession(urls, out):
    listing = os.path.join(WORK, "urlsession.list")
    with open(listing, "w") as f:
        for url, dest in urls:
            f.write(f"{url} {os.path.join(out, dest)}\n")
    return timed([URLSESSION_PEER, listing, str(CONCURRENCY)])


def run_syncagent_jobs(jobs_text, out, name, per_host=CONCURRENCY, keep_state=False):
    """Job files (name → TOML) dropped at once, then the agent until idle
    (with `keep_state`, on the log of the previous run of `name`)."""
    state, inbox, config = syncagent_world(name, out, per_host, keep_state)
    staging = fresh(os.path.join(WORK, name + "-jobs"))
    for job_name, text in jobs_text.items():
        with open(os.path.join(staging, job_name), "w") as f:
            f.write(text)
    script = os.path.join(WORK, name + ".sh")
    with open(script, "w") as f:
        f.write(f"""set -e
mv {staging}/*.job {inbox}/ 2>/dev/null || find {staging} -name '*.job' -exec mv -t {inbox}/ {{}} +
exec {SYNCAGENT} run --exit-when-idle --config {config} --state-dir {state} --inbox {inbox}
""")
    return timed(["bash", script], env=syncagent_env())


def segment_tools(connections):
    """syncagent with `connections = N`, aria2c -xN -sN and curl (one connection), for one file."""
    def run_syncagent_segmented(urls, out):
        (url, dest), = urls
        return run_syncagent_jobs({"big.job": f'url = "{url}"\ndest = "{dest}"\nconnections = {connections}\n'},
                                  out, "syncagent-segmented", per_host=connections)

    def run_aria2c_segmented(urls, out):
        (url, dest), = urls
        return timed(["aria2c", "-q", f"-x{connections}", f"-s{connections}", "--min-split-size=1M", "-d", out, "-o", dest,
                      "--file-allocation=none", "--console-log-level=error", "--summary-interval=0", url])

    return [("syncagent", run_syncagent_segmented), ("aria2c", run_aria2c_segmented), ("curl", run_curl)]


def update_workload(nginx, files, rounds):
    """`overwrite = "update"`: the first run downloads `files` files, a second
    run of the same jobs finds them unchanged. Returns the median times of
    both and the body bytes nginx sent during the second runs."""
    jobs = {f"{i:04d}.job": f'url = "{nginx.url(f"sync/f{i:04d}.bin")}"\ndest = "f{i:04d}.bin"\noverwrite = "update"\n'
            for i in range(files)}
    downloads, checks, sent = [], [], 0
    for round_index in range(rounds):
        out = settled_output()
        downloads.append(run_syncagent_jobs(jobs, out, "syncagent-update")[0])
        before = nginx.log_end("sync.log")
        # The same state directory: the log knows what it published.
        again = {"again-" + job_name: text for job_name, text in jobs.items()}
        checks.append(run_syncagent_jobs(again, out, "syncagent-update", keep_state=True)[0])
        sent += nginx.sent_since("sync.log", before)
        print(f"  update: round {round_index + 1}: download {downloads[-1]:.3f} s, unchanged {checks[-1]:.3f} s", flush=True)
    fresh(os.path.join(WORK, "out"))
    return statistics.median(downloads), statistics.median(checks), sent


def segmented_kill_workload(nginx, www, name, kills, seed=14):
    """A `connections = CONNECTIONS` download of `www/name` from /trickle/, killed
    with SIGKILL `kills` times, each at a random instant within a progress
    interval after that run logged ranges of its own, then run to the end.
    Returns whether the file is byte-identical, the body bytes nginx sent
    beyond the file's size (what the kills made it fetch again), the kills
    made, and the median bytes one `progressed` event added (one progress
    interval, all connections together)."""
    import random
    chance = random.Random(seed)
    out = fresh(os.path.join(WORK, "seg-kill-out"))
    state, inbox, config = syncagent_world("seg-kill", out, per_host=CONNECTIONS)
    before = nginx.log_end("trickle.log")
    with open(os.path.join(inbox, "k.job"), "w") as f:
        f.write(f'url = "{nginx.url("trickle/" + name)}"\nid = "k"\ndest = "k.bin"\nconnections = {CONNECTIONS}\n')
    database = os.path.join(state, "events.sqlite")
    ranged = lambda: count(database, "SELECT COUNT(*) FROM events WHERE task = 'k' AND type = 'progressed' "
                                     "AND json_extract(data, '$.ranges') IS NOT NULL")
    ended = lambda: count(database, "SELECT COUNT(*) FROM events WHERE task = 'k' AND type IN ('finished', 'failed')")
    made = 0
    for _ in range(kills):
        seen = ranged() if os.path.exists(database) else 0
        agent = subprocess.Popen([SYNCAGENT, "run", "--config", config, "--state-dir", state, "--inbox", inbox],
                                 env=syncagent_env(), stderr=subprocess.DEVNULL)
        logged = wait_for(lambda: ranged() > seen or ended() > 0, 60)
        time.sleep(chance.uniform(0, 1.0))
        agent.kill()
        agent.wait()
        if not logged or ended():
            break
        made += 1
    timed([SYNCAGENT, "run", "--exit-when-idle", "--config", config, "--state-dir", state, "--inbox", inbox], env=syncagent_env())
    source = os.path.join(www, name)
    size = os.path.getsize(source)
    with open(source, "rb") as a, open(os.path.join(out, "k.bin"), "rb") as b:
        identical = a.read() == b.read()
    sent = nginx.sent_since("trickle.log", before)
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        marks = [row[0] for row in db.execute("SELECT json_extract(data, '$.bytes') FROM events "
                                              "WHERE task = 'k' AND type = 'progressed' ORDER BY seq")]
    steps = [b - a for a, b in zip(marks, marks[1:]) if b > a]
    shutil.rmtree(out, ignore_errors=True)
    return identical, sent - size, made, statistics.median(steps) if steps else 0


TOOLS = [("syncagent", run_syncagent), ("curl", run_curl), ("aria2c", run_aria2c), ("URLSession", run_urlsession)]
# On the loopback, where the disk is what is raced: also the peers followed by `sync`.
DURABLE_TOOLS = TOOLS + [("curl then sync", run_curl_then_sync), ("aria2c then sync", run_aria2c_then_sync)]


class Runs:
    """One workload's rounds: each tool's wall times (in round order) and peak RSS."""

    def __init__(self, names):
        names = list(names)
        self.walls = {name: [] for name in names}
        self.rss = {name: 0 for name in names}

    def add(self, name, wall, rss):
        self.walls[name].append(wall)
        self.rss[name] = max(self.rss[name], rss)

    def median(self, name):
        return statistics.median(self.walls[name])

    def ratios(self, name, reference):
        """`name`'s time over `reference`'s, round by round (the two ran in the same round)."""
        return [a / b for a, b in zip(self.walls[name], self.walls[reference])]

    def cell(self, name, reference):
        """Median time, ratio of the medians, and the spread of the per-round ratios."""
        ratios = self.ratios(name, reference)
        spread = f"; rounds {min(ratios):.2f}–{max(ratios):.2f}×" if len(ratios) > 1 and name != reference else ""
        return f"{self.median(name):.2f} s ({self.median(name) / self.median(reference):.2f}× {reference}{spread})"

    def own_spread(self, name):
        """(fastest, slowest) round of `name`, as a fraction of its median."""
        median = self.median(name)
        return min(self.walls[name]) / median, max(self.walls[name]) / median


def transfer_workload(title, urls, expected_sizes, rounds, tools=None):
    tools = tools or TOOLS
    aged = len(urls) > MANY_FILES
    runs = Runs(name for name, _ in tools)
    for round_index in range(rounds):
        # Alternate the order so no tool always runs first (cold) or last.
        order = tools[round_index % len(tools):] + tools[:round_index % len(tools)]
        for name, run in order:
            out = settled_output(aged)
            wall, rss = run(urls, out)
            for dest, size in expected_sizes.items():
                path = os.path.join(out, dest)
                if not os.path.exists(path) or os.path.getsize(path) != size:
                    sys.exit(f"{name}: {dest} missing or wrong size after {title}")
            runs.add(name, wall, rss)
            print(f"  {title}: {name} round {round_index + 1}: {wall:.3f} s, {rss / 1024:.1f} MiB", flush=True)
    fresh(os.path.join(WORK, "out"))
    return runs


# ---------------------------------------------------------------- HLS


def hls_vod(www, segments, folder="vod", size="1280x720", bitrate="4M"):
    """Twenty seconds of noisy video from ffmpeg (ten segments of two seconds:
    ~1.2 MiB each at 720p and 4 Mbit/s), listed `segments` times over under
    fresh names in `www/folder`: a long VOD without a long encode."""
    base = fresh(os.path.join(WORK, "hls-base-" + folder))
    sh("ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
       f"testsrc2=size={size}:rate=25:duration=20,noise=alls=30:allf=t+u", "-f", "lavfi",
       "-i", "sine=frequency=440:duration=20", "-c:v", "libx264", "-preset", "ultrafast", "-b:v", bitrate,
       "-maxrate", bitrate, "-bufsize", bitrate, "-g", "50", "-c:a", "aac", "-f", "hls", "-hls_time", "2",
       "-hls_playlist_type", "vod", "-hls_segment_filename", os.path.join(base, "s%02d.ts"), os.path.join(base, "index.m3u8"))
    clips = sorted(n for n in os.listdir(base) if n.endswith(".ts"))
    out = fresh(os.path.join(www, folder))
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-TARGETDURATION:2", "#EXT-X-MEDIA-SEQUENCE:0", "#EXT-X-PLAYLIST-TYPE:VOD"]
    total = 0
    for index in range(segments):
        name = f"seg{index:04d}.ts"
        shutil.copy(os.path.join(base, clips[index % len(clips)]), os.path.join(out, name))
        total += os.path.getsize(os.path.join(out, name))
        lines += ["#EXTINF:2.000000,", name]
    lines.append("#EXT-X-ENDLIST")
    with open(os.path.join(out, "index.m3u8"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return total


def run_syncagent_hls(url, out):
    state, inbox, config = syncagent_world("syncagent-hls", out)
    with open(os.path.join(inbox, "vod.job"), "w") as f:
        f.write(f'kind = "hls"\nurl = "{url}"\ndest = "vod"\n')
    wall_rss = timed([SYNCAGENT, "run", "--exit-when-idle", "--config", config, "--state-dir", state, "--inbox", inbox],
                     env=syncagent_env())
    return wall_rss, os.path.join(out, "vod", "index.m3u8")


def run_ffmpeg_hls(url, out):
    target = os.path.join(out, "vod.ts")
    return timed(["ffmpeg", "-loglevel", "error", "-y", "-i", url, "-c", "copy", target]), target


def run_ytdlp_hls(url, out):
    target = os.path.join(out, "vod.ts")
    return timed([YTDLP, "-q", "--no-progress", "-N", str(CONCURRENCY), "--downloader", "m3u8:native", "--no-part",
                  "-o", target, url]), target


def run_streamlink_hls(url, out):
    """streamlink with as many segment threads as the others have connections."""
    target = os.path.join(out, "vod.ts")
    return timed(["streamlink", "--loglevel", "error", "--stream-segment-threads", str(CONCURRENCY),
                  "-o", target, "hls://" + url, "best"]), target


HLS_TOOLS = [("syncagent", run_syncagent_hls), ("ffmpeg", run_ffmpeg_hls), ("yt-dlp", run_ytdlp_hls)]
# Through the shaped link, where segments wait for the network: streamlink too.
SHAPED_HLS_TOOLS = HLS_TOOLS + [("streamlink", run_streamlink_hls)]

# What durability costs on this disk alone, made the grouped way: the files
# copied from the served folder by CONCURRENCY writers, each file's writeback
# started as it is written (sync_file_range), then every file fdatasync'd from
# 32 threads at once (the block layer merges concurrent flushes) and the
# folder synced once. No network.
DURABILITY_FLOOR = """
import ctypes, os, resource, sys
from concurrent.futures import ThreadPoolExecutor
# Every file stays open until its flush.
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
libc = ctypes.CDLL(None, use_errno=True)
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
SYNC_FILE_RANGE_WRITE = 2
source, target = sys.argv[1], sys.argv[2]
def write(name):
    with open(os.path.join(source, name), "rb") as f:
        data = f.read()
    fd = os.open(os.path.join(target, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    if libc.sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "sync_file_range")
    return fd
def flush(fd):
    os.fdatasync(fd)
    os.close(fd)
with ThreadPoolExecutor(int(sys.argv[3])) as writers:
    written = list(writers.map(write, sorted(n for n in os.listdir(source) if n.endswith(sys.argv[4]))))
with ThreadPoolExecutor(32) as flushers:
    list(flushers.map(flush, written))
folder = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
os.fsync(folder)
os.close(folder)
"""


def durability_floor(source, suffix, rounds):
    """Median seconds to write the files in `source` named *`suffix` durably, with nothing else to do."""
    walls = []
    for _ in range(rounds):
        out = settled_output(aged=True)
        walls.append(timed(["python3", "-c", DURABILITY_FLOOR, source, out, str(CONCURRENCY), suffix])[0])
    fresh(os.path.join(WORK, "out"))
    return statistics.median(walls)


def hls_workload(url, rounds, tools=HLS_TOOLS, title="HLS"):
    runs = Runs(name for name, _ in tools)
    for round_index in range(rounds):
        order = tools[round_index % len(tools):] + tools[:round_index % len(tools)]
        for name, run in order:
            out = settled_output(aged=True)
            (wall, rss), target = run(url, out)
            if not os.path.exists(target) or os.path.getsize(target) == 0:
                sys.exit(f"{name}: {target} missing after the {title} workload")
            runs.add(name, wall, rss)
            print(f"  {title}: {name} round {round_index + 1}: {wall:.3f} s, {rss / 1024:.1f} MiB", flush=True)
    fresh(os.path.join(WORK, "out"))
    return runs


# ---------------------------------------------------------------- a network like the real one

# One connection from a CDN: nginx's limit_rate per request.
SHAPED_RATE = "2500k"
# Each way: a 20 ms round trip.
SHAPED_DELAY_MS = 10


class ShapedLink:
    """nginx's /shaped/ (limit_rate SHAPED_RATE a connection) behind
    bench/throttle_proxy.py holding every byte SHAPED_DELAY_MS each way.
    `tc netem` in a network namespace would be the kernel's way; this
    machine's kernel has no sch_netem, so the delay is made in user space,
    pipelined (it costs each request a round trip, not throughput), with a
    connection's first request held a round trip more for the handshake."""

    def __init__(self, nginx):
        self.port = free_port()
        self.proxy = subprocess.Popen(["python3", os.path.join(ROOT, "bench", "throttle_proxy.py"), "--listen-port",
                                       str(self.port), "--target-port", str(nginx.port), "--rate", "0",
                                       "--delay-ms", str(SHAPED_DELAY_MS), "--socket-buffer", "0"])
        if not wait_for(lambda: port_open(self.port), 10):
            sys.exit("the shaped link's proxy did not start")

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/shaped/{name}"

    def stop(self):
        self.proxy.send_signal(signal.SIGTERM)
        self.proxy.wait(timeout=10)


# ---------------------------------------------------------------- syncagent alone


def replay_workload(events, rounds):
    state = fresh(os.path.join(WORK, "replay", "state"))
    pristine = os.path.join(WORK, "replay", "pristine.sqlite")
    sh(LOGGEN, pristine, str(events), stdout=subprocess.DEVNULL)
    # Fold the WAL into the main file, so copying one file copies the whole log.
    with sqlite3.connect(pristine) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    config = os.path.join(WORK, "replay", "config.toml")
    with open(config, "w") as f:
        f.write(f'download_dir = "{os.path.join(WORK, "replay", "out")}"\nnotify = "none"\n')
    inbox = fresh(os.path.join(WORK, "replay", "inbox"))
    flags = ["--config", config, "--state-dir", state, "--inbox", inbox]
    replays, startups = [], []
    for _ in range(rounds):
        shutil.copy(pristine, os.path.join(state, "events.sqlite"))
        replays.append(timed([SYNCAGENT, "replay"] + flags, env=syncagent_env()))
        startups.append(timed([SYNCAGENT, "run", "--exit-when-idle"] + flags, env=syncagent_env()))
    pick = lambda runs: (statistics.median(w for w, _ in runs), max(r for _, r in runs))
    return pick(replays), pick(startups)


def compacted_workload(events, rounds):
    """A long log compacted: how long `compact` takes, how much of the file
    is left, and start-up and `status` on what is left."""
    base = os.path.join(WORK, "compacted")
    state = fresh(os.path.join(base, "state"))
    log = os.path.join(state, "events.sqlite")
    sh(LOGGEN, log, str(events), stdout=subprocess.DEVNULL)
    with sqlite3.connect(log) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = os.path.getsize(log)
    config = os.path.join(base, "config.toml")
    with open(config, "w") as f:
        f.write(f'download_dir = "{os.path.join(base, "out")}"\nnotify = "none"\n')
    flags = ["--config", config, "--state-dir", state, "--inbox", fresh(os.path.join(base, "inbox"))]
    compact = timed([SYNCAGENT, "compact", "--older-than", "0"] + flags, env=syncagent_env())
    after = os.path.getsize(log) + (os.path.getsize(log + "-wal") if os.path.exists(log + "-wal") else 0)
    startups = [timed([SYNCAGENT, "run", "--exit-when-idle"] + flags, env=syncagent_env()) for _ in range(rounds)]
    statuses = [timed([SYNCAGENT, "status"] + flags, env=syncagent_env()) for _ in range(rounds)]
    median = lambda runs: statistics.median(w for w, _ in runs)
    return {"compact": compact[0], "before": before, "after": after, "startup": median(startups), "status": median(statuses)}


def wait_for(condition, seconds, interval=0.01):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


def count(database, sql, *params):
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as db:
            return db.execute(sql, params).fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def queued_rss_workload(nginx, jobs):
    """Peak RSS of an agent holding `jobs` queued tasks (they wait for not_before)."""
    out = fresh(os.path.join(WORK, "queued-out"))
    state, inbox, config = syncagent_world("queued", out)
    for index in range(jobs):
        with open(os.path.join(inbox, f"q{index:06d}.job"), "w") as f:
            f.write(f'url = "{nginx.url("small/f0000.bin")}"\ndest = "q{index}.bin"\nnot_before = 2099-01-01T00:00:00Z\n')
    started = time.perf_counter()
    agent = subprocess.Popen([SYNCAGENT, "run", "--config", config, "--state-dir", state, "--inbox", inbox],
                             env=syncagent_env(), stderr=subprocess.DEVNULL)
    database = os.path.join(state, "events.sqlite")
    # Polled every 0.2 s: the count scans the whole log, and polling faster took a core from the agent.
    taken = wait_for(lambda: count(database, "SELECT COUNT(*) FROM events WHERE type = 'created'") >= jobs, 600, interval=0.2)
    intake = time.perf_counter() - started
    # `status` while they wait: the agent keeps running beside it. At once, it folds their
    # `created` events; once the agent has snapshotted its intake (10,000 jobs or more), it
    # reads the snapshot, passing over the queue it does not list.
    status_command = [SYNCAGENT, "status", "--config", config, "--state-dir", state, "--inbox", inbox]
    status_at_once = timed(status_command, env=syncagent_env())[0]
    snapshotted = jobs >= 10_000 and wait_for(
        lambda: count(database, "SELECT COUNT(*) FROM events WHERE type = 'compacted'") >= 1, 120, interval=0.2)
    snapshot_after = time.perf_counter() - started - intake
    status = statistics.median(timed(status_command, env=syncagent_env())[0] for _ in range(3))
    with open(f"/proc/{agent.pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    agent.send_signal(signal.SIGTERM)
    agent.wait(timeout=60)
    if not taken:
        sys.exit("the agent did not take every queued job")
    return rss, intake, status, status_at_once, (snapshot_after if snapshotted else None)


def latency_workload(nginx, drops):
    """Milliseconds from a job's rename into the inbox to its `started` event."""
    out = fresh(os.path.join(WORK, "latency-out"))
    state, inbox, config = syncagent_world("latency", out)
    agent = subprocess.Popen([SYNCAGENT, "run", "--config", config, "--state-dir", state, "--inbox", inbox],
                             env=syncagent_env(), stderr=subprocess.DEVNULL)
    database = os.path.join(state, "events.sqlite")
    wait_for(lambda: count(database, "SELECT COUNT(*) FROM events WHERE type = 'agent_started'") >= 1, 30)
    staging = fresh(os.path.join(WORK, "latency-staging"))
    latencies = []
    for index in range(drops):
        job = os.path.join(staging, f"l{index}.job")
        with open(job, "w") as f:
            f.write(f'url = "{nginx.url("small/f0000.bin")}"\nid = "lat{index}"\ndest = "l{index}.bin"\n')
        dropped_ms = time.time() * 1000
        os.rename(job, os.path.join(inbox, f"l{index}.job"))
        wait_for(lambda: count(database, "SELECT COUNT(*) FROM events WHERE task = ? AND type = 'finished'", f"lat{index}") >= 1, 30)
        started_ms = count(database, "SELECT at_ms FROM events WHERE task = ? AND type = 'started'", f"lat{index}")
        latencies.append(started_ms - dropped_ms)
    agent.send_signal(signal.SIGTERM)
    agent.wait(timeout=30)
    return statistics.median(latencies), max(latencies)


# ---------------------------------------------------------------- uploads

UPLOAD_RATE = 20_000_000


class UploadWorld:
    """The fault server's tus and IETF sides behind a proxy that holds each
    connection to UPLOAD_RATE bytes per second, as a capped uplink would."""

    def __init__(self):
        self.root = fresh(os.path.join(WORK, "upload-server"))
        self.log = os.path.join(WORK, "upload-requests.log")
        self.received = os.path.join(WORK, "upload-received.jsonl")
        self.server_port, self.proxy_port = free_port(), free_port()
        server = os.path.join(ROOT, "Tests", "TestSupport", "fault_server.py")
        self.server = subprocess.Popen(["python3", server, "--host", "127.0.0.1", "--port", str(self.server_port), "--root",
                                        self.root, "--log", self.log, "--received", self.received])
        self.proxy = subprocess.Popen(["python3", os.path.join(ROOT, "bench", "throttle_proxy.py"), "--listen-port",
                                       str(self.proxy_port), "--target-host", "127.0.0.1", "--target-port",
                                       str(self.server_port), "--rate", str(UPLOAD_RATE)])
        wait_for(lambda: port_open(self.server_port) and port_open(self.proxy_port), 10)

    def url(self, path):
        return f"http://127.0.0.1:{self.proxy_port}/{path}"

    def patch_bytes(self):
        """Request-body bytes the server received in PATCHes so far (fault_server.py logs them)."""
        with open(self.log) as f:
            return sum(int(line.split()[-1]) for line in f if line.startswith("PATCH "))

    def whole_uploads(self):
        """Uploads the server has completed whole (not as a part of a parallel one)."""
        if not os.path.exists(self.received):
            return 0
        with open(self.received) as f:
            return sum(1 for line in f if line.strip() and not json.loads(line).get("partial"))

    def clear(self, awaiting):
        """Forgets every upload, once `awaiting` whole ones are complete: the
        server answers a tus concatenation first and assembles it after, and
        removing its parts under it made it fail."""
        wait_for(lambda: self.whole_uploads() >= awaiting, 120, interval=0.1)
        shutil.rmtree(os.path.join(self.root, ".uploads"), ignore_errors=True)

    def stop(self):
        for process in (self.proxy, self.server):
            process.terminate()
            process.wait()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    import socket
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def upload_job(url, body, extra=""):
    return f'url = "{url}"\nkind = "upload"\nbody_file = "{body}"\n{extra}'


def upload_workload(world, body, rounds):
    """Wall time of each way to send `body`, the tools alternating."""
    tools = [
        ("plain", lambda: run_syncagent_jobs({"u.job": upload_job(world.url("plain.bin"), body)}, WORK, "up-plain")),
        ("tus", lambda: run_syncagent_jobs({"u.job": upload_job(world.url("tus/"), body, 'protocol = "tus"\n')}, WORK, "up-tus")),
        ("tus, parallel = 4", lambda: run_syncagent_jobs({"u.job": upload_job(world.url("tus/"), body,
                                                                             'protocol = "tus"\nparallel = 4\n')}, WORK, "up-par")),
        ("tuspy", lambda: timed([os.path.join(ROOT, ".venv", "bin", "python"), os.path.join(ROOT, "bench", "tuspy_upload.py"),
                                 body, world.url("tus/"), "--chunk-size", str(64 << 20)])),
    ]
    results = {name: [] for name, _ in tools}
    for round_index in range(rounds):
        order = tools[round_index % len(tools):] + tools[:round_index % len(tools)]
        for name, run in order:
            whole = world.whole_uploads()
            wall, rss = run()
            world.clear(awaiting=whole + 1)
            results[name].append((wall, rss))
            print(f"  upload: {name} round {round_index + 1}: {wall:.3f} s, {rss / 1024:.1f} MiB", flush=True)
    return {name: (statistics.median(w for w, _ in runs), max(r for _, r in runs)) for name, runs in results.items()}


def upload_kill_workload(world, body):
    """A tus upload killed with SIGKILL half-way, then run to the end: the
    bytes the server received beyond the file's size, and the largest chunk."""
    out = fresh(os.path.join(WORK, "up-kill-out"))
    state, inbox, config = syncagent_world("up-kill", out)
    with open(os.path.join(inbox, "u.job"), "w") as f:
        f.write(upload_job(world.url("tus/"), body, 'protocol = "tus"\nid = "u"\n'))
    before = world.patch_bytes()
    whole = world.whole_uploads()
    size = os.path.getsize(body)
    agent = subprocess.Popen([SYNCAGENT, "run", "--config", config, "--state-dir", state, "--inbox", inbox], env=syncagent_env())
    database = os.path.join(state, "events.sqlite")
    half = lambda: os.path.exists(database) and count(database, "SELECT MAX(json_extract(data, '$.bytes')) FROM events "
                                                                 "WHERE type = 'progressed' AND task = 'u'") or 0
    wait_for(lambda: half() >= size // 2, 300)
    time.sleep(0.5)
    agent.kill()
    agent.wait()
    timed([SYNCAGENT, "run", "--exit-when-idle", "--config", config, "--state-dir", state, "--inbox", inbox], env=syncagent_env())
    chunk = count(database, "SELECT MAX(json_extract(data, '$.chunk')) FROM events WHERE type = 'progressed' AND task = 'u'") or 0
    world.clear(awaiting=whole + 1)
    return world.patch_bytes() - before - size, chunk


# ---------------------------------------------------------------- main


def build(prebuilt):
    if prebuilt:
        peer = os.path.join(ROOT, "bench", "URLSessionPeer", ".build", "release", "URLSessionPeer")
        return os.path.join(prebuilt, "syncagent"), os.path.join(prebuilt, "syncagent-loggen"), peer
    print("building (release)…", flush=True)
    # As `make run` builds it: the Swift runtime linked in statically.
    release = ["-c", "release", "--static-swift-stdlib"]
    sh("swift", "build", *release, "--product", "syncagent", cwd=ROOT)
    sh("swift", "build", *release, "--product", "syncagent-loggen", cwd=ROOT)
    peer = os.path.join(ROOT, "bench", "URLSessionPeer")
    sh("swift", "build", "-c", "release", "--package-path", peer)
    binaries = subprocess.run(["swift", "build", *release, "--show-bin-path"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    peer_bin = subprocess.run(["swift", "build", "-c", "release", "--package-path", peer, "--show-bin-path"],
                              capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(binaries, "syncagent"), os.path.join(binaries, "syncagent-loggen"), os.path.join(peer_bin, "URLSessionPeer")


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next((int(l.split()[1]) // (1024 * 1024) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split("\n")[0].split(" ")[1]
    aria = subprocess.run(["aria2c", "--version"], capture_output=True, text=True).stdout.split("\n")[0].split(" ")[-1]
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB, curl {curl}, aria2c {aria}, nginx on 127.0.0.1"


WORKLOADS = ["big", "many", "replay", "queued", "compact", "latency", "hls", "segmented", "killed", "update", "upload",
             "shaped"]


def main():
    global WORK, SYNCAGENT, LOGGEN, URLSESSION_PEER, YTDLP
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--large-rounds", type=int, default=5,
                        help="rounds of the 1 GiB file, whose spread is a result of its own")
    parser.add_argument("--quick", action="store_true", help="small sizes: try the harness, not a result")
    parser.add_argument("--only", default=",".join(WORKLOADS),
                        help="comma-separated workloads to run (a partial run leaves bench/results.md alone): "
                             + ", ".join(WORKLOADS))
    parser.add_argument("--prebuilt", metavar="DIR",
                        help="take syncagent and syncagent-loggen from DIR (and the URLSession peer as last built) "
                             "instead of building them")
    options = parser.parse_args()
    wanted = set(options.only.split(","))
    if wanted - set(WORKLOADS):
        sys.exit(f"unknown workloads: {', '.join(sorted(wanted - set(WORKLOADS)))}")
    WORK = os.environ.get("BENCH_DIR", "/tmp/syncagent-bench")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    SYNCAGENT, LOGGEN, URLSESSION_PEER = build(options.prebuilt)
    YTDLP = os.environ.get("YTDLP", shutil.which("yt-dlp") or "yt-dlp")

    big = (64 if options.quick else 1024) << 20
    smalls = 200 if options.quick else 2000
    events = 100_000 if options.quick else 1_000_000
    queued = 1_000 if options.quick else 100_000
    long_log = 1_000_000 if options.quick else 10_000_000
    segments = 20 if options.quick else 200
    capped = (32 if options.quick else 256) << 20
    short_capped = (16 if options.quick else 64) << 20
    synced = 100 if options.quick else 1000
    uploaded = (64 if options.quick else 1024) << 20

    www = fresh(os.path.join(WORK, "www"))
    write_random(os.path.join(www, "big.bin"), big)
    write_random(os.path.join(www, "capped.bin"), capped)
    write_random(os.path.join(www, "short-capped.bin"), short_capped)
    os.makedirs(os.path.join(www, "small"))
    for index in range(smalls):
        write_random(os.path.join(www, "small", f"f{index:04d}.bin"), 16 << 10)
    # The files a sync job set keeps up to date: documents and pictures, not 16 KiB crumbs.
    os.makedirs(os.path.join(www, "sync"))
    for index in range(synced):
        write_random(os.path.join(www, "sync", f"f{index:04d}.bin"), SYNCED_SIZE)
    hls_bytes = hls_vod(www, segments) if "hls" in wanted else 0
    # Through the shaped link: ~160 KiB segments (640 kbit/s), so ffmpeg's one segment at a time stays under a minute.
    shaped_hls_bytes = hls_vod(www, segments, "vod-small", "640x360", "640k") if "shaped" in wanted else 0
    results = {}
    nginx = Nginx(www)
    try:
        if "big" in wanted:
            print(f"1. one {big >> 20} MiB file", flush=True)
            results["big"] = transfer_workload("1 file", [(nginx.url("big.bin"), "big.bin")], {"big.bin": big},
                                               options.large_rounds, tools=DURABLE_TOOLS)
        if "many" in wanted:
            print(f"2. {smalls} files of 16 KiB", flush=True)
            empty_trash()
            many_urls = [(nginx.url(f"small/f{i:04d}.bin"), f"f{i:04d}.bin") for i in range(smalls)]
            results["many"] = transfer_workload("many files", many_urls, {d: 16 << 10 for _, d in many_urls},
                                                options.rounds, tools=DURABLE_TOOLS)
            results["many floor"] = durability_floor(os.path.join(www, "small"), ".bin", options.rounds)
        if "replay" in wanted:
            print(f"3. replay of {events} events", flush=True)
            results["replay"] = replay_workload(events, options.rounds)
        if "queued" in wanted:
            print(f"4. {queued} queued jobs", flush=True)
            results["queued"] = queued_rss_workload(nginx, queued)
        if "compact" in wanted:
            print(f"4b. a log of {long_log:,} events, compacted", flush=True)
            results["compact"] = compacted_workload(long_log, options.rounds)
        if "latency" in wanted:
            print("5. inbox-to-started latency", flush=True)
            results["latency"] = latency_workload(nginx, 50)
        if "hls" in wanted:
            print(f"6. a {segments}-segment HLS VOD", flush=True)
            empty_trash()
            results["hls"] = hls_workload(nginx.url("vod/index.m3u8"), options.rounds)
            results["hls floor"] = durability_floor(os.path.join(www, "vod"), ".ts", options.rounds)
        if "segmented" in wanted:
            for rate, name, size in [("10 MB/s", "capped", capped), ("5 MB/s", "capped5", short_capped)]:
                print(f"7. {size >> 20} MiB at {rate} per connection, {CONNECTIONS} connections", flush=True)
                source = "capped.bin" if name == "capped" else "short-capped.bin"
                results["segmented " + name] = (size, rate, transfer_workload(
                    f"segmented {size >> 20} MiB", [(nginx.url(f"{name}/{source}"), "big.bin")], {"big.bin": size},
                    options.rounds, tools=segment_tools(CONNECTIONS)))
        if "killed" in wanted:
            print(f"7b. {capped >> 20} MiB over {CONNECTIONS} connections at 1 MiB/s each, killed {KILLS} times", flush=True)
            results["killed"] = segmented_kill_workload(nginx, www, "capped.bin", KILLS)
        if "update" in wanted:
            print(f"8. {synced} files of {SYNCED_SIZE >> 10} KiB with overwrite = \"update\"", flush=True)
            empty_trash()
            results["update"] = update_workload(nginx, synced, options.rounds)
        if "shaped" in wanted:
            link = ShapedLink(nginx)
            try:
                print(f"10. {smalls} files of 16 KiB through the shaped link", flush=True)
                empty_trash()
                shaped_urls = [(link.url(f"small/f{i:04d}.bin"), f"f{i:04d}.bin") for i in range(smalls)]
                results["shaped many"] = transfer_workload("shaped files", shaped_urls, {d: 16 << 10 for _, d in shaped_urls},
                                                           options.rounds)
                print(f"11. a {segments}-segment HLS VOD through the shaped link", flush=True)
                empty_trash()
                results["shaped hls"] = hls_workload(link.url("vod-small/index.m3u8"), options.rounds,
                                                     tools=SHAPED_HLS_TOOLS, title="shaped HLS")
            finally:
                link.stop()
    finally:
        nginx.stop()
    if "upload" in wanted:
        empty_trash()
        print(f"9. a {uploaded >> 20} MiB upload at {UPLOAD_RATE // 1_000_000} MB/s per connection", flush=True)
        body = os.path.join(WORK, "upload.bin")
        write_random(body, uploaded)
        world = UploadWorld()
        try:
            # Rate-limited, so steady: one round is a result (each takes about a minute).
            results["upload"] = upload_workload(world, body, 1), upload_kill_workload(world, body)
        finally:
            world.stop()

    table = "\n".join(result_lines(results, options, big, smalls, events, queued, long_log, segments, hls_bytes,
                                    shaped_hls_bytes, synced, uploaded))
    print("\n" + table)
    if not options.quick and not options.prebuilt and wanted == set(WORKLOADS):
        with open(os.path.join(ROOT, "bench", "results.md"), "w") as f:
            f.write(f"<!-- make bench, {time.strftime('%Y-%m-%d')} -->\n{table}\n")


def result_lines(results, options, big, smalls, events, queued, long_log, segments, hls_bytes, shaped_hls_bytes, synced,
                 uploaded):
    mib = lambda kib: f"{kib / 1024:.1f} MiB"
    lines = [
        f"Machine: {machine()}. {options.rounds} rounds ({options.large_rounds} for the {big >> 20} MiB file), medians; "
        "each ratio is of the medians, with the spread of the ratios round by round (the tools alternate within a round); "
        f"concurrency {CONCURRENCY}; peak RSS is the highest of the rounds.",
    ]

    def transfer_table(title, runs, tools, reference):
        names = [n for n, _ in tools]
        table = ["", f"| {title} | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
                 "| wall time | " + " | ".join(runs.cell(n, reference) for n in names) + " |",
                 "| peak RSS | " + " | ".join(mib(runs.rss[n]) for n in names) + " |"]
        return table

    if "big" in results:
        runs = results["big"]
        lines += transfer_table(f"one {big >> 20} MiB file, loopback", runs, DURABLE_TOOLS, "curl")
        fast, slow = runs.own_spread("syncagent")
        curl_fast, curl_slow = runs.own_spread("curl")
        lines += ["", f"Spread of the {options.large_rounds} rounds, fastest and slowest against the tool's own median: "
                      f"syncagent {fast:.2f}–{slow:.2f}, curl {curl_fast:.2f}–{curl_slow:.2f}; syncagent against curl then sync: "
                      f"{runs.cell('syncagent', 'curl then sync')}."]
    if "many" in results:
        runs = results["many"]
        lines += transfer_table(f"{smalls} × 16 KiB files, loopback", runs, DURABLE_TOOLS, "curl")
        floor = results["many floor"]
        lines += ["", f"syncagent against curl then sync: {runs.cell('syncagent', 'curl then sync')}. "
                      f"The disk alone (the {smalls} files written, their writeback started as each is written, then "
                      f"fdatasync'd 32 at a time and the folder synced; no network): {floor:.2f} s "
                      f"({floor / runs.median('curl'):.2f}× curl, which makes nothing durable)."]
    if "hls" in results:
        runs = results["hls"]
        lines += transfer_table(f"{segments}-segment HLS VOD ({hls_bytes / (1 << 20):.0f} MiB), loopback", runs, HLS_TOOLS, "ffmpeg")
        floor = results["hls floor"]
        lines += ["", f"The disk alone (the same segments made durable the grouped way, no network): "
                      f"{floor:.2f} s ({floor / runs.median('ffmpeg'):.2f}× ffmpeg, which makes nothing durable)."]
    if "shaped many" in results:
        lines += ["", f"Through a shaped link: a {2 * SHAPED_DELAY_MS} ms round trip and nginx's `limit_rate {SHAPED_RATE}` "
                      "per connection (see `ShapedLink`)."]
        lines += transfer_table(f"{smalls} × 16 KiB files, shaped", results["shaped many"], TOOLS, "curl")
        lines += transfer_table(f"{segments}-segment HLS VOD ({shaped_hls_bytes / (1 << 20):.0f} MiB), shaped",
                                results["shaped hls"], SHAPED_HLS_TOOLS, "ffmpeg")
        runs = results["shaped hls"]
        lines += ["", "syncagent against yt-dlp and streamlink: " + runs.cell("syncagent", "yt-dlp") + "; "
                  + runs.cell("syncagent", "streamlink") + "."]
    for key in ("segmented capped", "segmented capped5"):
        if key in results:
            size, rate, runs = results[key]
            tools = segment_tools(CONNECTIONS)
            lines += transfer_table(f"{size >> 20} MiB, nginx `limit_rate` {rate} per connection: syncagent "
                                    f"`connections = {CONNECTIONS}`, aria2c `-x{CONNECTIONS} -s{CONNECTIONS}`",
                                    runs, tools, "aria2c")
    if "upload" in results:
        uploads, (resent, resume_chunk) = results["upload"]
        plain = uploads["plain"][0]
        lines += [
            "",
            f"| {uploaded >> 20} MiB upload, {UPLOAD_RATE // 1_000_000} MB/s per connection | " + " | ".join(uploads) + " |",
            "|---|---|---|---|---|",
            "| wall time | " + " | ".join(f"{u[0]:.2f} s ({plain / u[0]:.2f}× plain's throughput)" for u in uploads.values()) + " |",
            "| peak RSS | " + " | ".join(mib(u[1]) for u in uploads.values()) + " |",
        ]
    lines += ["", "| syncagent alone | figure | target |", "|---|---|---|"]
    if "replay" in results:
        replay, startup = results["replay"]
        lines += [
            f"| `replay` of {events:,} events | {replay[0]:.2f} s, peak RSS {mib(replay[1])} | ≤ 2 s |",
            f"| agent start-up on that log (`run --exit-when-idle`) | {startup[0]:.2f} s, peak RSS {mib(startup[1])} | ≤ 2 s |",
            f"| `replay` of {events:,} raw events (issue 12) | {replay[0]:.2f} s | ≤ 1.0 s |",
        ]
    if "queued" in results:
        queued_rss, intake, queued_status, queued_status_at_once, queued_snapshot = results["queued"]
        lines += [
            f"| peak RSS holding {queued:,} queued jobs | {mib(queued_rss)} | ≤ 64 MiB |",
            f"| {queued:,} queued jobs: all taken | {intake:.2f} s | ≤ 10 s |",
            f"| `status` while {queued:,} jobs wait | {queued_status * 1000:.0f} ms"
            + (f" (the agent's snapshot of them written {queued_snapshot:.1f} s after the last was taken;"
               f" before it, {queued_status_at_once * 1000:.0f} ms)" if queued_snapshot is not None
               else f" (no snapshot of them; at once {queued_status_at_once * 1000:.0f} ms)") + " | ≤ 100 ms |",
        ]
    if "compact" in results:
        compacted = results["compact"]
        lines += [
            f"| `compact` of a {long_log:,}-event log | {compacted['compact']:.1f} s; file {compacted['after'] / compacted['before'] * 100:.1f}% "
            f"of before ({compacted['before'] / (1 << 20):.0f} MiB → {compacted['after'] / (1 << 20):.1f} MiB) | ≤ 2% |",
            f"| agent start-up on it, compacted | {compacted['startup'] * 1000:.0f} ms | ≤ 100 ms |",
            f"| `status` on it, compacted | {compacted['status'] * 1000:.0f} ms | ≤ 50 ms |",
        ]
    if "update" in results:
        update_download, update_check, update_sent = results["update"]
        lines.append(
            f"| {synced:,} unchanged files of {SYNCED_SIZE >> 10} KiB, `overwrite = \"update\"` | {update_check:.2f} s ({update_check / update_download:.2f}× "
            f"downloading them, {update_download:.2f} s); body bytes nginx sent: {update_sent} | ≤ 0.3×, 0 bytes |")
    if "segmented capped" in results:
        runs = results["segmented capped"][2]
        lines.append(f"| `connections = {CONNECTIONS}` against curl's one connection | {runs.median('syncagent') / runs.median('curl'):.2f}× curl "
                     f"| ≤ 0.2× |")
    if "killed" in results:
        killed = results["killed"]
        lines.append(
            f"| `connections = {CONNECTIONS}` killed with SIGKILL {killed[2]} times | "
            f"{'byte-identical' if killed[0] else 'NOT byte-identical'}; fetched again: "
            f"{killed[1] / max(killed[2], 1) / CONNECTIONS / (1 << 20):.2f} MiB per range per kill, where one progress interval "
            f"is {killed[3] / CONNECTIONS / (1 << 20):.2f} MiB per range | identical; ≤ one interval per range per kill |")
    if "latency" in results:
        latency, worst = results["latency"]
        lines.append(f"| inbox rename → `started` | median {latency:.1f} ms, worst {worst:.1f} ms (50 drops) | median ≤ 10 ms |")
    if "upload" in results:
        uploads, (resent, resume_chunk) = results["upload"]
        plain = uploads["plain"][0]
        lines += [
            f"| tus `parallel = 4` against plain | {plain / uploads['tus, parallel = 4'][0]:.2f}× plain's throughput | ≥ 3.5× |",
            f"| tus upload killed half-way, resumed | {resent / (1 << 20):.1f} MiB received twice; chunk {resume_chunk / (1 << 20):.1f} MiB "
            f"| ≤ one chunk |",
        ]
    if lines[-1] == "|---|---|---|":
        lines = lines[:-3]
    return lines


if __name__ == "__main__":
    main()
