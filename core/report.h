// core/report.h: messages from inside the allocator. Nothing here allocates:
// text is formatted into a stack buffer and written with one system call.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/config.h"

namespace fw {

// A small fixed buffer that formats text, decimal and hex without allocating.
// Text past its 512 bytes is dropped, and then the line written ends "...\n":
// a line always ends, however long what it was given.
class Line {
 public:
  Line& str(const char* s);
  Line& dec(uint64_t v);
  Line& hex(uint64_t v);
  Line& ptr(const void* p) { return hex(reinterpret_cast<uintptr_t>(p)); }
  const char* data() const { return buf_; }
  size_t size() const { return len_; }
  void write(int fd) const;

 private:
  void put(char c);
  char buf_[512];
  size_t len_ = 0;
  bool cut_ = false;  // something did not fit
};

// Heap misuse detected (bad free, double free...): prints
// "freeway: <what> 0x<address>" on stderr and stops the process.
[[noreturn]] void report_misuse(const char* what, const void* p);

// A sized free whose size the block cannot have (see free.h): prints
// "freeway: sized free of 0x<address> with size N, block holds M" and stops.
[[noreturn]] FW_COLD void report_sized_free(const void* p, uint64_t size, uint64_t holds);

// Secure mode found bytes past a block's requested size changed: prints
// "freeway: heap overflow 0x<address> (written past its N bytes)" and stops.
[[noreturn]] FW_COLD void report_overflow(const void* p, uint64_t requested);

// An invariant checker found a violation: prints it and returns false so that
// checkers can count violations and carry on.
bool report_invariant(const char* what, uint64_t detail);

}  // namespace fw
