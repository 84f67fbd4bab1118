// platform/cold_bss.h: FW_COLD_BSS, where big arrays of globals go.
//
// On a big array of globals of which a process touches a page or a few, or
// nothing (the core's placeholder LABs, LAB table and region map; the POSIX
// layer's copy of the environment): x86-64 ELF's large-data section, which
// the linker places after .bss (GNU ld and gold merge it into .lbss, lld 14
// keeps it as .lbss.freeway). The small globals every process touches as it
// starts then lie together on a page or two of .bss, not each on its own
// page between the arrays (each page a fault or two at every start:
// docs/design.md, What a start costs; tests/scripts/small_bss.sh). Elsewhere
// (PE, other ELF targets) the arrays stay in .bss.
#pragma once

#if defined(__ELF__) && defined(__x86_64__)
#define FW_COLD_BSS __attribute__((section(".lbss.freeway")))
#else
#define FW_COLD_BSS
#endif
