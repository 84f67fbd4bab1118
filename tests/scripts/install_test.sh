#!/bin/sh
# install_test.sh CMAKE BUILD_DIR CONSUMER_DIR CC CXX
#
# Installs the build in BUILD_DIR into a temporary prefix with
# `cmake --install`, checks the installed files, then builds and runs programs
# against the installed copy only:
#   1. consumer.c with pkg-config (--cflags --libs freeway), libfreeway.so
#   2. consumer.cpp with CMake find_package(freeway) + freeway::freeway
#   3. consumer.cpp with CMake find_package(freeway) + freeway::freeway_static
#   4. consumer.c linked statically: CC consumer.c PREFIX/LIBDIR/libfreeway.a -lpthread
# Each program checks that malloc (and new) return blocks fw_owns() claims,
# i.e. that linking freeway replaced malloc, and says where fw_owns came from.
# The library directory is whatever GNUInstallDirs chose (lib, or
# lib/<multiarch> for a /usr prefix); the script reports which.
set -u
cmake=$1 build=$2 src=$3 cc=$4 cxx=$5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
status=0
fail() { echo "FAIL: $*"; status=1; }

echo "== cmake --install $build --prefix $prefix"
if ! "$cmake" --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"; echo "FAIL: cmake --install failed"; exit 1
fi

# Where did the libraries go?
libdir=
for d in lib lib64 lib/x86_64-linux-gnu lib/$(gcc -print-multiarch 2>/dev/null); do
  if [ -e "$prefix/$d/libfreeway.so" ]; then libdir=$d; break; fi
done
if [ -z "$libdir" ]; then
  echo "FAIL: libfreeway.so is nowhere under $prefix:"; (cd "$prefix" && find . | sort); exit 1
fi
echo "installed library directory: $libdir"
L=$prefix/$libdir
for f in "$L/libfreeway.so" "$L/libfreeway.a" "$prefix/include/freeway.h" "$L/pkgconfig/freeway.pc" \
         "$L/cmake/freeway/freewayConfig.cmake" "$L/cmake/freeway/freewayConfigVersion.cmake" \
         "$L/cmake/freeway/freewayTargets.cmake"; do
  if [ -e "$f" ]; then echo "  found ${f#$prefix/}"; else fail "missing ${f#$prefix/}"; fi
done
[ -e "$prefix/include/freeway_telemetry.h" ] && echo "  found include/freeway_telemetry.h" \
  || fail "missing include/freeway_telemetry.h"
# The inspector, when this build has it (the multiarch build is libraries only).
if [ -e "$build/inspector/freeway-inspect" ]; then
  if [ -x "$prefix/bin/freeway-inspect" ] && "$prefix/bin/freeway-inspect" --version > "$tmp/inspect.out" 2>&1; then
    echo "  found bin/freeway-inspect: $(cat "$tmp/inspect.out")"
  else
    fail "bin/freeway-inspect is missing or does not run: $(cat "$tmp/inspect.out" 2>/dev/null)"
  fi
fi
[ "$libdir" = lib ] || echo "note: the library directory is $libdir, not lib"
[ $status -eq 0 ] || exit 1

# A program's output must show freeway replaced malloc, from the installed copy.
check_output() {  # check_output NAME FILE RC EXPECT_LIB_PATTERN
  name=$1 out=$2 rc=$3 where=$4
  sed "s/^/  $name| /" "$out"
  [ "$rc" -eq 0 ] || fail "$name exited with $rc"
  grep -q '^fw_owns(malloc(100)) = 1$' "$out" || fail "$name: malloc is not freeway's"
  grep -q '^fw_check_heap() = 0$' "$out" || fail "$name: fw_check_heap found violations"
  if [ -n "$where" ]; then
    grep -q "^fw_owns from: $where" "$out" || fail "$name: fw_owns does not come from $where"
  fi
}

echo "== 1. C program with pkg-config, shared"
export PKG_CONFIG_PATH=$L/pkgconfig
flags=$(pkg-config --cflags --libs freeway) || fail "pkg-config --cflags --libs freeway failed"
echo "  pkg-config --cflags --libs freeway: $flags"
pc_inc=$(pkg-config --variable=includedir freeway)
pc_lib=$(pkg-config --variable=libdir freeway)
echo "  pkg-config includedir: $pc_inc"
echo "  pkg-config libdir: $pc_lib"
[ -e "$pc_inc/freeway.h" ] || fail "freeway.pc's includedir ($pc_inc) has no freeway.h"
[ -e "$pc_lib/libfreeway.so" ] || fail "freeway.pc's libdir ($pc_lib) has no libfreeway.so"
# shellcheck disable=SC2086
if "$cc" "$src/consumer.c" $flags -ldl -o "$tmp/pc_consumer" 2> "$tmp/pc.err"; then
  LD_LIBRARY_PATH=$L "$tmp/pc_consumer" > "$tmp/pc.out" 2>&1
  check_output pkg-config "$tmp/pc.out" $? "$L/libfreeway.so"
else
  cat "$tmp/pc.err"; fail "building with pkg-config's flags failed"
fi

echo "== 2./3. C++ program with CMake find_package(freeway), shared and static"
if "$cmake" -S "$src" -B "$tmp/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
     -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release > "$tmp/cfg.log" 2>&1 &&
   "$cmake" --build "$tmp/consumer-build" > "$tmp/bld.log" 2>&1; then
  grep -- '-- freeway' "$tmp/cfg.log" | sed 's/^/  /'
  LD_LIBRARY_PATH=$L "$tmp/consumer-build/consumer_shared" > "$tmp/cm.out" 2>&1
  check_output cmake-shared "$tmp/cm.out" $? "$L/libfreeway.so"
  grep -q '^fw_owns(new int) = 1$' "$tmp/cm.out" || fail "cmake-shared: operator new is not freeway's"
  "$tmp/consumer-build/consumer_static" > "$tmp/cms.out" 2>&1
  check_output cmake-static "$tmp/cms.out" $? "$tmp/consumer-build/consumer_static"
  grep -q '^fw_owns(new int) = 1$' "$tmp/cms.out" || fail "cmake-static: operator new is not freeway's"
  if ldd "$tmp/consumer-build/consumer_static" | grep -q libfreeway; then
    fail "consumer_static links libfreeway.so dynamically"
  fi
else
  cat "$tmp/cfg.log" "$tmp/bld.log" 2>/dev/null; fail "the CMake consumer project does not configure or build"
fi

echo "== 4. C program linked statically with libfreeway.a"
link="$cc $src/consumer.c -I$prefix/include $L/libfreeway.a -lpthread -ldl"
echo "  $link"
# shellcheck disable=SC2086
if $link -o "$tmp/static_consumer" 2> "$tmp/st.err"; then
  "$tmp/static_consumer" > "$tmp/st.out" 2>&1
  check_output static-c "$tmp/st.out" $? "$tmp/static_consumer"
  if ldd "$tmp/static_consumer" | grep -q libfreeway; then fail "static_consumer links libfreeway.so dynamically"; fi
else
  cat "$tmp/st.err"; fail "linking with libfreeway.a failed"
fi

[ $status -eq 0 ] && echo "PASS: the installed freeway builds and replaces malloc via pkg-config, CMake (shared and static) and a static link"
exit $status
