#!/bin/sh
# options.sh LIBFREEWAY FIRST_CALL_PREINIT
#
# The FREEWAY_<NAME> options (core/options.h), from outside:
#  - a value that is not a whole number in the option's range (negative, too
#    big, not a number) is ignored with one line on stderr naming the range
#    and the default used;
#  - a very long value still gives one line that ends (cut, with "...");
#  - options set for a program whose first malloc runs in its .preinit_array,
#    before the C library has set `environ`, are read all the same
#    (FIRST_CALL_PREINIT is tests/programs/first_call.c built for that mode).
set -u
lib=$1 preinit=$2
status=0
fail() { echo "FAIL: $*"; status=1; }

expect_line() {  # NAME VALUE TEXT: the one line FREEWAY_NAME=VALUE gives must contain TEXT
  err=$(env "FREEWAY_$1=$2" LD_PRELOAD="$lib" /bin/true 2>&1)
  lines=$(printf '%s\n' "$err" | grep -c '^freeway: ignoring')
  if [ "$lines" -ne 1 ] || ! printf '%s\n' "$err" | grep -qF -- "$3"; then
    fail "FREEWAY_$1=$(printf '%.40s' "$2"): expected one line with '$3', got: $err"
  else
    echo "ok: FREEWAY_$1=$(printf '%.40s' "$2") -> $(printf '%s' "$err" | cut -c1-150)"
  fi
}
expect_line DECAY_MS -1 "FREEWAY_DECAY_MS=-1 (not a whole number from 0 to 2147483647); using 1000"
expect_line RETAIN_MB -5 "(not a whole number from 0 to 1048576); using 32"
expect_line POOL_STACKS 4294967296 "(not a whole number from 0 to 64); using 0"
expect_line TELEMETRY_HZ 0 "(not a whole number from 1 to 1000); using 20"
expect_line PERCPU 3 "(not a whole number from 0 to 2); using 2"
expect_line REUSE_PERCENT abc "(not a whole number from 1 to 100); using 25"
long=$(printf '%0600d' 0 | tr 0 x)
expect_line DECAY_MS "$long" "xxxx... (not a whole number from 0 to 2147483647); using 1000"
last=$(env FREEWAY_DECAY_MS="$long" LD_PRELOAD="$lib" /bin/true 2>&1 | tail -c 1 | od -An -c | tr -d ' ')
[ "$last" = '\n' ] || fail "the line for a 600-character value does not end with a newline (last byte '$last')"
# A value in range gives no line.
err=$(env FREEWAY_DECAY_MS=250 LD_PRELOAD="$lib" /bin/true 2>&1)
[ -z "$err" ] || fail "FREEWAY_DECAY_MS=250 printed: $err"

# Options of a program whose first malloc is in .preinit_array.
err=$(env FREEWAY_VERBOSE=1 FREEWAY_SECURE=1 FREEWAY_DECAY_MS=250 LD_PRELOAD="$lib" "$preinit" 2>&1 >/dev/null)
for want in "  secure = 1 " "  decay_ms = 250 "; do
  printf '%s\n' "$err" | grep -qF -- "$want" ||
    fail "first malloc in .preinit_array: the options printed lack '$want': $(printf '%s' "$err" | head -12)"
done
[ $status -eq 0 ] && echo "ok: options of a program whose first malloc is in .preinit_array are read (secure = 1, decay_ms = 250)"
exit $status
