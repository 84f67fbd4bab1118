# tests/gui.cmake: freeway-inspect's GUI under Xvfb, included by
# tests/CMakeLists.txt. The cases are in tests/inspector_cli/e2e.py (they
# share its child process under LD_PRELOAD with telemetry on):
#   gui.live_screenshot    a screenshot of a live process; check_screenshot finds
#                          at least three span-state colours (400+ pixels each)
#   gui.replay_screenshot  the same from a recording (--replay)
#   replay: ...            test_gui_app: the GUI's App on a stored recording
#                          (events shown after a scrub, the replay rate)
#   gui.windows_recording  a recording made on Windows (tests/inspector_cli/
#                          windows.fwrec) replays in the CLI and the GUI
#   gui.errors             dead pid, missing recording, bad arguments, and no
#                          display at all: exit 2 with one line
# and in tests/gui/exited.py (freeway-demo as the watched process):
#   gui.exited             the process exits while watched: exit 0, its last
#                          state still on screen (two or more state colours)
if(TARGET freeway-inspect AND TARGET telemetry_child AND TARGET fwi_gui)
  find_program(FW_XVFB_RUN xvfb-run)
  if(NOT FW_XVFB_RUN)
    message(FATAL_ERROR "The GUI's tests need xvfb-run (Debian packages xvfb and xauth; `make test` installs them).")
  endif()
  # The GUI's source of snapshots on a stored recording (no window).
  add_executable(test_gui_app gui/test_app.cpp $<TARGET_OBJECTS:fw_test_main>)
  target_include_directories(test_gui_app PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(test_gui_app PRIVATE FW_TEST_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}"
                                                  FW_TEST_BINARY_DIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(test_gui_app PRIVATE fwi_gui doctest::doctest)
  doctest_discover_tests(test_gui_app PROPERTIES TIMEOUT 60 LABELS inspector)
  add_executable(check_screenshot gui/check_screenshot.cpp)
  target_include_directories(check_screenshot PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(check_screenshot PRIVATE fwi_model PkgConfig::FWI_STB)
  foreach(case live_screenshot replay_screenshot windows_recording errors)
    add_test(NAME gui.${case}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/inspector_cli/e2e.py
              $<TARGET_FILE:freeway-inspect> $<TARGET_FILE:telemetry_child> $<TARGET_FILE:freeway> gui_${case})
    set_tests_properties(gui.${case} PROPERTIES TIMEOUT 180 LABELS inspector
      ENVIRONMENT "FW_XVFB_RUN=${FW_XVFB_RUN};FW_CHECK_SCREENSHOT=$<TARGET_FILE:check_screenshot>"
      RESOURCE_LOCK xvfb)  # two `xvfb-run -a` starting at once can pick the same display
  endforeach()
  if(TARGET freeway-demo)
    add_test(NAME gui.exited
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gui/exited.py
              $<TARGET_FILE:freeway-inspect> $<TARGET_FILE:freeway-demo>)
    set_tests_properties(gui.exited PROPERTIES TIMEOUT 180 LABELS inspector
      ENVIRONMENT "FW_XVFB_RUN=${FW_XVFB_RUN};FW_CHECK_SCREENSHOT=$<TARGET_FILE:check_screenshot>"
      RESOURCE_LOCK xvfb)
  endif()
endif()
