#!/usr/bin/env bash
# Black-box conformance of job and config files to TOML 1.0, against the
# official toml-lang/toml-test suite (not shipped here: pass its tests/ folder).
#   bench/toml-test.sh PATH/TO/toml-test/tests [syncagent binary]
# Each document of files-toml-1.0.0 is given to `syncagent status --config`:
# a syntax error means "rejected", anything else (an unknown key, say)
# means the TOML was accepted. Prints the four counts and the crashes.
set -uo pipefail
suite=${1:?the toml-test tests/ folder}
bin=${2:-$(dirname "$0")/../.build/debug/syncagent}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
declare -A count=([valid_accepted]=0 [valid_rejected]=0 [invalid_accepted]=0 [invalid_rejected]=0 [crashes]=0)
while read -r file; do
  [[ $file == *.toml ]] || continue
  err=$(HOME=$scratch "$bin" status --config "$suite/$file" --state-dir "$scratch/state" --inbox "$scratch/inbox" 2>&1 >/dev/null | tr -d '\0')
  status=$?
  (( status > 128 )) && { count[crashes]=$((count[crashes] + 1)); echo "crash: $file"; }
  if grep -q "is not valid TOML\|not UTF-8\|cannot read the config" <<<"$err"; then verdict=rejected; else verdict=accepted; fi
  kind=${file%%/*}
  count[${kind}_$verdict]=$((count[${kind}_$verdict] + 1))
  [[ $kind/$verdict == invalid/accepted || $kind/$verdict == valid/rejected ]] && echo "$kind document $verdict: $file ${err:0:160}"
done < "$suite/files-toml-1.0.0"
echo "valid: ${count[valid_accepted]} accepted, ${count[valid_rejected]} rejected; invalid: ${count[invalid_accepted]} accepted, ${count[invalid_rejected]} rejected; crashes: ${count[crashes]}"
