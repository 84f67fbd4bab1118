# tests/extra.cmake: tests beyond the doctest programs, included by
# tests/CMakeLists.txt. Scripts live in tests/scripts/, the programs and data
# they use in tests/programs/.
#
#   first_call.<mode>   tests/programs/first_call.c built per mode and run with
#                       and without LD_PRELOAD=libfreeway.so (first allocator
#                       call in .preinit_array, a constructor, dlsym, a thread...)
#   options.environment FREEWAY_<NAME> values out of range, very long, and read
#                       for a first malloc in .preinit_array (tests/scripts/options.sh)
#   preload.python      python3 (PYTHONMALLOC=malloc) on an object-heavy script
#   preload.gxx         g++ -O2 -c of a real C++ file; same nm list and bytes
#   preload.sort        sort of 2 million generated lines, three ways
#   preload.ulimit      ls, sort and python3 under ulimit -v 64/128/256 MiB
#   preload.cxx_plugin  a C program dlopens a C++ plugin (its runtime in the
#                       plugin's local scope): operator new's new_handler loop
#                       and std::bad_alloc, plain and under LD_PRELOAD
#   preload.errno_nothp malloc keeps errno where MADV_NOHUGEPAGE is refused
#   preload.glibc_api, static.glibc_api  glibc's mallinfo2, malloc_trim,
#                       mallopt, malloc_info, malloc_stats and __libc_ names,
#                       plain, preloaded and linked -static with libfreeway.a
#   preload.dlsym_libc  dlsym through libc.so.6's handle (ctypes.CDLL) finds
#                       the process's malloc and free, not glibc's own; and so
#                       for every other function libfreeway.so defines that
#                       the C library has
#   install.consumers   cmake --install, then pkg-config, CMake find_package
#                       and static-link consumers of the installed copy
#   install.multiarch_libdir  the same for a build with CMAKE_INSTALL_PREFIX=/usr
#                       (libraries in lib/x86_64-linux-gnu)
#   bench_run_lib       bench/run's --lib: specs it refuses, and an allocator
#                       from a file run interleaved, with its environment
#   after_peak          a heap freed four ways, then a small working set run
#                       on the fast paths: the resident set comes back down
# The preload tests compare a plain run with an LD_PRELOAD run; any difference
# in output or exit status fails. Scripts exit 77 (skipped) when a tool is
# missing.

set(FW_TEST_SCRIPTS ${CMAKE_CURRENT_SOURCE_DIR}/scripts)
set(FW_TEST_PROGRAMS ${CMAKE_CURRENT_SOURCE_DIR}/programs)
set(FW_TEST_TMP ${CMAKE_CURRENT_BINARY_DIR}/tmp)
file(MAKE_DIRECTORY ${FW_TEST_TMP})

# The compiler must not fold or drop the programs' allocations.
set(FW_TEST_C_FLAGS -O2 -fno-builtin -Wall -Wextra)

# --- First calls -------------------------------------------------------------
set(FW_FIRST_CALL_MODES preinit constructor dlsym free_first calloc_first aligned_first huge_first thread_free)
foreach(mode IN LISTS FW_FIRST_CALL_MODES)
  set(exe fw_first_call_${mode})
  add_executable(${exe} ${FW_TEST_PROGRAMS}/first_call.c)
  target_compile_definitions(${exe} PRIVATE FC_MODE_${mode})
  target_compile_options(${exe} PRIVATE ${FW_TEST_C_FLAGS})
  # Not linked to freeway: the script preloads it.
  target_link_libraries(${exe} PRIVATE Threads::Threads ${CMAKE_DL_LIBS} m)
  add_dependencies(${exe} freeway)
  add_test(NAME first_call.${mode}
    COMMAND ${FW_TEST_SCRIPTS}/run_first_call.sh $<TARGET_FILE:freeway> $<TARGET_FILE:${exe}>
            ${FW_TEST_PROGRAMS}/first_call_expected/${mode}.txt)
  set_tests_properties(first_call.${mode} PROPERTIES TIMEOUT 60 ENVIRONMENT "TMPDIR=${FW_TEST_TMP}")
endforeach()

# Options from outside: out-of-range and long values, and a first malloc in
# .preinit_array, before the C library has set `environ` (first_call's preinit build).
add_test(NAME options.environment
  COMMAND sh ${FW_TEST_SCRIPTS}/options.sh $<TARGET_FILE:freeway> $<TARGET_FILE:fw_first_call_preinit>)
