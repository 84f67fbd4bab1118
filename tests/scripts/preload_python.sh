#!/bin/sh
# preload_python.sh LIBFREEWAY WORKLOAD.py
#
# Runs an object-heavy Python script with PYTHONMALLOC=malloc twice, with the C
# library's malloc and under LD_PRELOAD=LIBFREEWAY, and fails on any difference
# in output or exit status. A third short run checks that the preloaded Python
# really allocates its objects from freeway (fw_owns(id(obj)) through ctypes).
# Exit 77 (skipped) when there is no python3.
set -u
lib=$1 workload=$2
if [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; else py=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_python.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export PYTHONMALLOC=malloc PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1
echo "python: $py ($("$py" --version 2>&1))"

"$py" "$workload" > "$tmp/plain.out" 2> "$tmp/plain.err"
rc_plain=$?
LD_PRELOAD="$lib" "$py" "$workload" > "$tmp/fw.out" 2> "$tmp/fw.err"
rc_fw=$?
status=0
if [ $rc_plain -ne 0 ]; then
  echo "FAIL (test): the workload fails with the C library's malloc (exit $rc_plain)"; cat "$tmp/plain.err"; exit 1
fi
if [ $rc_fw -ne 0 ]; then
  echo "FAIL: python exited with $rc_fw under LD_PRELOAD=$lib"; cat "$tmp/fw.err"; status=1
fi
if ! cmp -s "$tmp/plain.out" "$tmp/fw.out"; then
  echo "FAIL: output differs (- C library malloc, + freeway):"; diff -u "$tmp/plain.out" "$tmp/fw.out"; status=1
fi
if ! cmp -s "$tmp/plain.err" "$tmp/fw.err"; then
  echo "FAIL: stderr differs (- C library malloc, + freeway):"; diff -u "$tmp/plain.err" "$tmp/fw.err"; status=1
fi
echo "output: $(wc -l < "$tmp/fw.out") lines, identical: $(cmp -s "$tmp/plain.out" "$tmp/fw.out" && echo yes || echo no)"

# Proof that the preload took: Python objects live in freeway's heap.
LD_PRELOAD="$lib" "$py" -c '
import ctypes
libc = ctypes.CDLL(None)
owns = libc.fw_owns
owns.argtypes = [ctypes.c_void_p]
objs = [[i] * 50 for i in range(100)] + [{"k": i} for i in range(100)]
print("python objects in freeway heap:", all(owns(id(o)) for o in objs))
' > "$tmp/proof.out" 2>&1
cat "$tmp/proof.out"
if ! grep -q "python objects in freeway heap: True" "$tmp/proof.out"; then
  echo "FAIL: the preloaded python does not allocate its objects from freeway"; status=1
fi
[ $status -eq 0 ] && echo "PASS: python gives the same output with freeway as with the C library's malloc"
exit $status
