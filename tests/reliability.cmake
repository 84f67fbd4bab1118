# Reliability tests, included by tests/CMakeLists.txt: the lock-free promise
# (Michael 2004 §1, §3) under signals, frozen threads, fork, out-of-memory,
# thread churn and heap misuse, plus the replay of the fuzzer's regressions.
#
# Each timed test runs for a bounded default (at most about a minute) inside
# `make test`; tools/soak runs the same programs for SOAK_SECONDS. Every one
# has a watchdog of its own that fails it with a message on a stall; the ctest
# TIMEOUT below is only the last resort.
set(FW_RELIABILITY_TIMEOUT 240)

# Like fw_program_test (malloc/free/new are freeway's; label "override", which
# make test-sanitize skips), with a tighter timeout. (doctest_discover_tests
# appends a LABELS of its own to the properties, so a second label cannot be
# given here.)
# test_churn measures RSS against live bytes while its threads run: its cases
# run alone (RUN_SERIAL), so that the figures are the allocator's and not the
# scheduler's (the per-thread and per-CPU passes run the same binary,
# tests/modes.cmake). With a resource lock that kept them only from each
# other, a CI run had the per-CPU producer-consumer case share the 2 cores
# with secure mode's fork and kill tests: it passed 810,000 blocks a second
# (1.07-2.2 million alone or beside two busy loops) and its RSS stepped from
# 70 to 78 MiB in its last 2 s, past its bound (end/early 1.105 against 1.1;
# docs/benchmarks.md, Stop 87).
function(fw_reliability_test name)
  add_executable(${name} ${name}.cpp $<TARGET_OBJECTS:fw_test_main>)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PRIVATE freeway doctest::doctest Threads::Threads ${CMAKE_DL_LIBS})
  if(name STREQUAL "test_churn")
    doctest_discover_tests(${name} PROPERTIES TIMEOUT ${FW_RELIABILITY_TIMEOUT} RUN_SERIAL TRUE LABELS override)
  else()
    doctest_discover_tests(${name} PROPERTIES TIMEOUT ${FW_RELIABILITY_TIMEOUT} LABELS override)
  endif()
endfunction()

foreach(t test_signal_safety test_kill_tolerance test_fork test_oom test_churn test_misuse)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${t}.cpp)
    fw_reliability_test(${t})
  endif()
endforeach()

# Every misuse the default mode catches, secure mode must catch too: test_misuse
# runs again with FREEWAY_SECURE=1. (The bugs only secure mode catches are in
# test_secure.)
if(TARGET test_misuse)
  # EXTRA_ARGS of its own: with the same (none), this call's list of cases would
  # overwrite the default mode's (doctest names the file by them), and the
  # default mode's cases would never run one by one.
  doctest_discover_tests(test_misuse TEST_PREFIX "secure_mode." EXTRA_ARGS --no-intro=true
                         PROPERTIES TIMEOUT ${FW_RELIABILITY_TIMEOUT} LABELS override ENVIRONMENT FREEWAY_SECURE=1)
endif()

# test_oom again in secure mode: an allocation that finds no memory reclaims
# the LAB its slow path holds, whose quarantine keeps spans in use (the
# reclaim case frees in an order that leaves a quarantined block in most
# spans). EXTRA_ARGS of its own, as for test_misuse above.
if(TARGET test_oom)
  doctest_discover_tests(test_oom TEST_PREFIX "secure_mode." EXTRA_ARGS --no-intro=true
                         PROPERTIES TIMEOUT ${FW_RELIABILITY_TIMEOUT} LABELS override ENVIRONMENT FREEWAY_SECURE=1)
endif()

# Secure mode's slow paths are its own (quarantine, formatted blocks, the
# LAB a call holds while its slot says SECURE): the signal, kill, fork and
# thread-lifecycle programs run again in it, whole.
foreach(t test_signal_safety test_kill_tolerance test_fork test_lifecycle)
  if(TARGET ${t})
    add_test(NAME secure_mode.${t} COMMAND ${t})
    set_tests_properties(secure_mode.${t} PROPERTIES TIMEOUT ${FW_RELIABILITY_TIMEOUT} ENVIRONMENT FREEWAY_SECURE=1
                                                      LABELS override)
  endif()
endforeach()

# The fuzz harness (tests/fuzz/harness.cpp) as a plain program linked to the
# core without the malloc override: it replays every input kept in
# tests/fuzz/seeds and tests/fuzz/regressions (tools/fuzz builds the libFuzzer
# version of the same harness in build-fuzz).
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/harness.cpp)
  add_executable(fw_fuzz_replay fuzz/harness.cpp fuzz/replay_main.cpp)
  target_link_libraries(fw_fuzz_replay PRIVATE freeway_testable Threads::Threads)
  add_test(NAME fuzz_regressions_replay
           COMMAND fw_fuzz_replay ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/seeds
                   ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/regressions)
  set_tests_properties(fuzz_regressions_replay PROPERTIES TIMEOUT 120)

  # The libFuzzer build of the harness (tools/fuzz configures build-fuzz with
  # clang, -DFREEWAY_FUZZ=ON and -fsanitize=address,undefined,fuzzer-no-link
  # for everything, so the allocator itself is coverage-instrumented).
  option(FREEWAY_FUZZ "Build the libFuzzer harness fw_fuzz (clang)" OFF)
  if(FREEWAY_FUZZ)
    add_executable(fw_fuzz fuzz/harness.cpp)
    target_link_libraries(fw_fuzz PRIVATE freeway_testable Threads::Threads)
    target_link_options(fw_fuzz PRIVATE -fsanitize=fuzzer)
  endif()
endif()
