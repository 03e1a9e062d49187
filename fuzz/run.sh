#!/usr/bin/env bash
# Runs each libFuzzer target for a bounded time over its seed corpus:
#   fuzz/run.sh BUILD_DIR [SECONDS]       (default 60 s per target, or FUZZ_SECONDS)
# BUILD_DIR is a build configured with -DVKGATE_BUILD_FUZZERS=ON (clang).
# New inputs go to a scratch corpus, not into the repository. A crash, a hang
# (-timeout), a leak or any sanitizer report stops that target with a nonzero
# status; its input is copied to fuzz/regressions/<target>/ (then commit it:
# the test suite replays that directory, tests/test_fuzz_corpus.cpp) and
# printed as base64. One summary line per target; exit 1 if any failed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: fuzz/run.sh BUILD_DIR [SECONDS]}
seconds=${2:-${FUZZ_SECONDS:-60}}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/vkgate_fuzz_run.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for target in safetensors config checkpoint_index tokenizer gguf chat; do
  exe=$build/fuzz/fuzz_$target
  if [ ! -x "$exe" ]; then
    echo "fuzz: $target: FAILED (no executable $exe)"
    failed=1
    continue
  fi
  mkdir -p "$scratch/$target/corpus" "$scratch/$target/artifacts"
  log=$scratch/$target/log
  start=$(date +%s)
  # libFuzzer exits on a corpus directory that does not exist, and git keeps no
  # empty directory: a target with no regression yet has none in a clone.
  seeds=("$here/corpus/$target")
  [ -d "$here/regressions/$target" ] && seeds+=("$here/regressions/$target")
  # -fork would survive crashes; one process keeps the first finding.
  "$exe" "$scratch/$target/corpus" "${seeds[@]}" \
    -dict="$here/$target.dict" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$scratch/$target/artifacts/" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  elapsed=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    echo "fuzz: $target: OK, ${runs:-?} inputs in ${elapsed} s, coverage ${cov:-?} edges, no crash, hang, leak or sanitizer report"
  else
    failed=1
    echo "fuzz: $target: FAILED (status $rc) after ${elapsed} s; the end of its log:"
    tail -n 40 "$log" | sed 's/^/    /'
    for a in "$scratch/$target/artifacts"/*; do
      [ -f "$a" ] || continue
      name=$(basename "$a")
      mkdir -p "$here/regressions/$target" && cp "$a" "$here/regressions/$target/$name"
      echo "    input saved as fuzz/regressions/$target/$name (commit it as a regression test); base64:"
      base64 -w 100 "$a" | sed 's/^/      /'
    done
  fi
done
exit $failed
