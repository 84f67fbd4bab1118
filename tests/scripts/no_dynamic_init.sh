#!/bin/sh
# No object of libfreeway.a may have a dynamic initialiser, except shim/api.cpp,
# whose constructor is deliberate (FREEWAY_VERBOSE, FREEWAY_TELEMETRY) and
# touches no allocator state. malloc can run before an image's initialisers
# (another library's constructors, a static C++ object in the program), and an
# initialiser that ran after that would reset state already in use.
set -eu
lib=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
ar x "$lib"
bad=""
n=0
for o in *.o; do
  n=$((n + 1))
  case "$o" in api.cpp.o) continue ;; esac
  if objdump -h "$o" | grep -Eq '\.init_array|\.ctors'; then bad="$bad $o"; fi
done
if [ -n "$bad" ]; then
  echo "objects of libfreeway.a with dynamic initialisers:$bad"
  echo "(make their globals constinit)"
  exit 1
fi
echo "$n objects in libfreeway.a; none but api.cpp.o has a dynamic initialiser"
