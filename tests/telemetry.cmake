# Telemetry tests, included by tests/CMakeLists.txt: the publisher seen from
# outside (segment name, mode, life time, snapshots, events, planted files,
# fork), and the reliability tests again with telemetry on, publishing at
# 200 Hz so that the publisher runs all through them.
add_executable(test_telemetry test_telemetry.cpp $<TARGET_OBJECTS:fw_test_main>)
target_include_directories(test_telemetry PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(test_telemetry PRIVATE freeway doctest::doctest Threads::Threads)
# RESOURCE_LOCK: inspector_cli.stale_pruned prunes the stale segment one case leaves.
doctest_discover_tests(test_telemetry PROPERTIES TIMEOUT 120 LABELS override RESOURCE_LOCK freeway_stale_segments)

# A file size limit or a small /dev/shm: telemetry off with one line, never a
# SIGXFSZ or SIGBUS that ends the program.
add_test(NAME telemetry.limits COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/scripts/telemetry_limits.sh $<TARGET_FILE:freeway>)
set_tests_properties(telemetry.limits PROPERTIES TIMEOUT 60 LABELS override)

foreach(t test_signal_safety test_kill_tolerance test_fork)
  if(TARGET ${t})
    add_test(NAME telemetry_on.${t} COMMAND ${t})
    set_tests_properties(telemetry_on.${t} PROPERTIES TIMEOUT 240 LABELS override
      ENVIRONMENT "FREEWAY_TELEMETRY=1;FREEWAY_TELEMETRY_HZ=200")
  endif()
endforeach()
