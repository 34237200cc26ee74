#!/usr/bin/env bash
# Captures what a syncagent binary prints for each fixture log here: the
# golden files FixtureLogTests compares with. Run once, with the binary of the
# commit that wrote the logs (README.md); never again after the engine
# changed: the point of the goldens is that later builds print the same.
#
#   Tests/Fixtures/logs/capture_golden.sh [path/to/syncagent [FIXTURE…]]
#
# With FIXTURE names (folders here), only those: a fixture added later is
# captured by the binary of its own commit, and the others are left alone.
#
# Each command runs as the CLI tests run the binary (AgentHarness): a fresh
# HOME and XDG folders, --config/--state-dir/--inbox, on a COPY of the log
# (opening a WAL log writes -wal and -shm files beside it). The state
# folder's path, which `replay` prints, is written as $STATE_DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-$here/../../../.build/debug/syncagent}
shift || true
fixtures=("$here"/*/)
if [ "$#" -gt 0 ]; then
    fixtures=()
    for name in "$@"; do fixtures+=("$here/$name/"); done
fi

# golden file name, then the command line
commands=(
    "replay.json|replay --json"
    "replay.txt|replay"
    "events.jsonl|events --json"
    "events.txt|events"
    "status.json|status --json"
    "status.txt|status"
)

for fixture in "${fixtures[@]}"; do
    fixture=${fixture%/}
    work=$(mktemp -d)
    mkdir -p "$work/state" "$work/inbox" "$work/downloads" "$work/home"
    printf 'download_dir = "%s"\n' "$work/downloads" > "$work/config.toml"
    cp "$fixture/events.sqlite" "$work/state/events.sqlite"
    for entry in "${commands[@]}"; do
        golden=${entry%%|*}
        read -r -a words <<< "${entry#*|}"
        status=0
        env -i HOME="$work/home" PATH="${PATH:-/usr/bin:/bin}" \
            XDG_CONFIG_HOME="$work/home/.config" XDG_STATE_HOME="$work/home/.local/state" \
            XDG_DATA_HOME="$work/home/.local/share" SYNCAGENT_LOG_LEVEL=debug \
            "$binary" "${words[0]}" --config "$work/config.toml" --state-dir "$work/state" --inbox "$work/inbox" \
            "${words[@]:1}" > "$work/out" 2> "$work/err" < /dev/null || status=$?
        if [ "$status" -ne 0 ]; then
            echo "$(basename "$fixture"): syncagent ${entry#*|} exited $status: $(cat "$work/err")" >&2
            exit 1
        fi
        sed "s|$work/state|\$STATE_DIR|g" "$work/out" > "$fixture/$golden"
        if [ -s "$work/err" ]; then
            sed "s|$work/state|\$STATE_DIR|g" "$work/err" > "$fixture/$golden.stderr"
        else
            rm -f "$fixture/$golden.stderr"
        fi
    done
    rm -rf "$work"
    echo "captured $(basename "$fixture")"
done
