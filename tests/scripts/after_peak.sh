#!/bin/sh
# after_peak.sh AFTER_PEAK LIBFREEWAY
#
# The decay's tick seen from outside (docs/design.md, "The decay's tick"): a
# program that frees a big heap and goes on running with a small one gives the
# heap's memory back while it runs on malloc's fast path alone. bench's
# after_peak, preloaded with freeway and FREEWAY_DECAY_MS=200, builds a heap of
# about 140 MiB and frees it, four ways: main frees its own small blocks; a
# worker frees its own and exits; a worker exits and main frees its blocks; main
# frees 140 blocks of 1 MiB. Then 1.5 s of a small working set. The resident set
# at its end must be under a quarter of the peak, and the program must print
# its RESULT line and exit 0. Under the build before the tick (Stop 107's) each
# case ended at about the peak.
set -u
prog=$1 lib=$2
status=0
check() {  # DESCRIPTION ARGS...: one run, checked
  what=$1
  shift
  out=$(FREEWAY_DECAY_MS=200 LD_PRELOAD=$lib "$prog" "$@" -d 1.5 2>&1)
  st=$?
  line=$(printf '%s\n' "$out" | grep '^RESULT ')
  peak=$(printf '%s\n' "$line" | sed -n 's/.* rss_peak_kb=\([0-9]*\).*/\1/p')
  end=$(printf '%s\n' "$line" | sed -n 's/.* rss_end_kb=\([0-9]*\).*/\1/p')
  if [ "$st" -ne 0 ] || [ -z "$peak" ] || [ -z "$end" ]; then
    echo "FAIL: $what: status $st, output: $out"
    status=1
  elif [ $((end * 4)) -ge "$peak" ]; then
    echo "FAIL: $what: $end KiB resident at the end, after a peak of $peak KiB"
    status=1
  else
    echo "ok: $what: $end KiB resident at the end, after a peak of $peak KiB"
  fi
}
check "main frees its heap" -k own -n 500000
check "a worker frees its heap and exits" -k worker -n 500000
check "a worker exits, main frees its heap" -k handoff -n 500000
check "main frees 1 MiB blocks" -k own -n 140 -m 1048576 -M 1048576
exit $status
