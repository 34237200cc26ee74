#!/usr/bin/env python3
"""One file over 8 connections from an nginx that caps each connection
(limit_rate): syncagent (`connections = 8`) against aria2c -x8 -s8 -k1M,
run in turns in one script so both see the same machine.

    python3 bench/segmented.py --syncagent NAME=PATH [--syncagent NAME=PATH …] [--rounds 5]

Prints, per workload, each tool's median wall time with its spread (min–max)
and its ratio to aria2c's median. The machine's load (`uptime`) is printed
before and after: quote it with the numbers.
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

CONNECTIONS = 8
# (file size, nginx's limit_rate per connection): issue 43 item 6's short download, and make bench's row.
WORKLOADS = [(64 << 20, "5m"), (256 << 20, "10m")]


def load():
    return open("/proc/loadavg").read().split()[:3]


def start_nginx(work, www, rates):
    prefix = os.path.join(work, "nginx")
    os.makedirs(os.path.join(prefix, "logs"))
    port = 19600 + os.getpid() % 1000
    locations = "\n".join(f"    location /r{rate}/ {{ alias {www}/; limit_rate {rate}; }}" for rate in rates)
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  server {{
    listen 127.0.0.1:{port};
{locations}
  }}
}}
""")
    process = subprocess.Popen(["/usr/sbin/nginx", "-p", prefix, "-c", conf])
    for _ in range(100):
        if subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}/"]).returncode in (0, 22):
            break
        time.sleep(0.05)
    return process, port


def timed(command, env=None):
    started = time.perf_counter()
    result = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {' '.join(command)}\n{result.stderr.decode()[-2000:]}")
    return wall


def run_syncagent(binary, work, url, out):
    state, inbox = os.path.join(work, "state"), os.path.join(work, "inbox")
    for path in (state, inbox):
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(f'download_dir = "{out}"\nmax_per_host = {CONNECTIONS}\nnotify = "none"\n')
    with open(os.path.join(inbox, "big.job"), "w") as f:
        f.write(f'url = "{url}"\ndest = "big.bin"\nconnections = {CONNECTIONS}\n')
    env = dict(os.environ, SYNCAGENT_LOG_LEVEL="error")
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    return timed([binary, "run", "--exit-when-idle", "--config", config, "--state-dir", state, "--inbox", inbox], env=env)


def run_aria2c(work, url, out):
    return timed(["aria2c", "-q", f"-x{CONNECTIONS}", f"-s{CONNECTIONS}", "-k1M", "-d", out, "-o", "big.bin",
                  "--file-allocation=none", "--console-log-level=error", "--summary-interval=0", url])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--syncagent", action="append", required=True, help="NAME=PATH of a syncagent binary")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    agents = [entry.split("=", 1) for entry in options.syncagent]
    work = tempfile.mkdtemp(prefix="segbench-")
    # nginx's worker runs as another user: it must read the files.
    os.chmod(work, 0o755)
    www = os.path.join(work, "www")
    os.makedirs(www, mode=0o755)
    for size, _ in WORKLOADS:
        with open(os.path.join(www, f"f{size >> 20}.bin"), "wb") as f:
            f.write(os.urandom(size))
        os.chmod(os.path.join(www, f"f{size >> 20}.bin"), 0o644)
    nginx, port = start_nginx(work, www, sorted({rate for _, rate in WORKLOADS}))
    print(f"load before: {' '.join(load())}", flush=True)
    try:
        for size, rate in WORKLOADS:
            url = f"http://127.0.0.1:{port}/r{rate}/f{size >> 20}.bin"
            tools = [(name, lambda out, path=path: run_syncagent(path, work, url, out)) for name, path in agents]
            tools.append(("aria2c", lambda out: run_aria2c(work, url, out)))
            times = {name: [] for name, _ in tools}
            for round_index in range(options.rounds):
                # Each round in another order: no tool always runs right after another.
                order = tools[round_index % len(tools):] + tools[:round_index % len(tools)]
                for name, run in order:
                    out = os.path.join(work, "out")
                    shutil.rmtree(out, ignore_errors=True)
                    os.makedirs(out)
                    os.sync()
                    times[name].append(run(out))
                    if os.path.getsize(os.path.join(out, "big.bin")) != size:
                        raise SystemExit(f"{name}: wrong size")
            aria = statistics.median(times["aria2c"])
            print(f"{size >> 20} MiB, limit_rate {rate} per connection, {CONNECTIONS} connections, {options.rounds} rounds:")
            for name, values in times.items():
                median = statistics.median(values)
                print(f"  {name:>12}: median {median:.3f} s (min {min(values):.3f}, max {max(values):.3f}), "
                      f"{median / aria:.2f}x aria2c   [{' '.join(f'{v:.3f}' for v in values)}]", flush=True)
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait(timeout=10)
        print(f"load after: {' '.join(load())}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
