# tests/inspector_cli.cmake: freeway-inspect's CLI end to end, included by
# tests/inspector.cmake when the inspector is built. Each case of
# tests/inspector_cli/e2e.py is one test: a child that knows nothing of
# freeway (telemetry_child) runs under LD_PRELOAD=libfreeway.so with
# FREEWAY_TELEMETRY=1, and the CLI reads it from outside.
#   inspector_cli.snapshot_matches_fw_stats  JSON snapshot == fw_stats inside (tolerance 0), text form, list, exit
#   inspector_cli.check                      passes when healthy, fails naming each crossed threshold
#   inspector_cli.record_replay_diff         record 2 s while the child grows 64 MiB; replay; diff; damaged files
#   inspector_cli.bad_sources                dead pid, no telemetry, not a pid, wrong version, garbage: exit 2, one line
#   inspector_cli.stale_pruned               a SIGKILLed child's segment is listed as stale and pruned
#   inspector_cli.watch                      a bounded watch, and watch following the process to its exit
#   inspector_cli.exec_without_freeway       a process that exec'd a program without freeway: its segment is stale
#   inspector_cli.orphaned_leader            a process whose main thread exited while others run: alive, not pruned
if(TARGET freeway-inspect)
  find_package(Python3 COMPONENTS Interpreter)
  if(NOT Python3_Interpreter_FOUND)
    message(FATAL_ERROR "The inspector's end-to-end tests need python3 (Debian package python3; `make test` installs it).")
  endif()
  add_executable(telemetry_child inspector_cli/telemetry_child.c)
  target_include_directories(telemetry_child PRIVATE ${PROJECT_SOURCE_DIR}/include)
  find_package(Threads REQUIRED)
  target_link_libraries(telemetry_child PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)  # not linked with freeway: it is preloaded
  foreach(case snapshot_matches_fw_stats check record_replay_diff bad_sources stale_pruned watch exec_without_freeway
               orphaned_leader)
    add_test(NAME inspector_cli.${case}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/inspector_cli/e2e.py
              $<TARGET_FILE:freeway-inspect> $<TARGET_FILE:telemetry_child> $<TARGET_FILE:freeway> ${case})
    set_tests_properties(inspector_cli.${case} PROPERTIES TIMEOUT 120 LABELS inspector)
  endforeach()
  # `list` prunes every stale segment in /dev/shm, including the one
  # test_telemetry leaves on purpose (SIGKILL) and then checks for.
  set_tests_properties(inspector_cli.stale_pruned inspector_cli.exec_without_freeway inspector_cli.orphaned_leader
                       PROPERTIES RESOURCE_LOCK freeway_stale_segments)
endif()
