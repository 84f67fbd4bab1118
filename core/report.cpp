// core/report.cpp: allocation-free reporting (see report.h).
#include "core/report.h"

#include "core/telemetry.h"
#include "platform/os.h"

namespace fw {

Line& Line::str(const char* s) {
  while (*s && len_ < sizeof(buf_) - 1) buf_[len_++] = *s++;
  return *this;
}

Line& Line::dec(uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = char('0' + v % 10);
    v /= 10;
  } while (v);
  while (n > 0 && len_ < sizeof(buf_) - 1) buf_[len_++] = tmp[--n];
  return *this;
}

Line& Line::hex(uint64_t v) {
  str("0x");
  char tmp[16];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  while (n > 0 && len_ < sizeof(buf_) - 1) buf_[len_++] = tmp[--n];
  return *this;
}

void Line::write(int fd) const { os::write_fd(fd, buf_, len_); }

void report_misuse(const char* what, const void* p) {
  Line l;
  l.str("freeway: ").str(what).str(" ").ptr(p).str("\n");
  l.write(2);
  telemetry_event(FWT_EV_BAD_FREE, 0, reinterpret_cast<uintptr_t>(p), 0);
  os::abort_process();
}

void report_sized_free(const void* p, uint64_t size, uint64_t holds) {
  Line l;
  l.str("freeway: sized free of ").ptr(p).str(" with size ").dec(size).str(", block holds ").dec(holds).str("\n");
  l.write(2);
  telemetry_event(FWT_EV_BAD_FREE, 0, reinterpret_cast<uintptr_t>(p), size);
  os::abort_process();
}

void report_overflow(const void* p, uint64_t requested) {
  Line l;
  l.str("freeway: heap overflow ").ptr(p).str(" (written past its ").dec(requested).str(" bytes)\n");
  l.write(2);
  telemetry_event(FWT_EV_BAD_FREE, 0, reinterpret_cast<uintptr_t>(p), requested);
  os::abort_process();
}

bool report_invariant(const char* what, uint64_t detail) {
  Line l;
  l.str("freeway: invariant violated: ").str(what).str(" (").dec(detail).str(")\n");
  l.write(2);
  return false;
}

}  // namespace fw
