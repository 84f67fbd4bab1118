# tests/windows/dll_imports.cmake: freeway.dll must import kernel32 alone (it
# is loaded into programs whose CRT it patches; it must not bring its own).
#   cmake -DOBJDUMP=... -DDLL=... -P dll_imports.cmake
execute_process(COMMAND ${OBJDUMP} -p ${DLL} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "objdump -p ${DLL} failed")
endif()
string(REGEX MATCHALL "DLL Name: [^\n]+" names "${out}")
string(REPLACE "DLL Name: " "" names "${names}")
message(STATUS "freeway.dll imports: ${names}")
foreach(n IN LISTS names)
  string(TOLOWER "${n}" lower)
  if(NOT lower STREQUAL "kernel32.dll")
    message(FATAL_ERROR "freeway.dll imports ${n}; it may import kernel32.dll only")
  endif()
endforeach()
if(NOT names)
  message(FATAL_ERROR "no imports found in ${DLL}")
endif()
