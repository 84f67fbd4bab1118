# tests/inspector.cmake: the inspector's tests, included by tests/CMakeLists.txt.
# The model's tests link fwi_model and doctest only (not libfreeway): they
# build synthetic segments and recordings in memory and in temporary files.
#
#   test_inspector_model   header validation, snapshots, events, derive(),
#                          check_spans(), history, recordings (doctest cases)
#   inspector_fuzz_replay  the reader's fuzz entry on the seed corpus and the
#                          saved crashes (tests/fuzz/inspector/seeds and
#                          regressions/, which is absent until the fuzzer finds
#                          something) plus 20,000 fixed-seed mutations of valid
#                          segments and recordings (about 0.4 s)
#   fwi_fuzz               (-DFREEWAY_FUZZ=ON, clang) the libFuzzer build of the
#                          same entry
#
# With FREEWAY_INSPECTOR=OFF (no GUI libraries) the model is still built here.
if(NOT TARGET fwi_model)
  add_subdirectory(${PROJECT_SOURCE_DIR}/inspector/model ${CMAKE_CURRENT_BINARY_DIR}/fwi_model)
endif()

foreach(t test_inspector_model)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${t}.cpp)
    add_executable(${t} ${t}.cpp $<TARGET_OBJECTS:fw_test_main>)
    target_link_libraries(${t} PRIVATE fwi_model doctest::doctest Threads::Threads)
    doctest_discover_tests(${t} PROPERTIES TIMEOUT 120 LABELS inspector)
  endif()
endforeach()

if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/inspector/harness.cpp)
  add_executable(fwi_fuzz_replay fuzz/inspector/harness.cpp fuzz/inspector/replay_main.cpp)
  target_link_libraries(fwi_fuzz_replay PRIVATE fwi_model)
  add_test(NAME inspector_fuzz_replay
           COMMAND fwi_fuzz_replay --mutate 20000 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/inspector/seeds
                   ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/inspector/regressions)
  set_tests_properties(inspector_fuzz_replay PROPERTIES TIMEOUT 300 LABELS inspector)
  if(FREEWAY_FUZZ)
    add_executable(fwi_fuzz fuzz/inspector/harness.cpp)
    target_link_libraries(fwi_fuzz PRIVATE fwi_model)
    target_link_options(fwi_fuzz PRIVATE -fsanitize=fuzzer)
  endif()
endif()

if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/inspector_cli.cmake)
  include(${CMAKE_CURRENT_LIST_DIR}/inspector_cli.cmake)
endif()
