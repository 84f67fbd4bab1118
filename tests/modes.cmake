# The cache modes (core/percpu.h). The suite above runs in the default mode
# (FREEWAY_PERCPU=2: per-thread until a process's threads are more than twice
# the CPUs, then per-CPU); these run the whole-allocator test binaries again
# in each mode from the start, per-thread (FREEWAY_PERCPU=0) and per-CPU
# (FREEWAY_PERCPU=1), so that both modes pass every one of them. Small binaries
# are one test each; test_churn's cases run one process each, as above (each
# measures RSS from a fresh heap).
# Binaries whose malloc is freeway's carry the label "override", as their
# first registrations do (a sanitizer build skips them: its runtime owns malloc).
foreach(t test_stress test_large test_stats test_lifecycle test_api test_cxx_new
          test_kill_tolerance test_signal_safety test_fork test_oom test_misuse)
  if(TARGET ${t})
    set(labels "")
    if(NOT t MATCHES "^test_(stress|large|stats)$")
      set(labels override)
    endif()
    foreach(mode per_thread per_cpu)
      if(mode STREQUAL "per_thread")
        set(env FREEWAY_PERCPU=0)
      else()
        set(env FREEWAY_PERCPU=1)
      endif()
      add_test(NAME ${mode}.${t} COMMAND ${t})
      set_tests_properties(${mode}.${t} PROPERTIES TIMEOUT 300 ENVIRONMENT ${env} LABELS "${labels}")
    endforeach()
  endif()
endforeach()
# doctest_discover_tests names the file it generates by a hash of TEST_SPEC and
# EXTRA_ARGS alone: with the same ones, each call would overwrite the list of
# the one before (all three registrations of test_churn then ran per-CPU). So
# each mode passes an option of its own that changes only doctest's banner.
if(TARGET test_churn)
  doctest_discover_tests(test_churn TEST_PREFIX "per_thread." EXTRA_ARGS --no-intro=true
    PROPERTIES TIMEOUT ${FW_RELIABILITY_TIMEOUT} ENVIRONMENT FREEWAY_PERCPU=0 RUN_SERIAL TRUE LABELS override)
  doctest_discover_tests(test_churn TEST_PREFIX "per_cpu." EXTRA_ARGS --no-version=true
    PROPERTIES TIMEOUT ${FW_RELIABILITY_TIMEOUT} ENVIRONMENT FREEWAY_PERCPU=1 RUN_SERIAL TRUE LABELS override)
endif()
