#!/bin/sh
# bench_run_lib.sh BENCH_RUN BUILD_DIR LIBFREEWAY
#
# bench/run's --lib NAME=PATH[:VAR=VALUE...] (docs/benchmarks.md, "How the
# suite measures"), from outside:
#  - a spec it cannot use stops the run with status 1 and a line naming the
#    spec and why, before the results folder is made;
#  - a usable one runs the allocator from PATH (a copy of the build's library,
#    so that it cannot be mistaken for the build's own) under NAME in every
#    repetition, interleaved with the others (the order rotates by
#    repetition), with its environment in each run's command; summary.md lists
#    its path and environment and has its row in the benchmark's table;
#  - the environment reaches the program, and the program preloads PATH:
#    with LD_DEBUG=libs and LD_DEBUG_OUTPUT in that allocator's environment,
#    the dynamic loader of each of its runs writes a log that names PATH.
# BUILD_DIR holds the benchmark programs (bench/) that --no-build runs.
# Exits 77 (skipped) without python3.
set -u
run=$1 build=$2 lib=$3
command -v python3 >/dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
status=0
fail() { echo "FAIL: $*"; status=1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_run_lib.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cp "$lib" "$tmp/copy.so" || exit 1
lib=$tmp/copy.so

base="--no-build --build-dir $build --only teardown --quick --reps 2 --allocators freeway --no-charts"

refused() {  # SPEC TEXT: --lib SPEC stops with status 1 and a message containing TEXT, and writes nothing
  out="$tmp/refused"
  # shellcheck disable=SC2086
  err=$(python3 "$run" $base --out "$out" --lib "$1" 2>&1)
  st=$?
  if [ "$st" -ne 1 ] || ! printf '%s\n' "$err" | grep -qF -- "$2"; then
    fail "--lib '$1': expected status 1 and '$2', got status $st: $err"
  elif [ -e "$out" ]; then
    fail "--lib '$1': the results folder was made before the spec was refused"
  else
    echo "ok: --lib '$1' -> $err"
  fi
}
refused "again" "expected NAME=PATH[:VAR=VALUE...]"
refused "again=" "expected NAME=PATH[:VAR=VALUE...]"
refused "two words=$lib" "the name may hold letters, digits and _.+- only"
refused "mimalloc=$lib" "mimalloc is already an allocator's name"
refused "freeway=$lib" "freeway is already an allocator's name"
refused "again=$tmp/none.so" "is not a file"
refused "again=$lib:FREEWAY_PERCPU" "'FREEWAY_PERCPU' is not VAR=VALUE"
refused "again=$lib:1X=2" "'1X=2' is not VAR=VALUE"
refused "again=$lib:LD_PRELOAD=$lib" "LD_PRELOAD cannot be set too"
refused "again=$lib:A=1:A=2" "A is set twice"
printf 'not a library\n' >"$tmp/bad.so"
refused "again=$tmp/bad.so" "fails:"

out="$tmp/ok"
# shellcheck disable=SC2086
if ! python3 "$run" $base --out "$out" --lib "again=$lib:FREEWAY_PERCPU=0:FREEWAY_RETAIN_MB=8" >"$tmp/log" 2>&1; then
  fail "a run with a usable --lib failed: $(tail -5 "$tmp/log")"
else
  python3 - "$out/runs.jsonl" "$lib" "$build/libfreeway.so" <<'EOF' || status=1
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
lib, built = sys.argv[2], sys.argv[3]  # --lib's file; the build's, which --allocators freeway runs
order = [r["allocator"] for r in runs]
ok = True
if order != ["freeway", "again", "again", "freeway"]:
    print("FAIL: runs in order %s, expected freeway, again, again, freeway (interleaved)" % order); ok = False
for r in runs:
    if r["status"] != "ok":
        print("FAIL: run of %s: %s" % (r["allocator"], r.get("reason"))); ok = False
    want = "FREEWAY_PERCPU=0 FREEWAY_RETAIN_MB=8 LD_PRELOAD=%s " % lib if r["allocator"] == "again" else \
        "LD_PRELOAD=%s " % built
    if not r["cmd_str"].startswith(want):
        print("FAIL: %s's command %r does not start with %r" % (r["allocator"], r["cmd_str"], want)); ok = False
if ok:
    print("ok: 4 runs, interleaved, each with its environment: %s" % ", ".join(order))
sys.exit(0 if ok else 1)
EOF
  want="- again: $lib (with FREEWAY_PERCPU=0 FREEWAY_RETAIN_MB=8)"
  if grep -qxF -- "$want" "$out/summary.md"; then
    echo "ok: summary.md lists '$want'"
  else
    fail "summary.md does not list '$want': $(grep -- '^- again' "$out/summary.md")"
  fi
  if grep -q '^| 1 thread blocks=1000k | again | ' "$out/summary.md"; then
    echo "ok: summary.md's teardown table has a row for again"
  else
    fail "summary.md's teardown table has no row for again"
  fi
fi

out="$tmp/env"
# shellcheck disable=SC2086
if ! python3 "$run" $base --out "$out" --lib "again=$lib:LD_DEBUG=libs:LD_DEBUG_OUTPUT=$tmp/ld" >"$tmp/log" 2>&1; then
  fail "a run with LD_DEBUG in --lib's environment failed: $(tail -5 "$tmp/log")"
else
  naming=$(grep -l -F -- "$lib" "$tmp"/ld.* 2>/dev/null | wc -l)
  runs=$(python3 -c 'import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(sum(r["allocator"] == "again" and r["status"] == "ok" for r in runs))' "$out/runs.jsonl")
  files=$(ls "$tmp"/ld.* 2>/dev/null | wc -l)
  # Each of again's 2 runs: the spawn helper and the benchmark (exec'd by it) log;
  # the benchmark's log names the preloaded copy.
  if [ "$runs" -eq 2 ] && [ "$naming" -ge 2 ]; then
    echo "ok: again's 2 runs had LD_DEBUG set: $files loader logs, $naming of them name $lib"
  else
    fail "expected again's 2 runs ok and at least 2 loader logs naming $lib: runs ok $runs, logs $files, naming $naming"
  fi
fi
exit $status
