#!/usr/bin/env python3
"""Instructions the agent spends per small file, counted by callgrind.

Wall times on a shared machine swing by 2×; instruction counts do not. The
agent takes N job files (16 KiB each, from nginx on 127.0.0.1) from its
inbox under `valgrind --tool=callgrind`, once with --small files and once
with --large; the difference divided by the difference in files is the
cost of one file, with start-up and shut-down cancelled out. Every thread
is counted (the agent's loop, libcurl, the flush threads, SQLite).

  python3 bench/profile.py --binary .build/release/syncagent [--small 100 --large 300]
      [--top 40] [--keep DIR]

Prints the instructions per file and the functions that cost the most per
file (self and inclusive, demangled), from the larger run minus the smaller.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as bench  # noqa: E402  (nginx, fresh folders)

SIZE = 16 << 10


def profile(binary, urls, name):
    """Runs the agent on `urls` under callgrind: the output file's path."""
    out = bench.fresh(os.path.join(bench.WORK, name + "-out"))
    state, inbox, config = bench.syncagent_world(name, out)
    for index, url in enumerate(urls):
        with open(os.path.join(inbox, f"{index:05d}.job"), "w") as f:
            f.write(f'url = "{url}"\ndest = "f{index:05d}.bin"\n')
    profile_file = os.path.join(bench.WORK, name + ".callgrind")
    subprocess.run(["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={profile_file}",
                    binary, "run", "--exit-when-idle", "--config", config, "--state-dir", state, "--inbox", inbox],
                   env=bench.syncagent_env(), check=True)
    landed = len(os.listdir(out))
    if landed != len(urls):
        sys.exit(f"{name}: {landed} of {len(urls)} files landed")
    return profile_file


def functions(profile_file, inclusive):
    """{function: instructions} from callgrind_annotate, demangled."""
    annotate = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}",
                               "--threshold=100", profile_file], capture_output=True, text=True, check=True).stdout
    costs = {}
    total = None
    for line in annotate.splitlines():
        match = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if not match:
            continue
        count = int(match.group(1).replace(",", ""))
        label = match.group(2)
        if "PROGRAM TOTALS" in label:
            total = count
            continue
        symbol = label.split(":", 1)[1] if ":" in label else label
        symbol = re.sub(r"\s*\[[^\]]*\]$", "", symbol).strip()
        costs[symbol] = costs.get(symbol, 0) + count
    demangled = subprocess.run(["swift", "demangle", "--simplified"], input="\n".join(costs), capture_output=True,
                               text=True, check=True).stdout.splitlines()
    named = {}
    for (symbol, count), shown in zip(costs.items(), demangled):
        named[shown] = named.get(shown, 0) + count
    return total, named


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=300)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--keep", help="where to keep the work folder (default: a temporary one)")
    options = parser.parse_args()
    bench.WORK = options.keep or tempfile.mkdtemp(prefix="syncagent-profile-")
    os.makedirs(bench.WORK, exist_ok=True)
    # mkdtemp makes it 0700: nginx's workers (not root) must reach the files served from it.
    os.chmod(bench.WORK, 0o755)
    www = bench.fresh(os.path.join(bench.WORK, "www"))
    os.makedirs(os.path.join(www, "small"))
    for index in range(options.large):
        bench.write_random(os.path.join(www, "small", f"f{index:05d}.bin"), SIZE)
    nginx = bench.Nginx(www)
    try:
        urls = [nginx.url(f"small/f{index:05d}.bin") for index in range(options.large)]
        # valgrind 3.19 cannot read Swift 6.3's DWARF 5: the symbol table names the functions.
        binary = os.path.join(bench.WORK, "syncagent")
        bench.sh("strip", "--strip-debug", "-o", binary, options.binary)
        small = profile(binary, urls[:options.small], "small")
        large = profile(binary, urls, "large")
    finally:
        nginx.stop()
    files = options.large - options.small
    small_total, _ = functions(small, inclusive=False)
    large_total, _ = functions(large, inclusive=False)
    print(f"instructions: {small_total:,} for {options.small} files, {large_total:,} for {options.large}")
    print(f"per file: {(large_total - small_total) / files:,.0f}")
    for inclusive in (False, True):
        _, before = functions(small, inclusive)
        _, after = functions(large, inclusive)
        per_file = {name: (after.get(name, 0) - before.get(name, 0)) / files for name in after}
        print(f"\n{'inclusive' if inclusive else 'self'}, per file:")
        for name, cost in sorted(per_file.items(), key=lambda item: -item[1])[:options.top]:
            print(f"{cost:>12,.0f}  {name[:150]}")
    print(f"\nprofiles: {small} {large}")


if __name__ == "__main__":
    main()
