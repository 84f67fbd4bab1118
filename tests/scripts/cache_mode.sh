#!/bin/sh
# cache_mode.sh LIBFREEWAY PROGRAM
#
# The cache mode is chosen once per process (core/percpu.h). PROGRAM
# (tests/programs/cache_mode.c) reports the mode freeway chose and whether
# glibc registered rseq. Checked here:
#   default, 32 threads at once      per-CPU where rseq is registered (more threads than
#                                    twice the CPUs and than 16, up to 15 CPUs, whose caches
#                                    hold about 40 classes each: more than 32 MiB), else per-thread
#   default, 32 threads at once,     per-thread: the threads are as many, but their caches
#     one size class each            hold one 64 KiB span each, 2 MiB in all
#                                    (kPerThreadHeldMax, core/percpu.h)
#   default, 1 thread                per-thread (main and one thread: never more than 16)
#   default, max(CPUs, 8) threads    per-thread: at each hand-off main, the old and the new
#     handing off 8 times            threads are one more than the limit, max(2 x CPUs, 16),
#                                    for a moment, then the old exit
#   default, limit threads handing   per-thread: each successor's first call frees a block
#     off 8 times, each successor    of its predecessor, which waits for all of them: main
#     freeing first                  and twice the limit alive, but each successor stands in
#                                    for its predecessor (core/percpu.h, percpu_thread_bound),
#                                    so the threads counted stay the limit + 1 (main), as
#                                    with one thread at a time; one successor that mallocs
#                                    first would switch it
#   default, 1.5 x limit threads     per-CPU: main, their creator, lives on, so only the
#     freeing main's blocks first    first of them stands in for it
#   default, 1.5 x limit threads,    per-CPU: each helper was its thread's successor, and
#     each starting a helper that    its exit ended that, so the threads count again
#     frees its block and exits
#   default, a chain of 3 x limit    per-CPU: each frees the block of the thread that
#     threads, all alive             started it, but successors count as half the threads
#                                    at most
#   FREEWAY_PERCPU=1, 1 thread       per-CPU where rseq is registered
#   FREEWAY_PERCPU=0                 per-thread, nothing on stderr
#   FREEWAY_SECURE=1                 per-thread (secure mode keeps per-thread quarantines)
#   FREEWAY_PERCPU=7                 the default, and one line on stderr
#   glibc.pthread.rseq=0             per-thread, nothing on stderr
#   the same with FREEWAY_PERCPU=1   per-thread, and one line on stderr saying why
# and in every case the heap's invariants hold after the program's work.
set -u
lib=$1 prog=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_cache_mode.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0

# run NAME EXPECTED-MODE STDERR-LINES [VAR=VALUE...]
run() {
  name=$1 want=$2 lines=$3
  shift 3
  env "$@" LD_PRELOAD="$lib" "$prog" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  got=$(sed -n 's/^mode: //p' "$tmp/out")
  heap=$(sed -n 's/^heap: //p' "$tmp/out")
  n=$(grep -c . "$tmp/err")
  echo "$name: mode $got, heap $heap, $n line(s) on stderr (exit $rc)"
  if [ $rc -ne 0 ] || [ "$got" != "$want" ] || [ "$heap" != ok ] || [ "$n" -ne "$lines" ]; then
    echo "FAIL: $name: expected mode $want and $lines line(s) on stderr"
    cat "$tmp/err"
    status=1
  fi
}

registered=$(LD_PRELOAD= "$prog" | sed -n 's/^rseq: //p')
echo "glibc's rseq here: $registered"
cpus=$(getconf _NPROCESSORS_ONLN)
limit=$((2 * cpus)); [ $limit -lt 16 ] && limit=16
if [ "$registered" = registered ] && [ 32 -gt $limit ]; then
  run default,32-threads per-cpu 0 CACHE_MODE_THREADS=32
  run default,32-threads,one-class per-thread 0 CACHE_MODE_THREADS=32 CACHE_MODE_SIZE=64
  run percpu=1,1-thread per-cpu 0 FREEWAY_PERCPU=1 CACHE_MODE_THREADS=1
elif [ "$registered" != registered ]; then
  run default,32-threads per-thread 0 CACHE_MODE_THREADS=32
  run percpu=1,1-thread per-thread 1 FREEWAY_PERCPU=1 CACHE_MODE_THREADS=1
fi
run default,1-thread per-thread 0 CACHE_MODE_THREADS=1
if [ "$cpus" -le 64 ]; then
  n=$((limit / 2))
  run default,hand-off per-thread 0 CACHE_MODE_THREADS=$n CACHE_MODE_HANDOFF=8
fi
# The program runs 64 threads at once at most.
if [ "$registered" = registered ] && [ $limit -le 64 ]; then
  run default,hand-off,free-first per-thread 0 CACHE_MODE_THREADS=$limit CACHE_MODE_HANDOFF=8 CACHE_MODE_FIRST=free
fi
if [ "$registered" = registered ] && [ $((limit + limit / 2)) -le 64 ]; then
  run default,creator-argument per-cpu 0 CACHE_MODE_THREADS=$((limit + limit / 2)) CACHE_MODE_FIRST=free
  run default,helpers per-cpu 0 CACHE_MODE_THREADS=$((limit + limit / 2)) CACHE_MODE_HELPER=1
fi
if [ "$registered" = registered ] && [ $((3 * limit)) -le 64 ]; then
  run default,chain per-cpu 0 CACHE_MODE_THREADS=$((3 * limit)) CACHE_MODE_CHAIN=1
fi
run percpu=0 per-thread 0 FREEWAY_PERCPU=0
run secure per-thread 0 FREEWAY_SECURE=1
if [ "$registered" = registered ]; then
  run percpu=7 per-thread 1 FREEWAY_PERCPU=7 CACHE_MODE_THREADS=1   # not 0, 1 or 2: said, and the default used
fi
run no-rseq per-thread 0 GLIBC_TUNABLES=glibc.pthread.rseq=0
run no-rseq+percpu=1 per-thread 1 GLIBC_TUNABLES=glibc.pthread.rseq=0 FREEWAY_PERCPU=1
if grep -q "per-CPU caches need rseq" "$tmp/err"; then :; else
  echo "FAIL: the warning does not say why"; status=1
fi
exit $status
