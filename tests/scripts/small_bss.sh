#!/bin/sh
# On x86-64 ELF the core's big arrays live in .lbss (FW_COLD_BSS, core/config.h),
# after .bss, so that the small globals every process touches as it starts
# share a few pages (docs/design.md, What a start costs). This fails when
# .bss of libfreeway.so grows past 16 KiB (four pages; 6.6 KiB at Stop 84),
# as it does when a big array is defined without FW_COLD_BSS, and names the
# biggest objects in it.
set -eu
lib=$1
case "$(uname -m)" in x86_64) ;; *) echo "not x86-64: nothing to check"; exit 0 ;; esac
# A section's size is the fourth field after its name (type, address, offset, size),
# whatever the width of its number in brackets.
# GNU ld and gold merge the arrays into .lbss; lld 14 keeps .lbss.freeway.
size_of() { readelf -S -W "$lib" | awk -v s="$1" '{ for (i = 1; i < NF; i++) if ($i ~ s) { print $(i + 4); exit } }'; }
bss=$(size_of '^[.]bss$')
lbss=$(size_of '^[.]lbss([.]freeway)?$')
if [ -z "$bss" ] || [ -z "$lbss" ]; then
  echo "$lib: no .bss or no .lbss section (.bss '${bss}', .lbss '${lbss}')"
  exit 1
fi
bss=$((0x$bss))
lbss=$((0x$lbss))
echo ".bss $bss bytes, .lbss $lbss bytes"
if [ "$bss" -gt 16384 ]; then
  echo "$lib: .bss holds more than 16 KiB; its biggest objects (give big arrays FW_COLD_BSS):"
  nm -S -C --size-sort "$lib" | awk '$3 == "b" || $3 == "B"' | tail -5
  exit 1
fi