set_tests_properties(options.environment PROPERTIES TIMEOUT 60)

# --- Real programs under LD_PRELOAD ------------------------------------------
add_test(NAME preload.python
  COMMAND ${FW_TEST_SCRIPTS}/preload_python.sh $<TARGET_FILE:freeway> ${FW_TEST_PROGRAMS}/python_workload.py)
add_test(NAME preload.gxx
  COMMAND ${FW_TEST_SCRIPTS}/preload_gxx.sh $<TARGET_FILE:freeway> ${FW_TEST_PROGRAMS}/compile_me.cpp)
add_test(NAME preload.sort COMMAND ${FW_TEST_SCRIPTS}/preload_sort.sh $<TARGET_FILE:freeway>)
set_tests_properties(preload.python preload.gxx preload.sort PROPERTIES
  TIMEOUT 180 SKIP_RETURN_CODE 77 ENVIRONMENT "TMPDIR=${FW_TEST_TMP}")
add_test(NAME preload.ulimit COMMAND ${FW_TEST_SCRIPTS}/preload_ulimit.sh $<TARGET_FILE:freeway>)
set_tests_properties(preload.ulimit PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 ENVIRONMENT "TMPDIR=${FW_TEST_TMP}")
# sort uses both cores and ~0.5 GB; keep it from running beside the other big ones.
set_tests_properties(preload.sort PROPERTIES RUN_SERIAL TRUE)

# A C++ runtime that only a dlopened plugin brought in: freeway's operator new
# must find it when an allocation fails (shim/new.cpp).
add_library(fw_cxx_plugin MODULE ${FW_TEST_PROGRAMS}/cxx_plugin.cpp)
target_compile_options(fw_cxx_plugin PRIVATE -O2 -fno-builtin -Wall -Wextra)
add_executable(fw_plugin_host ${FW_TEST_PROGRAMS}/plugin_host.c)
target_compile_options(fw_plugin_host PRIVATE ${FW_TEST_C_FLAGS})
target_link_libraries(fw_plugin_host PRIVATE ${CMAKE_DL_LIBS})  # C only: no C++ runtime of its own
add_dependencies(fw_plugin_host freeway fw_cxx_plugin)
add_test(NAME preload.cxx_plugin
  COMMAND sh -c "\"$1\" \"$2\" && LD_PRELOAD=\"$3\" \"$1\" \"$2\"" sh
          $<TARGET_FILE:fw_plugin_host> $<TARGET_FILE:fw_cxx_plugin> $<TARGET_FILE:freeway>)
set_tests_properties(preload.cxx_plugin PROPERTIES TIMEOUT 60 LABELS override)  # preloads freeway: sanitizer builds skip it

