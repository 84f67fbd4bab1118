// inspector/model/printf.h: the format archetype of the inspector's printf-like
// helpers. mingw-w64 builds use its C99 printf (__USE_MINGW_ANSI_STDIO, set by
// cmake/mingw-w64-x86_64.cmake), whose archetype GCC calls gnu_printf there
// (plain `printf` means msvcrt's, which lacks %zu).
#pragma once
#if defined(__MINGW32__)
#define FWI_PRINTF gnu_printf
#else
#define FWI_PRINTF printf
#endif
