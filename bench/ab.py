#!/usr/bin/env python3
"""Two builds of syncagent in the same run: is a change within noise?

A refactor is proven by what does not change. This races the release build
of a former revision ("before", built in a temporary worktree) against the
working tree's ("after") on the workloads of bench/run.py that exercise the
whole engine: one 1 GiB file, 2,000 files of 16 KiB, a 200-segment HLS VOD
and `replay` of a 1,000,000-event log. The two alternate in every round, on
the same nginx and the same settled disk, so the machine's noise falls on
both. Prints, per workload, each build's median and the after/before ratio
with its spread (lowest and highest of the rounds' ratios).

  python3 bench/ab.py --before REVISION [--rounds N] [--quick]
  make bench-ab BEFORE=REVISION
"""
import argparse
import os
import sqlite3
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as bench  # noqa: E402  (the harness: nginx, settled folders, timing)


def build_revision(revision, worktree):
    """The release binary of `revision`, built as `make run` builds it."""
    if not os.path.isdir(worktree):
        bench.sh("git", "worktree", "add", "--detach", worktree, revision, cwd=bench.ROOT)
    else:
        bench.sh("git", "checkout", "--detach", "--quiet", revision, cwd=worktree)
    release = ["-c", "release", "--static-swift-stdlib"]
    bench.sh("swift", "build", *release, "--product", "syncagent", cwd=worktree)
    path = subprocess.run(["swift", "build", *release, "--show-bin-path"], cwd=worktree,
                          capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(path, "syncagent")


def as_build(binary, run):
    """`run` of bench/run.py with `binary` as the agent."""
    def with_binary(*args):
        bench.SYNCAGENT = binary
        return run(*args)
    return with_binary


def race(rounds, builds, run_once):
    """{name: [wall seconds per round]} of run_once(name, thing) for each
    (name, thing) of `builds`, which alternate going first."""
    walls = {name: [] for name, _ in builds}
    for round_index in range(rounds):
        order = builds[round_index % len(builds):] + builds[:round_index % len(builds)]
        for name, binary in order:
            walls[name].append(run_once(name, binary))
    return walls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes: try the harness, not a result")
    options = parser.parse_args()
    bench.WORK = os.environ.get("BENCH_DIR", "/tmp/syncagent-ab")
    worktree = os.path.join(os.path.dirname(bench.WORK), os.path.basename(bench.WORK) + "-before")
    before = build_revision(options.before, worktree)
    after, bench.LOGGEN, _ = bench.build()
    subprocess.run(["rm", "-rf", bench.WORK], check=True)
    os.makedirs(bench.WORK)

    big = (64 if options.quick else 1024) << 20
    smalls = 200 if options.quick else 2000
    segments = 20 if options.quick else 200
    events = 100_000 if options.quick else 1_000_000
    www = bench.fresh(os.path.join(bench.WORK, "www"))
    bench.write_random(os.path.join(www, "big.bin"), big)
    os.makedirs(os.path.join(www, "small"))
    for index in range(smalls):
        bench.write_random(os.path.join(www, "small", f"f{index:04d}.bin"), 16 << 10)
    bench.hls_vod(www, segments)
    builds = [("before", before), ("after", after)]
    tools = [(name, as_build(binary, bench.run_syncagent)) for name, binary in builds]
    results = {}
    nginx = bench.Nginx(www)
    try:
        print(f"one {big >> 20} MiB file", flush=True)
        big_url = [(nginx.url("big.bin"), "big.bin")]
        results[f"one {big >> 20} MiB file"] = per_round(bench.transfer_workload, "1 file", big_url,
                                                         {"big.bin": big}, options.rounds, tools)
        print(f"{smalls} files of 16 KiB", flush=True)
        bench.empty_trash()
        urls = [(nginx.url(f"small/f{i:04d}.bin"), f"f{i:04d}.bin") for i in range(smalls)]
        results[f"{smalls} × 16 KiB files"] = per_round(bench.transfer_workload, "many files", urls,
                                                       {d: 16 << 10 for _, d in urls}, options.rounds, tools)
        print(f"a {segments}-segment HLS VOD", flush=True)
        bench.empty_trash()
        url = nginx.url("vod/index.m3u8")

        def hls_once(name, binary):
            bench.SYNCAGENT = binary
            out = bench.settled_output(aged=True)
            (wall, _), target = bench.run_syncagent_hls(url, out)
            if not os.path.exists(target):
                sys.exit(f"{name}: {target} missing after the HLS workload")
            print(f"  HLS: {name}: {wall:.3f} s", flush=True)
            return wall
        results[f"{segments}-segment HLS VOD"] = race(options.rounds, builds, hls_once)
    finally:
        nginx.stop()
    print(f"replay of {events:,} events", flush=True)
    results[f"`replay` of {events:,} events"] = replay_race(events, options.rounds, builds)
    table(options, results)


def per_round(workload, title, urls, sizes, rounds, tools):
    """transfer_workload's rounds, kept one by one (it returns only medians)."""
    return race(rounds, tools, lambda name, run: workload(title, urls, sizes, 1, [(name, run)])[name][0])


def replay_race(events, rounds, builds):
    state = bench.fresh(os.path.join(bench.WORK, "replay", "state"))
    pristine = os.path.join(bench.WORK, "replay", "pristine.sqlite")
    bench.sh(bench.LOGGEN, pristine, str(events), stdout=subprocess.DEVNULL)
    with sqlite3.connect(pristine) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    config = os.path.join(bench.WORK, "replay", "config.toml")
    with open(config, "w") as f:
        f.write(f'download_dir = "{os.path.join(bench.WORK, "replay", "out")}"\nnotify = "none"\n')
    flags = ["--config", config, "--state-dir", state, "--inbox", bench.fresh(os.path.join(bench.WORK, "replay", "inbox"))]

    def once(name, binary):
        subprocess.run(["cp", pristine, os.path.join(state, "events.sqlite")], check=True)
        wall, _ = bench.timed([binary, "replay"] + flags, env=bench.syncagent_env())
        print(f"  replay: {name}: {wall:.3f} s", flush=True)
        return wall
    return race(rounds, builds, once)


def table(options, results):
    lines = [f"Before: `{options.before}`; after: the working tree. {options.rounds} rounds, the builds alternating;"
             " ratio = after ÷ before, median of the rounds' ratios (lowest–highest).", "",
             "| workload | before | after | ratio |", "|---|---|---|---|"]
    for workload, walls in results.items():
        ratios = sorted(a / b for a, b in zip(walls["after"], walls["before"]))
        lines.append(f"| {workload} | {statistics.median(walls['before']):.3f} s | {statistics.median(walls['after']):.3f} s"
                     f" | {statistics.median(ratios):.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f}) |")
    print("\n".join(lines))
    with open(os.path.join(bench.ROOT, "bench", "ab-results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
