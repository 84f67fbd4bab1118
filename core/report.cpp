// core/report.cpp: allocation-free reporting (see report.h).
#include "core/report.h"

#include "core/telemetry.h"
#include "platform/os.h"

namespace fw {

void Line::put(char c) {
  if (len_ < sizeof(buf_))
    buf_[len_++] = c;
  else
    cut_ = true;
}

Line& Line::str(const char* s) {
  while (*s) put(*s++);
  return *this;
}

Line& Line::dec(uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = char('0' + v % 10);
    v /= 10;
  } while (v);
  while (n > 0) put(tmp[--n]);
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
  while (n > 0) put(tmp[--n]);
  return *this;
}

void Line::write(int fd) const {
  if (!cut_) return os::write_fd(fd, buf_, len_);
  char out[sizeof(buf_)];
  for (size_t i = 0; i < sizeof(buf_) - 4; i++) out[i] = buf_[i];
  out[sizeof(buf_) - 4] = '.', out[sizeof(buf_) - 3] = '.', out[sizeof(buf_) - 2] = '.', out[sizeof(buf_) - 1] = '\n';
  os::write_fd(fd, out, sizeof(out));
}

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
