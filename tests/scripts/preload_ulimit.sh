#!/bin/sh
# preload_ulimit.sh LIBFREEWAY
#
# Real programs under LD_PRELOAD=LIBFREEWAY inside a tight address-space limit
# (ulimit -v, RLIMIT_AS), compared with the same programs run plainly under the
# same limit: the output and exit status must be the same.
#   64, 128 and 256 MiB: ls -la of two big directories; sort of 200,000
#   generated lines; python3 on a JSON round trip of 20,000 dicts
# Then, as figures (not checked): the smallest limit, in MiB, at which each
# program runs with and without freeway. python3 needs more with freeway than
# without: each size class in use holds a span in a 256 KiB virtual span of
# address space, of which small blocks' spans use 64 KiB (docs/design.md).
set -u
lib=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_ulimit.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C
python=/usr/bin/python3
[ -x "$python" ] || { echo "$python not found: skipped"; exit 77; }

awk 'BEGIN { x = 12345; m = 4294967296
  for (i = 0; i < 200000; i++) { x = (x * 1103515245 + 12345) % m; printf "%d line %d\n", x % 1000003, i } }' > "$tmp/data"
script="import json, collections
d = [{'k': i, 'v': str(i) * (i % 7)} for i in range(20000)]
s = json.dumps(d)
print(len(s), collections.Counter(len(x['v']) for x in json.loads(s)).most_common(3))"

# runs NAME under limit LIMIT_MIB: the program's output plainly and preloaded.
run_ls() { timeout 20 ls -la /usr/lib /usr/bin; }
run_sort() { timeout 20 sort "$tmp/data"; }
run_python() { timeout 20 "$python" -c "$script"; }
run_python_pass() { timeout 20 "$python" -c pass; }
# Each run has 20 s (they take under 2 s here): at some limits glibc's own
# malloc spins for ever in python3 (sysmalloc retrying mmap). A preloaded run
# that times out is a hang, which freeway must never cause: it fails the test.
under() {  # under LIMIT_MIB PRELOAD NAME -> output in $tmp/out, status in $tmp/rc (124: timed out)
  (ulimit -v $(($1 * 1024)) && LD_PRELOAD="$2" "run_$3") > "$tmp/out" 2> "$tmp/err"
  rc=$?
  echo $rc > "$tmp/rc"
  if [ $rc = 124 ] && [ -n "$2" ]; then echo "ulimit -v $1 MiB: $3 HUNG under freeway" >&2; touch "$tmp/hung"; fi
}

status=0
for limit in 64 128 256; do
  for prog in ls sort python; do
    under "$limit" "" "$prog"
    plain_rc=$(cat "$tmp/rc"); plain_sum=$(sha256sum < "$tmp/out" | cut -c1-16)
    under "$limit" "$lib" "$prog"
    fw_rc=$(cat "$tmp/rc"); fw_sum=$(sha256sum < "$tmp/out" | cut -c1-16)
    if [ "$plain_rc" != 0 ]; then
      echo "ulimit -v ${limit} MiB: $prog fails even without freeway (status $plain_rc): skipped"
    elif [ "$fw_rc" = "$plain_rc" ] && [ "$fw_sum" = "$plain_sum" ]; then
      echo "ulimit -v ${limit} MiB: $prog ok (status 0, output sha256 $fw_sum)"
    else
      echo "ulimit -v ${limit} MiB: $prog FAILED under freeway: status $fw_rc (plain 0), output $fw_sum (plain $plain_sum)"
      sed -n 1,5p "$tmp/err"
      status=1
    fi
  done
done

# Figures: the smallest limit (MiB, to 2 MiB) at which each program succeeds.
smallest() {  # smallest PRELOAD NAME
  lo=4; hi=512
  while [ $((hi - lo)) -gt 2 ]; do
    mid=$(((lo + hi) / 2))
    under "$mid" "$1" "$2"
    if [ "$(cat "$tmp/rc")" = 0 ]; then hi=$mid; else lo=$mid; fi
  done
  echo "$hi"
}
for prog in ls sort python_pass python; do
  echo "smallest ulimit -v for $prog: $(smallest "" "$prog") MiB plain, $(smallest "$lib" "$prog") MiB with freeway"
done
[ -e "$tmp/hung" ] && status=1
exit $status