# A library dlopened with RTLD_DEEPBIND (PHP's extensions) uses freeway's malloc
# and free under LD_PRELOAD, and is still found through the caller's RUNPATH
# (shim/deepbind.cpp: glibc on x86-64); FREEWAY_DEEPBIND=1 keeps the flag, and
# the C library's. The host is built as a PIE: in a position-dependent
# executable &malloc is its own PLT entry, which no library's &malloc equals.
include(CheckSymbolExists)
set(CMAKE_REQUIRED_DEFINITIONS -D_GNU_SOURCE)
check_symbol_exists(RTLD_DEEPBIND dlfcn.h FW_HAVE_RTLD_DEEPBIND)
unset(CMAKE_REQUIRED_DEFINITIONS)
if(FW_HAVE_RTLD_DEEPBIND AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
add_library(fw_deepbind_plugin MODULE ${FW_TEST_PROGRAMS}/deepbind_plugin.c)
target_compile_options(fw_deepbind_plugin PRIVATE ${FW_TEST_C_FLAGS})
set_target_properties(fw_deepbind_plugin PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/deepbind/plugins)
add_executable(fw_deepbind_host ${FW_TEST_PROGRAMS}/deepbind_host.c)
target_compile_options(fw_deepbind_host PRIVATE ${FW_TEST_C_FLAGS} -fPIE)
target_link_libraries(fw_deepbind_host PRIVATE ${CMAKE_DL_LIBS})
target_link_options(fw_deepbind_host PRIVATE -pie -Wl,--enable-new-dtags)
set_target_properties(fw_deepbind_host PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/deepbind
  BUILD_RPATH "\$ORIGIN/plugins")
add_dependencies(fw_deepbind_host freeway fw_deepbind_plugin)
add_test(NAME preload.deepbind
  COMMAND sh -c "\"$1\" $2 1 && LD_PRELOAD=\"$3\" \"$1\" $2 1 && FREEWAY_DEEPBIND=1 LD_PRELOAD=\"$3\" \"$1\" $2 0" sh
          $<TARGET_FILE:fw_deepbind_host> $<TARGET_FILE_NAME:fw_deepbind_plugin> $<TARGET_FILE:freeway>)
set_tests_properties(preload.deepbind PROPERTIES TIMEOUT 60 LABELS override)
endif()

# malloc keeps errno when it succeeds on a kernel without transparent huge
# pages (MADV_NOHUGEPAGE refused with EINVAL, here through seccomp).
add_executable(fw_errno_nothp ${FW_TEST_PROGRAMS}/errno_nothp.c)
target_compile_options(fw_errno_nothp PRIVATE ${FW_TEST_C_FLAGS})
add_dependencies(fw_errno_nothp freeway)
add_test(NAME preload.errno_nothp COMMAND env LD_PRELOAD=$<TARGET_FILE:freeway> $<TARGET_FILE:fw_errno_nothp>)
set_tests_properties(preload.errno_nothp PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 LABELS override)

# glibc's allocator interface beyond the malloc family (shim/glibc.cpp): the
# __libc_ names, mallinfo2, malloc_trim, mallopt, malloc_info, malloc_stats.
# The program checks what glibc does (plain run), then the same with freeway's
# figures, under LD_PRELOAD and linked -static with libfreeway.a: before,
# that link failed ("multiple definition of `malloc'", libc.a's malloc.o) for
# a program that named any of them. No static link under a sanitizer.
#
# fw_preload_runs(test program script): builds tests/programs/<program>.c as
# fw_<program> (not linked to freeway) and runs the shell commands `script`,
# in which "$1" is the program and "$2" libfreeway.so.
function(fw_preload_runs test program script)
  add_executable(fw_${program} ${FW_TEST_PROGRAMS}/${program}.c)
  target_compile_options(fw_${program} PRIVATE ${FW_TEST_C_FLAGS})
  target_include_directories(fw_${program} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(fw_${program} PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(fw_${program} freeway)
  add_test(NAME ${test} COMMAND sh -c "${script}" sh $<TARGET_FILE:fw_${program}> $<TARGET_FILE:freeway>)
  set_tests_properties(${test} PROPERTIES TIMEOUT 60 LABELS override)
endfunction()
check_symbol_exists(__GLIBC__ features.h FW_HAVE_GLIBC)
if(FW_HAVE_GLIBC)
  fw_preload_runs(preload.glibc_api glibc_api
    "\"$1\" glibc && LD_PRELOAD=\"$2\" \"$1\" freeway && FREEWAY_PERCPU=1 LD_PRELOAD=\"$2\" \"$1\" freeway")
  # A -static link needs the C and C++ libraries' archives (Debian's libc6-dev
  # and libstdc++-dev have them; some distributions package them apart).
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_LINK_OPTIONS -static)
  check_cxx_source_compiles("#include <new>\nint main() { delete new int(1); return 0; }" FW_CAN_LINK_STATIC)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT FW_CAN_LINK_STATIC)
    message(STATUS "static.glibc_api not registered: this toolchain cannot link -static (no libc.a or libstdc++.a)")
  endif()
  if(FW_CAN_LINK_STATIC AND NOT CMAKE_C_FLAGS MATCHES "-fsanitize" AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
    add_executable(fw_glibc_api_static ${FW_TEST_PROGRAMS}/glibc_api.c)
    target_compile_definitions(fw_glibc_api_static PRIVATE GA_STATIC)
    target_compile_options(fw_glibc_api_static PRIVATE ${FW_TEST_C_FLAGS})
    target_link_libraries(fw_glibc_api_static PRIVATE freeway_static)
    target_link_options(fw_glibc_api_static PRIVATE -static)
    # libfreeway.a's operator new needs the C++ runtime.
    set_target_properties(fw_glibc_api_static PROPERTIES LINKER_LANGUAGE CXX)
    add_test(NAME static.glibc_api COMMAND fw_glibc_api_static freeway)
    set_tests_properties(static.glibc_api PROPERTIES TIMEOUT 60 LABELS override)
  endif()
endif()

# dlsym through a handle of the C library (shim/dlsym.cpp: glibc on x86-64),
# as Python's ctypes.CDLL("libc.so.6") looks names up: plain, under LD_PRELOAD
# the handle's malloc and free are the process's and blocks cross both ways;
# with FREEWAY_LIBC_DLSYM=1 they are the C library's own.
# Not in a sanitizer build, whose libfreeway.so has no dlsym (CMakeLists.txt).
if(FW_HAVE_GLIBC AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  # The names mode gets every function libfreeway.so defines (nm).
  fw_preload_runs(preload.dlsym_libc dlsym_libc
    "\"$1\" process && LD_PRELOAD=\"$2\" \"$1\" process && FREEWAY_LIBC_DLSYM=1 LD_PRELOAD=\"$2\" \"$1\" own && LD_PRELOAD=\"$2\" \"$1\" names $(\"${CMAKE_NM}\" -D --defined-only \"$2\" | awk '$2 == \"T\" || $2 == \"W\" || $2 == \"i\" { print $3 }' | sed 's/@.*//')")
endif()

# --- Install -----------------------------------------------------------------
add_test(NAME install.consumers
  COMMAND ${FW_TEST_SCRIPTS}/install_test.sh ${CMAKE_COMMAND} ${PROJECT_BINARY_DIR}
          ${FW_TEST_PROGRAMS}/install_consumer ${CMAKE_C_COMPILER} ${CMAKE_CXX_COMPILER})
# The same for a build configured with CMAKE_INSTALL_PREFIX=/usr, where
# GNUInstallDirs picks lib/<multiarch>: builds the libraries once more.
add_test(NAME install.multiarch_libdir
  COMMAND ${FW_TEST_SCRIPTS}/install_multiarch_test.sh ${CMAKE_COMMAND} ${PROJECT_SOURCE_DIR}
          ${FW_TEST_PROGRAMS}/install_consumer ${CMAKE_C_COMPILER} ${CMAKE_CXX_COMPILER})
set_tests_properties(install.consumers install.multiarch_libdir PROPERTIES
  TIMEOUT 300 ENVIRONMENT "TMPDIR=${FW_TEST_TMP}")

# --- Cache mode (core/percpu.h) ------------------------------------------------
add_executable(fw_cache_mode ${FW_TEST_PROGRAMS}/cache_mode.c)
target_compile_options(fw_cache_mode PRIVATE ${FW_TEST_C_FLAGS})
target_link_libraries(fw_cache_mode PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
add_dependencies(fw_cache_mode freeway)
add_test(NAME cache_mode COMMAND ${FW_TEST_SCRIPTS}/cache_mode.sh $<TARGET_FILE:freeway> $<TARGET_FILE:fw_cache_mode>)
set_tests_properties(cache_mode PROPERTIES TIMEOUT 120 ENVIRONMENT "TMPDIR=${FW_TEST_TMP}" LABELS override)  # preloads freeway: sanitizer builds skip it

# --- bench/run's --lib (docs/benchmarks.md, "How the suite measures") ----------
# Runs bench/run on one quick benchmark from this build's bench/ folder:
# refused specs, and an extra allocator interleaved with its environment.
if(TARGET bench_teardown AND TARGET bench_spawn AND FREEWAY_BENCH_BIN_DIR STREQUAL "${CMAKE_BINARY_DIR}/bench")
  add_test(NAME bench_run_lib
    COMMAND ${FW_TEST_SCRIPTS}/bench_run_lib.sh ${PROJECT_SOURCE_DIR}/bench/run ${CMAKE_BINARY_DIR} $<TARGET_FILE:freeway>)
  set_tests_properties(bench_run_lib PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 ENVIRONMENT "TMPDIR=${FW_TEST_TMP}"
    LABELS override)  # preloads freeway
endif()

# --- the decay's tick, from outside (docs/design.md, "The decay's tick") -------
# bench's after_peak under LD_PRELOAD: the memory of a freed heap goes back while
# the program runs on the fast paths.
if(TARGET bench_after_peak)
  add_test(NAME after_peak
    COMMAND ${FW_TEST_SCRIPTS}/after_peak.sh $<TARGET_FILE:bench_after_peak> $<TARGET_FILE:freeway>)
  set_tests_properties(after_peak PROPERTIES TIMEOUT 60 LABELS override)  # preloads freeway
endif()
