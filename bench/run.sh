#!/usr/bin/env bash
# Runs the lock-library comparison by hand (never in CI) and keeps the output.
#
#   bench/run.sh [BENCH_REGEX]
#
#   BENCH_REGEX  passed to -bench (default "." = everything, ~5 minutes on
#                2 cores). Re-run only the contention benchmark with
#                bench/run.sh Contended, or only ours: 'Contended/redlock'.
#   COUNT        rounds (default 5): the whole selection runs COUNT times,
#                each round a go test -count 1, so libraries interleave
#   BENCHTIME    -benchtime (default 1s)
#   REDLOCK_REF  a git ref (commit, tag, branch, HEAD) of the library to
#                benchmark instead of the working tree: it is exported with
#                git archive into a temporary directory and the bench module
#                is pointed at it through -modfile. go.mod is never edited.
#   LABEL        name of the result file (default: the ref, or "worktree")
#   BENCH_COMMANDS  set (to anything) to log, for each row, every server
#                command's calls per op from INFO commandstats: where a row's
#                srv-cmds go (see meter.logCommands)
#   QUIET_WAIT   seconds to wait, at most, for the machine to go quiet (CPU
#                >= 90% idle for 10 s in a row) before each round (default 0).
#                Other test runs on the same cores distort every number.
#
# Output: bench/results/<UTC time>-<label>.txt (raw go test output, with
# "key: value" header lines that benchstat keeps as configuration),
# bench/results/latest.txt, and Markdown tables from ./summarize. benchstat
# (golang.org/x/perf) also prints its summary when the module proxy can be
# reached. Compare two runs with:
#   go run golang.org/x/perf/cmd/benchstat@latest results/A.txt results/B.txt
set -euo pipefail
cd "$(dirname "$0")"

regex=${1:-.}
count=${COUNT:-5}
benchtime=${BENCHTIME:-1s}
ref=${REDLOCK_REF:-}
label=${LABEL:-${ref:-worktree}}
label=${label//[^A-Za-z0-9._-]/_}

if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found: apt-get install redis-server" >&2
  exit 1
fi

modflags=()
tmp=""
sampler=""
loadlog=""
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  [ -n "$loadlog" ] && rm -f "$loadlog"
  [ -n "$tmp" ] && rm -rf "$tmp"
  return 0
}
trap cleanup EXIT
if [ -n "$ref" ]; then
  commit=$(git -C .. rev-parse --verify "$ref^{commit}")
  tmp=$(mktemp -d)
  mkdir "$tmp/redlock"
  git -C .. archive "$commit" | tar -x -C "$tmp/redlock"
  # The benchmarks start their servers with the working tree's test kit
  # (internal/redistest) and script assembly (internal/luasrc), which an
  # older ref may lack or have in an older
  # shape: measure that ref's library with today's harness.
  rm -rf "$tmp/redlock/internal/redistest"
  mkdir -p "$tmp/redlock/internal"
  cp -R ../internal/redistest "$tmp/redlock/internal/redistest"
  rm -rf "$tmp/redlock/internal/luasrc"
  cp -R ../internal/luasrc "$tmp/redlock/internal/luasrc"
  # The same module file, with the replace pointing at the export.
  sed "s#^replace github.com/redlockgo/redlock => .*#replace github.com/redlockgo/redlock => $tmp/redlock#" go.mod >"$tmp/bench.mod"
  cp go.sum "$tmp/bench.sum"
  go mod tidy -modfile "$tmp/bench.mod" >/dev/null 2>&1 || true
  modflags=(-modfile "$tmp/bench.mod")
  lib="$commit (git archive of $ref)"
else
  commit=$(git -C .. rev-parse HEAD 2>/dev/null || echo unknown)
  dirty=""
  if [ -n "$(git -C .. status --porcelain -- . ':!bench' 2>/dev/null)" ]; then
    dirty=" + uncommitted changes"
  fi
  lib="working tree at $commit$dirty"
fi

# cpu_idle_pct SECONDS: share of idle CPU time over the next SECONDS.
cpu_idle_pct() {
  local a b
  read -r _ a1 a2 a3 a4 a5 a6 a7 a8 _ </proc/stat
  sleep "$1"
  read -r _ b1 b2 b3 b4 b5 b6 b7 b8 _ </proc/stat
  a=$((a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8))
  b=$((b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8))
  echo $(((b4 + b5 - a4 - a5) * 100 / (b - a > 0 ? b - a : 1)))
}
# wait_quiet: with QUIET_WAIT > 0, wait at most that long for 10 seconds in
# a row with the CPU >= 90% idle.
wait_quiet() {
  [ "${QUIET_WAIT:-0}" -gt 0 ] && [ -r /proc/stat ] || return 0
  local deadline=$((SECONDS + QUIET_WAIT)) quiet=0
  while [ "$quiet" -lt 10 ] && [ "$SECONDS" -lt "$deadline" ]; do
    if [ "$(cpu_idle_pct 1)" -ge 90 ]; then quiet=$((quiet + 1)); else quiet=0; fi
  done
  [ "$quiet" -ge 10 ] || echo "warning: machine not quiet after ${QUIET_WAIT}s; running anyway" >&2
}

mkdir -p results
out="results/$(date -u +%Y%m%dT%H%M%SZ)-$label.txt"
{
  echo "redlock-lib: $lib"
  echo "redis: $(redis-server --version | sed 's/^Redis server //')"
  echo "go: $(go version | cut -d' ' -f3)"
  echo "cores: $(nproc)"
  echo "benchtime: $benchtime"
  echo "rounds: $count"
  echo "loadavg-before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
} >"$out"

# Sample the 1-minute load average while the benchmarks run: other work on
# the same cores shows up here and in the numbers.
loadlog=$(mktemp)
( while sleep 10; do cut -d' ' -f1 /proc/loadavg >>"$loadlog" 2>/dev/null || exit 0; done ) &
sampler=$!

# COUNT rounds of -count 1 rather than one -count COUNT: go test repeats
# each sub-benchmark COUNT times in a row, so a burst of other load would hit
# one library's samples only. Rounds interleave the libraries in time.
for round in $(seq "$count"); do
  wait_quiet
  echo "# round $round of $count" >&2
  set -x
  go test "${modflags[@]}" -run '^$' -bench "$regex" -benchmem -count 1 -benchtime "$benchtime" -timeout 60m . | tee -a "$out"
  { set +x; } 2>/dev/null
done
kill "$sampler" 2>/dev/null || true
sampler=""
echo "loadavg-after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)" >>"$out"
echo "loadavg-1m-max-during: $(sort -g "$loadlog" | tail -1)" >>"$out"
cp "$out" results/latest.txt
echo
echo "results: bench/$out"
echo
go run ./summarize "$out"
if go run golang.org/x/perf/cmd/benchstat@latest "$out" >"$out.benchstat" 2>/dev/null; then
  cat "$out.benchstat"
else
  rm -f "$out.benchstat"
  echo "(benchstat not available; summary above)"
fi
