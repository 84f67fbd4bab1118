#!/bin/sh
# run_first_call.sh LIBFREEWAY PROGRAM EXPECTED
#
# Runs a first_call program (tests/programs/first_call.c) twice: plainly, with
# the C library's malloc, and under LD_PRELOAD=LIBFREEWAY. Each run must exit 0
# and print EXPECTED exactly; the plain run prints "allocator: other" as its
# last line instead of freeway's. A plain run that fails is a bug in the test
# program, not in freeway, and is reported as such.
set -u
lib=$1 prog=$2 expected=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_first_call.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

sed 's/^allocator: .*/allocator: other/' "$expected" > "$tmp/expected.plain"
"$prog" > "$tmp/plain.out" 2> "$tmp/plain.err"
rc=$?
if [ $rc -ne 0 ] || ! cmp -s "$tmp/expected.plain" "$tmp/plain.out"; then
  echo "FAIL (test program): $prog fails without freeway (exit $rc)"
  diff -u "$tmp/expected.plain" "$tmp/plain.out"
  cat "$tmp/plain.err"
  exit 1
fi

LD_PRELOAD="$lib" "$prog" > "$tmp/fw.out" 2> "$tmp/fw.err"
rc=$?
status=0
if [ $rc -ne 0 ]; then
  echo "FAIL: $prog exited with $rc under LD_PRELOAD=$lib"
  status=1
fi
if ! cmp -s "$expected" "$tmp/fw.out"; then
  echo "FAIL: output under LD_PRELOAD differs from $expected:"
  diff -u "$expected" "$tmp/fw.out"
  status=1
fi
if [ -s "$tmp/fw.err" ]; then
  echo "stderr under LD_PRELOAD:"
  cat "$tmp/fw.err"
fi
[ $status -eq 0 ] && echo "PASS: $(basename "$prog") prints the expected output with and without freeway"
exit $status
