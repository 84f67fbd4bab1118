# cmake/mingw-w64-x86_64.cmake: cross-build freeway for Windows x86-64 with
# Debian's mingw-w64 (gcc-mingw-w64-x86-64, g++-mingw-w64-x86-64), and run its
# test programs under wine (wine64) through ctest.
#   cmake -S . -B build-windows -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(FW_MINGW x86_64-w64-mingw32)
# The posix thread model (std::thread, std::mutex for the inspector and the
# tests); winpthread is linked statically like libgcc and libstdc++.
find_program(CMAKE_C_COMPILER NAMES ${FW_MINGW}-gcc-posix ${FW_MINGW}-gcc REQUIRED)
find_program(CMAKE_CXX_COMPILER NAMES ${FW_MINGW}-g++-posix ${FW_MINGW}-g++ REQUIRED)
find_program(CMAKE_RC_COMPILER NAMES ${FW_MINGW}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/${FW_MINGW})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# printf and friends from mingw-w64 (C99: %zu, %llu), not msvcrt's.
set(CMAKE_C_FLAGS_INIT "-D__USE_MINGW_ANSI_STDIO=1")
set(CMAKE_CXX_FLAGS_INIT "-D__USE_MINGW_ANSI_STDIO=1")
# Programs carry libgcc and libstdc++ inside: they run with no mingw DLL beside them.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static -static-libgcc -static-libstdc++")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-static")
# ctest runs each test program under wine (Debian: /usr/lib/wine/wine64),
# through cmake/wine-run: a run that wine fails to start is run once more.
find_program(FW_WINE NAMES wine64 PATHS /usr/lib/wine NO_DEFAULT_PATH)
find_program(FW_WINE NAMES wine64 wine)
if(FW_WINE)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${CMAKE_CURRENT_LIST_DIR}/wine-run ${FW_WINE})
endif()
