// core/telemetry.h: publishing the heap's state for freeway-inspect.
//
// The format is include/freeway_telemetry.h; docs/telemetry.md explains it.
// freeway publishes state, not events: a background thread (the publisher)
// copies the descriptor table, the per-class counters and the thread caches
// into a shared segment FREEWAY_TELEMETRY_HZ times a second, under a sequence
// lock, so malloc and free do no extra work at all. Only rare slow-path events
// (regions, commit/decommit, thread start/exit, bad frees, out of memory) are
// written by the threads that cause them, into a lock-free ring, and only when
// the segment exists: one relaxed load of g_telemetry and a not-taken branch
// when telemetry is off.
//
// Invariants:
//   g_telemetry != nullptr  <=>  this process (not a forked child of it) publishes;
//                                it points at a mapped segment whose header is valid.
//   A segment, once mapped, is never unmapped while the process lives (an event
//   writer may still hold its address); stopping discards its pages instead.
//   header.snapshot_seq is odd exactly while the publisher writes a snapshot.
//   Event n occupies slot n % capacity; its seq is 2n+1 while written, 2n+2 when complete.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/config.h"
#include "freeway_telemetry.h"

namespace fw {

extern FW_HIDDEN std::atomic<fwt_header*> g_telemetry;

void telemetry_event_write(fwt_header* h, uint32_t kind, uint32_t arg, uint64_t addr, uint64_t size);

// Records a rare event if this process publishes. Never allocates, locks or
// makes a system call; safe in signal handlers and on every slow path.
FW_INLINE void telemetry_event(uint32_t kind, uint32_t arg, uint64_t addr, uint64_t size) {
  // acquire: pairs with the release that published a fully initialised header.
  fwt_header* h = g_telemetry.load(std::memory_order_acquire);
  if (FW_UNLIKELY(h != nullptr)) telemetry_event_write(h, kind, arg, addr, size);
}

// Starts publishing (idempotent). 0 on success, -1 with errno set otherwise.
int telemetry_start();
// Stops publishing and removes the segment's name.
void telemetry_stop();
bool telemetry_active();
// Called once when the library loads: installs the fork and exit hooks
// (whether or not telemetry is on: fw_telemetry_start may come later), and
// starts publishing if FREEWAY_TELEMETRY=1.
void telemetry_start_from_options();

}  // namespace fw
