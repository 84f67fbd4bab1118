#!/bin/sh
# Telemetry under limits that would turn its sparse segment into a signal that
# ends the program: a file size limit below the segment's size (SIGXFSZ at the
# ftruncate) and a /dev/shm with less room than the segment (SIGBUS at a
# write). Either must leave telemetry off, say so in one line, and let the
# program run. usage: telemetry_limits.sh LIBFREEWAY
lib=$1
[ -f "$lib" ] || { echo "usage: telemetry_limits.sh LIBFREEWAY" >&2; exit 2; }
fail=0
check() {  # what, exit status, stderr file
  if [ "$2" -ne 0 ]; then
    echo "FAIL: $1: the program ended with status $2"; fail=1
  elif ! grep -q "telemetry off: $3" "$4"; then
    echo "FAIL: $1: no 'telemetry off: $3' line:"; cat "$4"; fail=1
  else
    echo "ok: $1: $(grep 'telemetry off' "$4")"
  fi
}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
(ulimit -f 1000 && FREEWAY_TELEMETRY=1 LD_PRELOAD="$lib" ls / >/dev/null 2>"$err")
check "ulimit -f 1000" $? "the file size limit" "$err"
# A small tmpfs over /dev/shm, in a mount namespace of its own (needs root or
# user namespaces; otherwise this part is not run, and says so).
if unshare -m true 2>/dev/null || unshare -rm true 2>/dev/null; then
  flag=-m
  unshare -m true 2>/dev/null || flag=-rm
  unshare $flag sh -c "mount -t tmpfs -o size=64k none /dev/shm && FREEWAY_TELEMETRY=1 LD_PRELOAD='$lib' ls / >/dev/null 2>'$err'"
  check "a 64 KiB /dev/shm" $? "/dev/shm has less room" "$err"
else
  echo "note: no mount namespace here: the small /dev/shm case is not run"
fi
exit $fail
