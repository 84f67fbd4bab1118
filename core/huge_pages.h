// core/huge_pages.h: huge pages for the whole extents of large blocks.
//
// A program faults a large block's pages in one at a time: a 3 MiB block is
// 768 faults of 4 KiB, each a trap, a page taken and zeroed (about a
// microsecond on bare metal; 12 us on this project's KVM machines, where the
// host backs each guest page again: docs/benchmarks.md, Stop 56). Linux can
// back a 2 MiB-aligned extent with one transparent huge page at its first
// fault, in a mapping advised for it (MADV_HUGEPAGE). freeway's regions are
// advised against huge pages when reserved (os reserve_aligned), because small
// spans use their memory sparsely: a huge page would fault in 2 MiB where a
// span uses 64 KiB. So huge pages are asked for only where a large block's
// pages will be used whole:
//   - when a run's committed prefix grows (span_commit), every extent that now
//     lies wholly inside it is advised for huge pages;
//   - before any part of an advised extent is decommitted (span_trim), the
//     extent is advised against them again.
// Invariant: an advised extent lies wholly inside committed bytes (the
// prefixes of the runs and spans its vspans are in; a split or merge moves
// committed bytes between descriptors, never out of the union). So a huge page
// never backs bytes the books call uncommitted, and the process's resident
// memory stays within committed_bytes(), as with small pages. What changes is
// that a block's extent is resident whole once any byte of it is touched (a
// block used sparsely keeps up to its committed bytes resident, as under
// THP "always"); the pool's reuse and decay are unchanged.
//
// Arena regions: the flag Span::huge on an extent's first vspan says it is
// advised; each change is an exchange, so of two holders of runs that share an
// extent (pieces of a split) one makes the call. Each advised stretch can
// split a region's mapping in three, against the process's mapping limit
// (os::map_count_limit, vm.max_map_count), which guard pages (span.h) and the
// program's own mappings share: so at most an eighth of the limit's extents
// are advised at once (a quarter of its mappings); past that, extents get
// small pages. Adjacent advised extents are one mapping, and an extent
// advised against again joins its neighbours again.
// Huge regions (large.h: one block, one reservation): the extents inside the
// block's committed bytes are advised at commit, with no flags or budget (the
// region is its own mapping, split at most in two) and unmapped with the block.
//
// FREEWAY_HUGE_PAGES=0 turns it off; so does a kernel whose THP mode is
// "never", and any OS without such pages (Windows: os::huge_page_size is 0).
#pragma once
#include <cstdint>

#include "core/span.h"

namespace fw {

// After span (or run head) s's committed bytes grew from `before` to `bytes`.
void huge_pages_committed(Span* s, uint64_t before, uint64_t bytes);
// Before s's committed bytes shrink from `before` to `bytes`.
void huge_pages_decommitting(Span* s, uint64_t bytes, uint64_t before);

// Extents of arena regions advised now, and the most at once (0: no budget).
uint64_t huge_extents();
uint64_t huge_extent_budget();
// Sets the budget (tests: a small one to reach).
void huge_set_extent_budget(uint64_t budget);
// Bytes of an extent, or 0 when huge pages are not used (option, OS).
uint64_t huge_extent_bytes();

}  // namespace fw
