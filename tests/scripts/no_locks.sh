#!/bin/sh
# libfreeway.so must not import any locking primitive: no mutex, rwlock,
# spinlock, condition variable, once-guard or futex call can then run inside
# freeway (the promise of Michael 2004 section 1: lock-free throughout).
set -eu
lib=$1
# nm's failure must not read as "no imports" (a pipeline's status is awk's).
syms=$(nm -D --undefined-only "$lib") || { echo "nm -D failed on $lib" >&2; exit 1; }
imports=$(printf '%s\n' "$syms" | awk 'NF {print $NF}')
[ -n "$imports" ] || { echo "no imported symbols read from $lib" >&2; exit 1; }
bad=$(printf '%s\n' "$imports" | grep -E 'pthread_(mutex|rwlock|spin|cond|once|barrier)|__cxa_guard|futex|sem_(wait|post)|^syscall' || true)
if [ -n "$bad" ]; then
  echo "libfreeway.so imports locking functions:"; echo "$bad"; exit 1
fi
echo "libfreeway.so imports $(printf '%s\n' "$imports" | wc -l) symbols, none of them a lock"
