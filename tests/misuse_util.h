// Heap-misuse checks shared by test_misuse (malloc/free replaced) and
// test_secure (fw_* calls in secure mode): freeway must stop the process with
// SIGABRT and say what went wrong on stderr, "freeway: <description>
// 0x<address>" (core/report.h).
//
// expect_abort runs a case in a child whose stderr goes into a pipe. Before
// the misuse, the child writes "address=0x..." (the pointer it is about to
// misuse, announce). The parent then checks: the child died of SIGABRT; stderr
// has a line starting "freeway:" that holds one of the expected words and, in
// hex, that address. A child that survives the misuse says so instead.
#pragma once
#include <doctest/doctest.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <poll.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

namespace fwtest::misuse {

inline void say(const char* s) { fwtest::write_fd(2, s, std::strlen(s)); }

// Tells the parent which pointer is about to be misused.
inline void announce(const void* p) {
  char b[64];
  int n = std::snprintf(b, sizeof b, "address=0x%lx\n", (unsigned long)reinterpret_cast<uintptr_t>(p));
  fwtest::write_fd(2, b, size_t(n));
}

// Keeps the compiler from seeing through the misuse (it may warn or fold it).
inline void* launder(void* p) {
  void* volatile v = p;
  return v;
}

struct Outcome {
  bool aborted = false;
  int signal = 0;
  int exit_status = -1;
  bool timed_out = false;
  std::string err;
};

inline Outcome run_child(const std::function<void()>& misuse) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fwtest::fork_flushed();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    close(fds[1]);
    signal(SIGABRT, SIG_DFL);
    misuse();
    say("child: the misuse was not detected; the child went on and exits 0\n");
    _exit(0);
  }
  close(fds[1]);
  Outcome o;
  uint64_t t0 = fwtest::now_ns();
  char buf[4096];
  for (;;) {
    pollfd pf{fds[0], POLLIN, 0};
    int r = poll(&pf, 1, 200);
    if (r > 0) {
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      o.err.append(buf, size_t(n));
    }
    if (fwtest::now_ns() - t0 > 20000000000ull) {  // a child that hangs is a failure too
      o.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
  }
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFSIGNALED(st)) {
    o.signal = WTERMSIG(st);
    o.aborted = o.signal == SIGABRT;
  } else if (WIFEXITED(st)) {
    o.exit_status = WEXITSTATUS(st);
  }
  return o;
}

// The address the child announced.
inline uint64_t announced(const std::string& err) {
  size_t at = err.find("address=0x");
  if (at == std::string::npos) return 0;
  return std::strtoull(err.c_str() + at + 10, nullptr, 16);
}

// freeway's own lines (those starting "freeway:").
inline std::string freeway_lines(const std::string& err) {
  std::string out;
  size_t pos = 0;
  while (pos < err.size()) {
    size_t end = err.find('\n', pos);
    if (end == std::string::npos) end = err.size();
    std::string line = err.substr(pos, end - pos);
    if (line.rfind("freeway:", 0) == 0) out += line + "\n";
    pos = end + 1;
  }
  return out;
}

inline bool has_hex(const std::string& s, uint64_t v) {
  for (size_t at = s.find("0x"); at != std::string::npos; at = s.find("0x", at + 2))
    if (std::strtoull(s.c_str() + at + 2, nullptr, 16) == v) return true;
  return false;
}

inline bool has_any(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s.find(w) != std::string::npos) return true;
  return false;
}

// Runs the case and checks the report: SIGABRT, a "freeway:" line with one of
// `words` and the announced address in hex.
inline void expect_abort(const char* name, std::initializer_list<const char*> words, const std::function<void()>& misuse) {
  Outcome o = run_child(misuse);
  uint64_t addr = announced(o.err);
  std::string fw = freeway_lines(o.err);
  bool worded = has_any(fw, words);
  bool addressed = addr != 0 && has_hex(fw, addr);
  bool pass = o.aborted && worded && addressed && !o.timed_out;
  std::printf("misuse: %-58s %s", name, pass ? "PASS" : "FAIL");
  if (!pass) {
    std::printf(" (");
    if (o.timed_out) std::printf("hung, killed; ");
    if (o.signal) std::printf("died of signal %d; ", o.signal);
    else std::printf("exited %d; ", o.exit_status);
    std::printf("report %s; address %s)", worded ? "worded" : "missing or unworded",
                addressed ? "printed" : "not printed");
  }
  std::printf("\n");
  std::string text = o.err;
  for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 4)) text.replace(at, 1, "\n    ");
  std::printf("    %s\n", text.c_str());
  std::fflush(stdout);
  INFO("child stderr:\n", o.err);
  CHECK_MESSAGE(!o.timed_out, "the child hung");
  CHECK_MESSAGE(o.aborted, "the child did not die of SIGABRT");
  CHECK_MESSAGE(addr != 0, "the child did not reach the misuse");
  CHECK_MESSAGE(fw.size() > 0, "no line starting 'freeway:' on stderr");
  CHECK_MESSAGE(worded, "the report does not name the misuse");
  CHECK_MESSAGE(addressed, "the report does not print the address");
}

}  // namespace fwtest::misuse
