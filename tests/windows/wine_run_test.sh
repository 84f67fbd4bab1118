#!/bin/sh
# tests/windows/wine_run_test.sh: checks cmake/wine-run, ctest's emulator for
# the Windows tests, on the build machine.
#   wine_run_test.sh WINE_RUN [WINE TEST_WINDOWS_EXE]
# 1. With a fake wine: a run is repeated once only when it failed without
#    creating the FW_WINE_STARTED file, and every repeat is logged.
# 2. With real wine (if given): test_windows.exe creates that file, so its own
#    failures are never repeated.
run=$1
t=$(mktemp -d "${TMPDIR:-/tmp}/wine-run-test.XXXXXX") || exit 1
trap 'rm -rf "$t"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The fake wine: "$1" is how this run behaves; it counts its calls in $COUNT.
cat >"$t/fake-wine" <<'FAKE'
#!/bin/sh
n=$(($(cat "$COUNT" 2>/dev/null || echo 0) + 1))
echo $n >"$COUNT"
case $FW_WINE_STARTED in Z:/*) ;; *) echo "FW_WINE_STARTED is not a Z: path: $FW_WINE_STARTED"; exit 9 ;; esac
started=${FW_WINE_STARTED#Z:}
case $1 in
  fails-at-start-once) [ $n -eq 1 ] && exit 1; : >"$started"; exit 0 ;;
  fails-at-start) exit 3 ;;
  fails-in-main) : >"$started"; exit 4 ;;
  passes) : >"$started"; exit 0 ;;
  passes-without-main) exit 0 ;;
esac
exit 8
FAKE
chmod +x "$t/fake-wine"

# case WHAT EXPECTED_STATUS EXPECTED_CALLS EXPECTED_LOG_LINES
case_() {
  rm -f "$t/count" "$t/retries"
  COUNT=$t/count FW_WINE_RETRIES=$t/retries "$run" "$t/fake-wine" "$1" prog-arg 2>"$t/err"
  rc=$?
  calls=$(cat "$t/count")
  logged=$(cat "$t/retries" 2>/dev/null | wc -l)
  [ "$rc" -eq "$2" ] || fail "$1: status $rc, expected $2"
  [ "$calls" -eq "$3" ] || fail "$1: wine called $calls times, expected $3"
  [ "$logged" -eq "$4" ] || fail "$1: $logged lines logged, expected $4"
  if [ "$4" -gt 0 ]; then
    grep -q "before its main ran; running it once more" "$t/err" || fail "$1: no note on stderr"
  fi
}
case_ fails-at-start-once 0 2 1
case_ fails-at-start 3 2 1
case_ fails-in-main 4 1 0
case_ passes 0 1 0
case_ passes-without-main 0 1 0

"$run" 2>/dev/null && fail "no arguments: status 0"

# The real program creates the file (a failed --test-case run included).
if [ $# -ge 3 ]; then
  FW_WINE_STARTED="Z:$t/started" "$2" "$3" "--test-case=no such case" >/dev/null 2>&1
  [ -e "$t/started" ] || fail "test_windows.exe did not create FW_WINE_STARTED's file"
fi

[ $fails -eq 0 ] && echo "wine-run: all checks passed"
exit $fails
