#!/bin/sh
# install_multiarch_test.sh CMAKE SOURCE_DIR CONSUMER_DIR CC CXX
#
# The install test (install_test.sh) for a build configured the way Debian
# packages are, with CMAKE_INSTALL_PREFIX=/usr: GNUInstallDirs then puts the
# libraries, the pkg-config file and the CMake package under
# lib/<multiarch> (lib/x86_64-linux-gnu) instead of lib. The test's own build
# (only the libraries, no tests, tools or benchmarks) goes in a temporary
# directory; the install goes to a temporary prefix via --prefix, as always.
set -u
cmake=$1 source=$2 consumer=$3 cc=$4 cxx=$5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_multiarch.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
echo "== configuring $source with CMAKE_INSTALL_PREFIX=/usr"
if ! "$cmake" -S "$source" -B "$tmp/build" -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=Release \
       -DFREEWAY_TESTS=OFF -DFREEWAY_BENCH=OFF -DFREEWAY_TOOLS=OFF -DFREEWAY_INSPECTOR=OFF \
       -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" > "$tmp/cfg.log" 2>&1; then
  cat "$tmp/cfg.log"; echo "FAIL: configure failed"; exit 1
fi
grep '^CMAKE_INSTALL_LIBDIR:' "$tmp/build/CMakeCache.txt"
if ! "$cmake" --build "$tmp/build" -j2 --target freeway freeway_static > "$tmp/build.log" 2>&1; then
  tail -40 "$tmp/build.log"; echo "FAIL: build failed"; exit 1
fi
"$(dirname "$0")/install_test.sh" "$cmake" "$tmp/build" "$consumer" "$cc" "$cxx"
