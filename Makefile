# freeway: the commands a user runs. CMake does the building; this file makes
# sure a fresh Debian machine has what each command needs, then calls it.
PREFIX ?= /usr/local
BUILD  ?= build
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

# Debian packages each command needs (checked with dpkg, installed if missing).
# The build covers the demo (spdlog) and freeway-inspect (Dear ImGui with its
# GLFW and OpenGL 3 backends, GLFW, OpenGL, stb_image_write); CMake stops with
# a message naming the package if one is missing. Running the GUI needs Mesa's
# OpenGL drivers; the GUI's tests draw into Xvfb.
PKGS_BUILD := cmake g++ make pkg-config libspdlog-dev libimgui-dev libglfw3-dev libgl-dev libstb-dev
PKGS_GL    := libgl1-mesa-dri libglx-mesa0 fonts-dejavu-core
PKGS_DEMO  := $(PKGS_BUILD) $(PKGS_GL)
PKGS_TEST  := $(PKGS_BUILD) $(PKGS_GL) doctest-dev libmimalloc-dev python3 coreutils xvfb xauth
PKGS_BENCH := $(PKGS_BUILD) python3 python3-matplotlib libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 time sqlite3 tcl perl redis-server redis-tools ruby rocksdb-tools z3 ghostscript jq cppcheck
PKGS_SAN   := $(PKGS_TEST) clang libclang-rt-14-dev
# Windows: cross-built with mingw-w64, tested under wine (cmake/mingw-w64-x86_64.cmake).
PKGS_WIN   := cmake make gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64 wine64 doctest-dev
BUILD_WIN  ?= build-windows

.PHONY: all build test demo install bench bench-quick test-sanitize soak fuzz clean windows test-windows bench-windows deps-build deps-demo deps-test deps-bench deps-san deps-win

all: build

# tools/ensure-packages installs only what dpkg reports missing (needs root or sudo).
deps-build: ; @tools/ensure-packages $(PKGS_BUILD)
deps-demo:  ; @tools/ensure-packages $(PKGS_DEMO)
deps-test:  ; @tools/ensure-packages $(PKGS_TEST)
deps-bench: ; @tools/ensure-packages $(PKGS_BENCH)
deps-san:   ; @tools/ensure-packages $(PKGS_SAN)
deps-win:   ; @tools/ensure-packages $(PKGS_WIN)

# Order-only: under make -j the configure must not run before the packages it finds are in.
# The target is the generated Makefile, which only a configure that succeeded
# writes: after one that stopped (say on a missing package, installed since),
# CMakeCache.txt exists and `make build` would not configure again.
$(BUILD)/Makefile: | deps-build
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps-build $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

test: deps-test
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFREEWAY_TESTS=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300

# The demo workload with telemetry on, watched by freeway-inspect: the GUI
# with a display, `freeway-inspect watch` in this terminal without one
# (tools/demo; DEMO_SECONDS sets the length of one pass, 6 to 86400, default 60).
demo: deps-demo
	$(MAKE) build
	tools/demo $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

bench: deps-bench build
	bench/run --build-dir $(BUILD)

bench-quick: deps-bench build
	bench/run --quick --build-dir $(BUILD)

# Windows x86-64: libfreeway.a and the test programs, cross-built.
windows: deps-win
	cmake -S . -B $(BUILD_WIN) -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake -DCMAKE_BUILD_TYPE=Release -DFREEWAY_TESTS=ON
	cmake --build $(BUILD_WIN) -j $(JOBS)

# The Windows test suite, run under wine by ctest. Runs that wine failed to
# start were run once more (cmake/wine-run); they are listed after ctest's own
# summary.
test-windows: windows
	rm -f $(BUILD_WIN)/wine-retries.log
	cd $(BUILD_WIN) && ctest --output-on-failure -j $(JOBS) --timeout 300; rc=$$?; \
	  if [ -s wine-retries.log ]; then \
	    echo "wine failed to start these runs; each was run once more (cmake/wine-run):"; \
	    cat wine-retries.log; \
	  fi; exit $$rc

# ns per malloc/free pair under wine: the CRT's heap, freeway linked in
# statically, and freeway injected into the CRT build (freeway-inject.exe).
WINE_RUN = WINEPREFIX=$(abspath $(BUILD_WIN))/wineprefix WINEDEBUG=-all DISPLAY= \
	$$(grep '^FW_WINE:' $(BUILD_WIN)/CMakeCache.txt | cut -d= -f2)
bench-windows: windows
	for t in 1 2; do \
	  $(WINE_RUN) $(BUILD_WIN)/bench/windows/pairs_crt.exe $$t || exit 1; \
	  $(WINE_RUN) $(BUILD_WIN)/bench/windows/pairs_freeway.exe $$t || exit 1; \
	  $(WINE_RUN) $(BUILD_WIN)/freeway-inject.exe -- $(BUILD_WIN)/bench/windows/pairs_crt.exe $$t || exit 1; \
	done

test-sanitize: deps-san
	tools/sanitize-tests

# Long versions of the reliability tests (minutes), and the fuzzer.
SOAK_SECONDS ?= 300
FUZZ_SECONDS ?= 300
soak: deps-test
	SOAK_SECONDS=$(SOAK_SECONDS) tools/soak

fuzz: deps-san
	FUZZ_SECONDS=$(FUZZ_SECONDS) tools/fuzz

clean:
	rm -rf $(BUILD) $(BUILD_WIN) build-asan build-tsan
