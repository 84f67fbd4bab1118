#!/bin/sh
# preload_gxx.sh LIBFREEWAY SOURCE.cpp
#
# Compiles SOURCE.cpp with `g++ -O2 -c` twice, with the C library's malloc and
# under LD_PRELOAD=LIBFREEWAY (the g++ driver, cc1plus and as all inherit it).
# Both compiles must succeed with the same diagnostics, and the two objects
# must have identical `nm` symbol lists. The object bytes are compared too,
# once a control (a second plain compile) has shown that g++ produces the same
# bytes twice; if it does not, the byte comparison is reported as impossible
# instead of failing. FREEWAY_VERBOSE=1 in the preloaded compile proves that
# every process of it ran on freeway. Exit 77 (skipped) when there is no g++.
set -u
lib=$1 src=$2
gxx=$(command -v g++) || { echo "SKIP: no g++"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_gxx.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/plain" "$tmp/control" "$tmp/fw"
echo "compiler: $gxx ($("$gxx" --version | head -1))"

# freeway's FREEWAY_VERBOSE report on stderr, removed before comparing stderr.
strip_freeway() {
  grep -v -E '^freeway (options|statistics)|^  [a-z_]+ = [0-9-]+  \(default|^  [a-z_]+: [0-9]+  \(|^  class  block_size|^  [0-9]+( +[0-9]+){5}$' "$1"
}

(cd "$tmp/plain" && "$gxx" -O2 -c "$src" -o out.o) 2> "$tmp/plain.err"
rc_plain=$?
(cd "$tmp/control" && "$gxx" -O2 -c "$src" -o out.o) 2> /dev/null
(cd "$tmp/fw" && LD_PRELOAD="$lib" FREEWAY_VERBOSE=1 "$gxx" -O2 -c "$src" -o out.o) 2> "$tmp/fw.err"
rc_fw=$?

status=0
if [ $rc_plain -ne 0 ]; then
  echo "FAIL (test): the plain compile fails (exit $rc_plain)"; cat "$tmp/plain.err"; exit 1
fi
if [ $rc_fw -ne 0 ] || [ ! -s "$tmp/fw/out.o" ]; then
  echo "FAIL: g++ under LD_PRELOAD exited with $rc_fw"; strip_freeway "$tmp/fw.err"; status=1
fi
strip_freeway "$tmp/fw.err" > "$tmp/fw.err.stripped"
if ! cmp -s "$tmp/plain.err" "$tmp/fw.err.stripped"; then
  echo "FAIL: diagnostics differ (- plain, + freeway):"; diff -u "$tmp/plain.err" "$tmp/fw.err.stripped"; status=1
fi
# Each process that ran with freeway printed its statistics at exit.
runs=$(grep -c '^freeway statistics' "$tmp/fw.err")
echo "processes of the preloaded compile that ran on freeway: $runs (g++ driver, cc1plus, as)"
if [ "$runs" -lt 2 ]; then
  echo "FAIL: expected the driver and cc1plus at least to report freeway statistics"; status=1
fi

nm "$tmp/plain/out.o" > "$tmp/plain.nm"
nm "$tmp/fw/out.o" > "$tmp/fw.nm" 2>&1
if cmp -s "$tmp/plain.nm" "$tmp/fw.nm"; then
  echo "nm symbol lists: identical ($(wc -l < "$tmp/plain.nm") symbols)"
else
  echo "FAIL: nm symbol lists differ (- plain, + freeway):"; diff -u "$tmp/plain.nm" "$tmp/fw.nm" | head -50; status=1
fi
if cmp -s "$tmp/plain/out.o" "$tmp/control/out.o"; then
  if cmp -s "$tmp/plain/out.o" "$tmp/fw/out.o"; then
    echo "object bytes: identical ($(wc -c < "$tmp/plain/out.o") bytes)"
  else
    echo "FAIL: the object compiled under freeway differs from the plain one, although g++ is deterministic here"
    cmp "$tmp/plain/out.o" "$tmp/fw/out.o"; status=1
  fi
else
  echo "object bytes: not compared (two plain compiles already differ: g++ is not deterministic here)"
fi
[ $status -eq 0 ] && echo "PASS: g++ compiles the same object with freeway as with the C library's malloc"
exit $status
