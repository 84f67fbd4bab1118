#!/bin/sh
# preload_sort.sh LIBFREEWAY
#
# Generates 2 million deterministic random lines (about 50 MB) with awk, then
# sorts them three ways with the C library's malloc and under
# LD_PRELOAD=LIBFREEWAY, and compares the SHA-256 of each pair of outputs:
#   LC_ALL=C sort                (bytewise)
#   LC_ALL=C sort -n             (numeric)
#   LC_ALL=C sort -k2,2 -S 16M   (by field, a 16 MiB buffer: an external merge
#                                 through temporary files)
# sort uses several threads. A short run with LD_DEBUG=bindings proves that
# the preloaded sort's malloc and free are freeway's. (FREEWAY_VERBOSE's report
# at exit cannot serve: sort closes stderr in an atexit handler, before
# freeway's destructor prints.)
set -u
lib=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_sort.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

# A 32-bit LCG, computed with integer-exact doubles, so any awk gives the same lines.
awk 'BEGIN {
  x = 12345; m = 4294967296
  for (i = 0; i < 2000000; i++) {
    x = (x * 1103515245 + 12345) % m; a = x
    x = (x * 1103515245 + 12345) % m; b = x
    w = ""
    for (k = 0; k < 6 + (b % 11); k++) { w = w sprintf("%c", 97 + (int(b / (k + 1)) % 26)) }
    printf "%d %s %d\n", a % 1000000007, w, i
  }
}' > "$tmp/data"
echo "input: $(wc -l < "$tmp/data") lines, $(wc -c < "$tmp/data") bytes, sha256 $(sha256sum < "$tmp/data" | cut -c1-16)"

status=0
run() {  # run NAME ARGS...
  name=$1; shift
  sort -T "$tmp" "$@" "$tmp/data" > "$tmp/plain.out" 2> "$tmp/plain.err"
  rc_plain=$?
  LD_PRELOAD="$lib" sort -T "$tmp" "$@" "$tmp/data" > "$tmp/fw.out" 2> "$tmp/fw.err"
  rc_fw=$?
  sum_plain=$(sha256sum < "$tmp/plain.out" | cut -d' ' -f1)
  sum_fw=$(sha256sum < "$tmp/fw.out" | cut -d' ' -f1)
  echo "sort $*: plain exit $rc_plain sha256 $sum_plain; freeway exit $rc_fw sha256 $sum_fw"
  if [ $rc_plain -ne 0 ]; then echo "FAIL (test): plain sort failed"; cat "$tmp/plain.err"; status=1; return; fi
  if [ $rc_fw -ne 0 ]; then echo "FAIL: sort under LD_PRELOAD exited with $rc_fw"; tail -40 "$tmp/fw.err"; status=1; fi
  if [ "$sum_plain" != "$sum_fw" ]; then echo "FAIL: outputs differ"; cmp "$tmp/plain.out" "$tmp/fw.out"; status=1; fi
  if [ "$(wc -l < "$tmp/fw.out")" -ne 2000000 ]; then echo "FAIL: $(wc -l < "$tmp/fw.out") lines out"; status=1; fi
}
# The preloaded sort binds malloc and free to freeway.
head -1000 "$tmp/data" > "$tmp/small"
LD_DEBUG=bindings LD_PRELOAD="$lib" sort "$tmp/small" 2> "$tmp/bindings" > /dev/null
for sym in malloc free; do
  if grep -q "binding file sort .* to .*$(basename "$lib") .*symbol \`$sym'" "$tmp/bindings"; then
    echo "sort's $sym is bound to $(basename "$lib")"
  else
    echo "FAIL: sort's $sym is not bound to $lib under LD_PRELOAD"; status=1
  fi
done

run bytes
run numeric -n
run merge -k2,2 -S 16M
[ $status -eq 0 ] && echo "PASS: sort gives the same output with freeway as with the C library's malloc"
exit $status
