# The cache modes (core/percpu.h). The suite above runs in the default mode,
# per-CPU wherever rseq is registered; these run the whole-allocator test
# binaries again in per-thread mode (FREEWAY_PERCPU=0), so that both modes
# pass every one of them. Each binary is one test here (all its cases).
foreach(t test_stress test_large test_stats test_lifecycle test_api test_cxx_new test_churn
          test_kill_tolerance test_signal_safety test_fork test_oom test_misuse)
  if(TARGET ${t})
    add_test(NAME per_thread.${t} COMMAND ${t})
    set_tests_properties(per_thread.${t} PROPERTIES TIMEOUT 300 ENVIRONMENT FREEWAY_PERCPU=0)
    if(t STREQUAL "test_churn")
      set_tests_properties(per_thread.${t} PROPERTIES RESOURCE_LOCK rss_figures)  # reliability.cmake
    endif()
  endif()
endforeach()
