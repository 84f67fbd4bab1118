// inspector/cli/cli.cpp: the headless commands of freeway-inspect.
//
//   list      processes that publish telemetry (stale segments pruned)
//   snapshot  one consistent snapshot, as text or JSON (schema below), or to a file
//   watch     a refreshing top-like view
//   check     thresholds and the span equations, for CI (exit 1 naming failures)
//   record    snapshots at a rate into a recording file
//   replay    a recording, one line (or one JSON object) per frame
//   diff      two snapshots or recordings, per state and per class
//
// Exit codes: 0 success; 1 `check` found a failure; 2 usage error, or a
// pid/file that cannot be read (one line on stderr, "freeway-inspect: ...").
// Every figure comes from the model (inspector/model/derive.h); this file
// only parses arguments and formats output. docs/inspector.md is its manual.
#include "inspector/cli/cli.h"
#include "inspector/model/printf.h"

#include <signal.h>
#include <sys/stat.h>
#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <io.h>
#include <windows.h>
#else
#include <sys/ioctl.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "inspector/model/derive.h"
#include "inspector/model/recording.h"
#include "inspector/model/segment.h"
#include "inspector/model/snapshot.h"

#ifndef FREEWAY_VERSION_STRING
#define FREEWAY_VERSION_STRING "dev"
#endif

namespace fwi {
namespace {

constexpr const char* kSnapshotSchema = "freeway-inspect/snapshot/1";
constexpr const char* kDiffSchema = "freeway-inspect/diff/1";

constexpr int kExitOk = 0, kExitCheckFailed = 1, kExitError = 2;

// ---------------------------------------------------------------------------
// Errors and arguments

int fail(const char* format, ...) __attribute__((format(FWI_PRINTF, 1, 2)));
int fail(const char* format, ...) {
  std::fputs("freeway-inspect: ", stderr);
  va_list ap;
  va_start(ap, format);
  std::vfprintf(stderr, format, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  return kExitError;
}

bool parse_u64(const char* s, uint64_t* out) {
  if (!s || !*s) return false;
  for (const char* p = s; *p; p++)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end) return false;
  *out = v;
  return true;
}

bool parse_double(const char* s, double* out) {
  if (!s || !*s) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (errno != 0 || *end || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

// "512", "64K", "300M", "2G", "1T" (powers of 1024; an optional "iB" or "B").
bool parse_bytes(const char* s, uint64_t* out) {
  if (!s || !*s) return false;
  std::string t(s);
  uint64_t mult = 1;
  auto strip = [&t](const char* suffix) {
    size_t n = std::strlen(suffix);
    if (t.size() > n && strcasecmp(t.c_str() + t.size() - n, suffix) == 0) {
      t.resize(t.size() - n);
      return true;
    }
    return false;
  };
  if (!strip("iB")) strip("B");
  if (!t.empty()) {
    switch (t.back()) {
      case 'k': case 'K': mult = uint64_t(1) << 10; break;
      case 'm': case 'M': mult = uint64_t(1) << 20; break;
      case 'g': case 'G': mult = uint64_t(1) << 30; break;
      case 't': case 'T': mult = uint64_t(1) << 40; break;
      default: break;
    }
    if (mult != 1) t.pop_back();
  }
  uint64_t v;
  if (!parse_u64(t.c_str(), &v)) return false;
  if (v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

// Arguments of one command: positionals, and options each with a value or none.
struct Args {
  std::vector<std::string> pos;
  std::map<std::string, std::string> opt;  // "--json" -> "" ; "--hz" -> "20"
  bool has(const char* name) const { return opt.count(name) != 0; }
  const char* get(const char* name) const {
    auto it = opt.find(name);
    return it == opt.end() ? nullptr : it->second.c_str();
  }
};

struct OptSpec {
  const char* name;
  bool takes_value;
};

// Parses argv[2..]; options may come before or after positionals. "-o" is an
// alias of "--out". Returns false after printing the error.
bool parse_args(const char* cmd, int argc, char** argv, std::initializer_list<OptSpec> specs, size_t min_pos,
                size_t max_pos, Args* a) {
  for (int i = 2; i < argc; i++) {
    std::string w = argv[i];
    if (w == "-o") w = "--out";
    if (w.size() > 1 && w[0] == '-') {
      std::string value;
      bool inline_value = false;
      size_t eq = w.find('=');
      if (eq != std::string::npos) {
        value = w.substr(eq + 1);
        w.resize(eq);
        inline_value = true;
      }
      const OptSpec* spec = nullptr;
      for (const OptSpec& s : specs)
        if (w == s.name) spec = &s;
      if (!spec) {
        fail("%s: unknown option %s (see freeway-inspect help)", cmd, w.c_str());
        return false;
      }
      if (spec->takes_value && !inline_value) {
        if (i + 1 >= argc) {
          fail("%s: option %s needs a value", cmd, w.c_str());
          return false;
        }
        value = argv[++i];
      } else if (!spec->takes_value && inline_value) {
        fail("%s: option %s takes no value", cmd, w.c_str());
        return false;
      }
      a->opt[w] = value;
    } else {
      a->pos.push_back(w);
    }
  }
  if (a->pos.size() < min_pos || a->pos.size() > max_pos) {
    fail("%s: expected %zu%s argument%s, got %zu (see freeway-inspect help)", cmd, min_pos,
         max_pos > min_pos ? " or more" : "", min_pos == 1 && max_pos == 1 ? "" : "s", a->pos.size());
    return false;
  }
  return true;
}

// A process id as the commands take it: decimal, 1 to 2^31 - 1.
bool parse_pid(const std::string& word, uint64_t* pid) {
  return parse_u64(word.c_str(), pid) && *pid != 0 && *pid <= 0x7fffffffull;
}

bool get_pid(const char* cmd, const std::string& word, uint64_t* pid) {
  if (!parse_pid(word, pid)) {
    fail("%s: '%s' is not a process id", cmd, word.c_str());
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Sources: a live pid, or a recording / snapshot file (its last frame).

bool take_live(uint64_t pid, Snapshot* s, std::string* err) {
  auto seg = Segment::attach(pid, err);
  if (!seg) return false;
  return seg->take(s, err);
}

// The last frame of a recording (a snapshot file is a recording of one frame).
bool take_file(const std::string& path, Snapshot* s, std::string* err) {
  auto r = RecordingReader::open(path, err);
  if (!r) return false;
  Snapshot frame;
  bool any = false;
  std::vector<fwt_event> events;
  while (r->next(&frame, err)) {
    events.insert(events.end(), frame.events.begin(), frame.events.end());
    *s = std::move(frame);
    frame = Snapshot();
    any = true;
  }
  if (!err->empty()) return false;
  if (!any) {
    *err = path + ": the recording holds no frame";
    return false;
  }
  s->events = std::move(events);
  return true;
}

bool take_any(const std::string& word, Snapshot* s, std::string* err) {
  struct stat st;
  if (stat(word.c_str(), &st) == 0) return take_file(word, s, err);  // a file named "123" is a file
  const int stat_errno = errno;
  uint64_t pid;
  if (parse_u64(word.c_str(), &pid)) {  // digits: a process id
    if (!parse_pid(word, &pid)) {
      *err = "'" + word + "' is not a process id";
      return false;
    }
    return take_live(pid, s, err);
  }
  *err = "'" + word + "' is neither a process id nor a file (" + std::strerror(stat_errno) + ")";
  return false;
}

// ---------------------------------------------------------------------------
// Output helpers

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no
// overlongs, surrogates or code points past U+10FFFF), 0 if there is none.
size_t utf8_length(const std::string& s, size_t i) {
  const auto at = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = at(i);
  const auto cont = [&](size_t k) { return (at(k) & 0xC0u) == 0x80u; };
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned d = at(i + 1);
    if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F)) return 0;
    return cont(i + 1) && cont(i + 2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned d = at(i + 1);
    if ((c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F)) return 0;
    return cont(i + 1) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}

// A JSON string: escaped, and valid UTF-8 whatever the bytes (a program name
// cut at FWT_EXE_MAX bytes, or not UTF-8 at all): a byte that starts no
// well-formed sequence becomes U+FFFD.
std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (size_t i = 0; i < s.size(); i++) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_length(s, i);
      if (n == 0) {
        o += "\\ufffd";
      } else {
        o.append(s, i, n);
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += char(c);
        }
    }
  }
  return o + "\"";
}

std::string lower(const char* s) {
  std::string o(s);
  for (char& c : o) c = char(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

void print_json(FILE* out, const Snapshot& s, const Figures& f, const std::vector<std::string>& violations,
                bool pretty) {
  const char* nl = pretty ? "\n" : "";
  const char* in = pretty ? "  " : "";
  std::fprintf(out, "{%s", nl);
  std::fprintf(out, "%s\"schema\": \"%s\",%s", in, kSnapshotSchema, nl);
  std::fprintf(out, "%s\"pid\": %" PRIu64 ", \"exe\": %s, \"format\": \"%u.%u\", \"hz\": %" PRIu64 ",%s", in,
               s.pid, json_string(s.exe).c_str(), s.version_major, s.version_minor, s.hz, nl);
  std::fprintf(out, "%s\"time_s\": %.3f, \"snapshots\": %" PRIu64 ", \"publish_ns\": %" PRIu64 ",%s", in, f.time_s,
               s.process.snapshots, s.process.publish_ns, nl);
  std::fprintf(out,
               "%s\"live\": %" PRIu64 ", \"peak_live\": %" PRIu64 ", \"committed\": %" PRIu64
               ", \"peak_committed\": %" PRIu64 ", \"reserved\": %" PRIu64 ", \"rss\": %" PRIu64 ",%s",
               in, f.live, f.peak_live, f.committed, f.peak_committed, f.reserved, f.rss, nl);
  std::fprintf(out, "%s\"blowup\": %.4f, \"blowup_peak\": %.4f,%s", in, f.blowup, f.blowup_peak, nl);
  std::fprintf(out,
               "%s\"fragmentation\": {\"free_in_spans\": %" PRIu64 ", \"pooled\": %" PRIu64
               ", \"large_slack\": %" PRIu64 ", \"metadata\": %" PRIu64 "},%s",
               in, f.frag_free_in_spans, f.frag_pooled, f.frag_large_slack, f.metadata, nl);
  std::fprintf(out, "%s\"spans\": {", in);
  for (unsigned st = 0; st < FWT_SPAN_STATE_COUNT; st++)
    std::fprintf(out, "%s\"%s\": %" PRIu64, st ? ", " : "", lower(state_name(st)).c_str(), f.spans_by_state[st]);
  std::fprintf(out, "},%s", nl);
  std::fprintf(out,
               "%s\"threads_live\": %" PRIu64 ", \"events_missed\": %" PRIu64 ", \"events_dropped\": %" PRIu64
               ",%s",
               in, f.threads_live, f.events_missed, f.events_dropped, nl);
  std::fprintf(out, "%s\"size_class\": [%s", in, nl);
  for (size_t i = 0; i < f.classes.size(); i++) {
    const ClassFigures& c = f.classes[i];
    std::fprintf(out,
                 "%s%s{\"class\": %u, \"block_size\": %u, \"capacity\": %u, \"allocs\": %" PRIu64
                 ", \"frees\": %" PRIu64 ", \"live_blocks\": %" PRIu64 ", \"live_bytes\": %" PRIu64
                 ", \"spans_hot\": %" PRIu64 ", \"spans_full\": %" PRIu64 ", \"spans_partial\": %" PRIu64
                 ", \"committed\": %" PRIu64 ", \"fullness\": %.4f, \"occupancy\": [",
                 in, in, c.cls, c.block_size, c.capacity, c.allocs, c.frees, c.live_blocks, c.live_bytes, c.spans_hot,
                 c.spans_full, c.spans_partial, c.committed_bytes, c.fullness);
    for (unsigned b = 0; b < kOccupancyBuckets; b++) std::fprintf(out, "%s%u", b ? ", " : "", c.occupancy[b]);
    std::fprintf(out, "]}%s%s", i + 1 < f.classes.size() ? "," : "", nl);
  }
  std::fprintf(out, "%s],%s", in, nl);
  std::fprintf(out, "%s\"thread_caches\": [%s", in, nl);
  for (size_t i = 0; i < f.labs.size(); i++) {
    const LabFigures& l = f.labs[i];
    std::fprintf(out,
                 "%s%s{\"id\": %u, \"alive\": %s, \"cpu\": %d, \"hot_spans\": %u, \"bytes_held\": %" PRIu64
                 ", \"free_bytes_held\": %" PRIu64 ", \"pending\": %u, \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64
                 "}%s%s",
                 in, in, l.id, l.alive ? "true" : "false", l.cpu, l.hot_spans, l.bytes_held, l.free_bytes_held, l.pending,
                 l.allocs, l.frees, i + 1 < f.labs.size() ? "," : "", nl);
  }
  std::fprintf(out, "%s],%s", in, nl);
  std::fprintf(out, "%s\"span_violations\": [", in);
  for (size_t i = 0; i < violations.size(); i++)
    std::fprintf(out, "%s%s", i ? ", " : "", json_string(violations[i]).c_str());
  std::fprintf(out, "]%s}\n", nl);
}

// max_classes: the size-class table shows at most that many classes, those
// with the most committed bytes (0: all, in class order).
void print_text(FILE* out, const Snapshot& s, const Figures& f, const std::vector<std::string>& violations,
                size_t max_classes = 0) {
  std::fprintf(out, "process %" PRIu64 " (%s), telemetry %u.%u at %" PRIu64 " Hz, %.1f s since start (a snapshot takes %.2f ms)\n",
               s.pid, s.exe.c_str(), s.version_major, s.version_minor, s.hz, f.time_s, double(s.process.publish_ns) / 1e6);
  std::fprintf(out, "  live       %12s   peak %s\n", format_bytes(f.live).c_str(), format_bytes(f.peak_live).c_str());
  std::fprintf(out, "  committed  %12s   peak %s\n", format_bytes(f.committed).c_str(),
               format_bytes(f.peak_committed).c_str());
  std::fprintf(out, "  reserved   %12s   rss %s\n", format_bytes(f.reserved).c_str(), format_bytes(f.rss).c_str());
  std::fprintf(out, "  blowup     %12.3f   committed / peak live %.3f\n", f.blowup, f.blowup_peak);
  std::fprintf(out, "  not live   free in spans %s, pooled spans %s, large slack %s, metadata %s\n",
               format_bytes(f.frag_free_in_spans).c_str(), format_bytes(f.frag_pooled).c_str(),
               format_bytes(f.frag_large_slack).c_str(), format_bytes(f.metadata).c_str());
  std::fprintf(out, "  spans     ");
  for (unsigned st = 0; st < FWT_SPAN_STATE_COUNT; st++)
    std::fprintf(out, " %s %" PRIu64, lower(state_name(st)).c_str(), f.spans_by_state[st]);
  std::fprintf(out, "\n  threads    %" PRIu64 " live, %zu caches", f.threads_live, f.labs.size());
  if (f.caches_in_cpu_slots > 0) std::fprintf(out, " (per-CPU: %zu in CPU slots)", f.caches_in_cpu_slots);
  std::fprintf(out, "; events missed %" PRIu64 ", dropped %" PRIu64 "\n", f.events_missed, f.events_dropped);
  if (!f.classes.empty()) {
    std::fprintf(out, "  %5s %8s %12s %10s %5s %5s %5s %8s %10s\n", "class", "size", "live blocks", "live", "hot",
                 "full", "part", "fullness", "committed");
    std::vector<const ClassFigures*> shown;
    for (const ClassFigures& c : f.classes) shown.push_back(&c);
    if (max_classes != 0 && shown.size() > max_classes) {
      std::stable_sort(shown.begin(), shown.end(), [](const ClassFigures* x, const ClassFigures* y) {
        return x->committed_bytes > y->committed_bytes;
      });
      shown.resize(max_classes);
      std::sort(shown.begin(), shown.end(), [](const ClassFigures* x, const ClassFigures* y) { return x->cls < y->cls; });
    }
    for (const ClassFigures* cp : shown) {
      const ClassFigures& c = *cp;
      std::fprintf(out, "  %5u %8u %12" PRIu64 " %10s %5" PRIu64 " %5" PRIu64 " %5" PRIu64 " %7.1f%% %10s\n", c.cls,
                   c.block_size, c.live_blocks, format_bytes(c.live_bytes).c_str(), c.spans_hot, c.spans_full,
                   c.spans_partial, 100 * c.fullness, format_bytes(c.committed_bytes).c_str());
    }
    if (shown.size() < f.classes.size())
      std::fprintf(out, "  (%zu classes with the most committed bytes of %zu)\n", shown.size(), f.classes.size());
  }
  if (!violations.empty()) {
    std::fprintf(out, "  span equations: %zu violation%s\n", violations.size(), violations.size() == 1 ? "" : "s");
    for (const std::string& v : violations) std::fprintf(out, "    %s\n", v.c_str());
  }
}

// ---------------------------------------------------------------------------
// Signals: watch and record stop cleanly on Ctrl-C / SIGTERM.

volatile sig_atomic_t g_stop = 0;
void on_stop_signal(int) { g_stop = 1; }
void catch_stop_signals() {
#if defined(_WIN32)
  signal(SIGINT, on_stop_signal);  // the CRT maps Ctrl-C to SIGINT
  signal(SIGTERM, on_stop_signal);
#else
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
#endif
}

// The terminal: whether a stream is one, and its height in rows (40 if unknown).
bool is_terminal(FILE* f) {
#if defined(_WIN32)
  return _isatty(_fileno(f)) != 0;
#else
  return isatty(fileno(f)) != 0;
#endif
}
unsigned terminal_rows() {
#if defined(_WIN32)
  CONSOLE_SCREEN_BUFFER_INFO ci;
  if (GetConsoleScreenBufferInfo(GetStdHandle(STD_OUTPUT_HANDLE), &ci))
    return unsigned(ci.srWindow.Bottom - ci.srWindow.Top + 1);
  return 40;
#else
  struct winsize ws;
  return ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 ? ws.ws_row : 40;
#endif
}

// Sleeps until `until`, waking early on a stop signal.
void sleep_until(std::chrono::steady_clock::time_point until) {
  while (!g_stop) {
    auto now = std::chrono::steady_clock::now();
    if (now >= until) return;
    auto step = std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(50));
    std::this_thread::sleep_for(step);
  }
}

// ---------------------------------------------------------------------------
// Commands

int cmd_list(int argc, char** argv) {
  Args a;
  if (!parse_args("list", argc, argv, {{"--keep-stale", false}, {"--json", false}}, 0, 0, &a)) return kExitError;
  auto procs = list_processes(!a.has("--keep-stale"));
  if (a.has("--json")) {
    std::printf("[");
    for (size_t i = 0; i < procs.size(); i++)
      std::printf("%s{\"pid\": %" PRIu64 ", \"exe\": %s, \"alive\": %s, \"live\": %" PRIu64 ", \"committed\": %" PRIu64
                  "}",
                  i ? ", " : "", procs[i].pid, json_string(procs[i].exe).c_str(), procs[i].alive ? "true" : "false",
                  procs[i].live_bytes, procs[i].committed_bytes);
    std::printf("]\n");
    return kExitOk;
  }
  if (procs.empty()) {
    std::printf("no process publishes freeway telemetry (start one with FREEWAY_TELEMETRY=1)\n");
    return kExitOk;
  }
  std::printf("%8s  %-6s %12s %12s  %s\n", "PID", "STATE", "LIVE", "COMMITTED", "PROGRAM");
  for (const ProcessEntry& p : procs)
    std::printf("%8" PRIu64 "  %-6s %12s %12s  %s\n", p.pid, p.alive ? "alive" : "stale",
                format_bytes(p.live_bytes).c_str(), format_bytes(p.committed_bytes).c_str(), p.exe.c_str());
  return kExitOk;
}

int cmd_snapshot(int argc, char** argv) {
  Args a;
  if (!parse_args("snapshot", argc, argv, {{"--json", false}, {"--out", true}}, 1, 1, &a)) return kExitError;
  Snapshot s;
  std::string err;
  if (!take_any(a.pos[0], &s, &err)) return fail("%s", err.c_str());
  if (const char* path = a.get("--out")) {
    auto w = RecordingWriter::create(path, &err);
    if (!w || !w->append(s, &err)) return fail("%s", err.c_str());
    std::fprintf(stderr, "freeway-inspect: snapshot of process %" PRIu64 " written to %s (%" PRIu64 " bytes)\n",
                 s.pid, path, w->bytes_written());
    if (!a.has("--json")) return kExitOk;
  }
  Figures f = derive(s);
  std::vector<std::string> v = check_spans(s);
  if (a.has("--json"))
    print_json(stdout, s, f, v, true);
  else
    print_text(stdout, s, f, v);
  return kExitOk;
}

int cmd_watch(int argc, char** argv) {
  Args a;
  if (!parse_args("watch", argc, argv, {{"--hz", true}, {"--count", true}, {"--events", true}}, 1, 1, &a))
    return kExitError;
  uint64_t pid, count = 0, hz = 2, n_events = 8;
  if (!get_pid("watch", a.pos[0], &pid)) return kExitError;
  if (a.has("--hz") && (!parse_u64(a.get("--hz"), &hz) || hz < 1 || hz > 100))
    return fail("watch: --hz needs a whole number from 1 to 100");
  // No --count: until the process exits or a signal stops it.
  if (a.has("--count") && (!parse_u64(a.get("--count"), &count) || count < 1))
    return fail("watch: --count needs a whole number from 1");
  if (a.has("--events") && (!parse_u64(a.get("--events"), &n_events) || n_events > 1000))
    return fail("watch: --events needs a whole number up to 1000");
  std::string err;
  auto seg = Segment::attach(pid, &err);
  if (!seg) return fail("%s", err.c_str());
  catch_stop_signals();
  const bool tty = is_terminal(stdout);
  std::vector<std::string> recent;
  const auto period = std::chrono::nanoseconds(1000000000ull / hz);
  auto next = std::chrono::steady_clock::now();
  for (uint64_t i = 0; !g_stop && (count == 0 || i < count); i++) {
    // After its exit a process's segment stays mapped here (unlinked) and
    // still reads as valid: ask whether it runs first.
    Snapshot s;
    if (!seg->alive()) {
      std::printf("process %" PRIu64 " has exited\n", pid);
      return kExitOk;
    }
    if (!seg->take(&s, &err)) return fail("%s", err.c_str());
    Figures f = derive(s);
    for (const fwt_event& e : s.events) recent.push_back(describe_event(e, s.process.start_ns));
    if (recent.size() > n_events) recent.erase(recent.begin(), recent.end() - long(n_events));
    // On a terminal the view fits its height: the class table gives way.
    size_t max_classes = 0;
    if (tty) {
      unsigned rows = terminal_rows();
      unsigned fixed = 12 + (n_events ? unsigned(n_events) + 1 : 0);
      max_classes = rows > fixed + 4 ? rows - fixed : 4;
      std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
    }
    print_text(stdout, s, f, {}, max_classes);
    if (n_events) {
      std::printf("  recent events:\n");
      for (const std::string& line : recent) std::printf("    %s\n", line.c_str());
    }
    if (!tty) std::printf("\n");
    std::fflush(stdout);
    next += period;
    sleep_until(next);
  }
  return kExitOk;
}

int cmd_check(int argc, char** argv) {
  Args a;
  if (!parse_args("check", argc, argv,
                  {{"--max-blowup", true}, {"--max-committed", true}, {"--max-dropped", true}, {"--quiet", false}}, 1,
                  1, &a))
    return kExitError;
  double max_blowup = 0;
  uint64_t max_committed = 0, max_dropped = 0;
  if (a.has("--max-blowup") && !parse_double(a.get("--max-blowup"), &max_blowup))
    return fail("check: --max-blowup needs a number, e.g. 1.5");
  if (a.has("--max-committed") && !parse_bytes(a.get("--max-committed"), &max_committed))
    return fail("check: --max-committed needs a byte count, e.g. 512M or 2G");
  if (a.has("--max-dropped") && !parse_u64(a.get("--max-dropped"), &max_dropped))
    return fail("check: --max-dropped needs a whole number");
  Snapshot s;
  std::string err;
  if (!take_any(a.pos[0], &s, &err)) return fail("%s", err.c_str());
  Figures f = derive(s);
  std::vector<std::string> failures;
  char buf[256];
  if (a.has("--max-blowup") && f.blowup > max_blowup) {
    std::snprintf(buf, sizeof buf, "blowup %.3f (committed %s / live %s) is over %.3f", f.blowup,
                  format_bytes(f.committed).c_str(), format_bytes(f.live).c_str(), max_blowup);
    failures.push_back(buf);
  }
  if (a.has("--max-committed") && f.committed > max_committed) {
    std::snprintf(buf, sizeof buf, "committed %s (%" PRIu64 " bytes) is over %s (%" PRIu64 " bytes)",
                  format_bytes(f.committed).c_str(), f.committed, format_bytes(max_committed).c_str(), max_committed);
    failures.push_back(buf);
  }
  // Lost either way (docs/telemetry.md): dropped by the writer, or missed by this reader.
  if (a.has("--max-dropped") && f.events_dropped + f.events_missed > max_dropped) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " events lost (%" PRIu64 " dropped, %" PRIu64 " missed), over %" PRIu64,
                  f.events_dropped + f.events_missed, f.events_dropped, f.events_missed, max_dropped);
    failures.push_back(buf);
  }
  for (const std::string& v : check_spans(s)) failures.push_back("span equations: " + v);
  if (failures.empty()) {
    if (!a.has("--quiet"))
      std::printf("ok: process %" PRIu64 " (%s): live %s, committed %s, blowup %.3f, %zu spans checked\n", s.pid,
                  s.exe.c_str(), format_bytes(f.live).c_str(), format_bytes(f.committed).c_str(), f.blowup,
                  s.spans.size());
    return kExitOk;
  }
  for (const std::string& m : failures) std::printf("FAIL: process %" PRIu64 ": %s\n", s.pid, m.c_str());
  return kExitCheckFailed;
}

int cmd_record(int argc, char** argv) {
  Args a;
  if (!parse_args("record", argc, argv, {{"--out", true}, {"--hz", true}, {"--seconds", true}, {"--quiet", false}},
                  1, 1, &a))
    return kExitError;
  uint64_t pid, hz = 20;
  double seconds = 0;
  if (!get_pid("record", a.pos[0], &pid)) return kExitError;
  if (!a.has("--out")) return fail("record: -o FILE is required");
  if (a.has("--hz") && (!parse_u64(a.get("--hz"), &hz) || hz < 1 || hz > 1000))
    return fail("record: --hz needs a whole number from 1 to 1000");
  if (a.has("--seconds") && (!parse_double(a.get("--seconds"), &seconds) || seconds <= 0))
    return fail("record: --seconds needs a positive number");
  // Progress once a second, on a terminal only (one rewritten line).
  const bool quiet = a.has("--quiet") || !is_terminal(stderr);
  std::string err;
  auto seg = Segment::attach(pid, &err);
  if (!seg) return fail("%s", err.c_str());
  auto w = RecordingWriter::create(a.get("--out"), &err);
  if (!w) return fail("%s", err.c_str());
  catch_stop_signals();
  const auto start = std::chrono::steady_clock::now();
  const auto period = std::chrono::nanoseconds(1000000000ull / hz);
  auto next = start;
  auto last_progress = start;
  uint64_t frames = 0;
  const char* why = "stopped";
  for (;;) {
    if (g_stop) break;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0 && elapsed >= seconds) {
      why = "done";
      break;
    }
    Snapshot s;
    if (!seg->alive()) {
      why = "the process exited";
      break;
    }
    if (!seg->take(&s, &err)) {
      if (!seg->alive()) {
        why = "the process exited";
        break;
      }
      return fail("%s", err.c_str());
    }
    if (!w->append(s, &err)) return fail("%s", err.c_str());
    frames++;
    auto now = std::chrono::steady_clock::now();
    if (!quiet && now - last_progress >= std::chrono::seconds(1)) {
      last_progress = now;
      char of[48] = "";  // a double: --seconds may be past any integer type
      if (seconds > 0) std::snprintf(of, sizeof of, " of %.0f", seconds);
      std::fprintf(stderr, "\rrecording process %" PRIu64 ": %.0f s%s, %" PRIu64 " frames, %s   ", pid, elapsed, of,
                   frames, format_bytes(w->bytes_written()).c_str());
    }
    next += period;
    sleep_until(next);
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t bytes = w->bytes_written();
  w.reset();  // flush and close
  std::fprintf(stderr, "%srecorded %" PRIu64 " frames in %.1f s (%s) to %s: %s, %s per minute\n", quiet ? "" : "\r",
               frames, elapsed, why, a.get("--out"), format_bytes(bytes).c_str(),
               format_bytes(elapsed > 0 ? uint64_t(double(bytes) * 60.0 / elapsed) : 0).c_str());
  return frames ? kExitOk : fail("record: no frame recorded");
}

int cmd_replay(int argc, char** argv) {
  Args a;
  if (!parse_args("replay", argc, argv, {{"--json", false}, {"--events", false}}, 1, 1, &a)) return kExitError;
  std::string err;
  auto r = RecordingReader::open(a.pos[0], &err);
  if (!r) return fail("%s", err.c_str());
  Snapshot s;
  uint64_t frames = 0;
  if (!a.has("--json"))
    std::printf("%9s %11s %11s %11s %8s  %s\n", "time_s", "live", "committed", "rss", "blowup",
                "spans free/hot/full/partial/large/tail/huge/unused");
  while (r->next(&s, &err)) {
    Figures f = derive(s);
    frames++;
    if (a.has("--json")) {
      print_json(stdout, s, f, check_spans(s), false);
    } else {
      std::printf("%9.3f %11s %11s %11s %8.3f  ", f.time_s, format_bytes(f.live).c_str(),
                  format_bytes(f.committed).c_str(), format_bytes(f.rss).c_str(), f.blowup);
      for (unsigned st = 0; st < FWT_SPAN_STATE_COUNT; st++)
        std::printf("%s%" PRIu64, st ? "/" : "", f.spans_by_state[st]);
      std::printf("\n");
      if (a.has("--events"))
        for (const fwt_event& e : s.events) std::printf("          %s\n", describe_event(e, s.process.start_ns).c_str());
    }
  }
  if (!err.empty()) return fail("%s (after %" PRIu64 " frames)", err.c_str(), frames);
  if (!a.has("--json")) std::printf("%" PRIu64 " frames\n", frames);
  return kExitOk;
}

int cmd_diff(int argc, char** argv) {
  Args a;
  if (!parse_args("diff", argc, argv, {{"--json", false}}, 2, 2, &a)) return kExitError;
  Snapshot sa, sb;
  std::string err;
  if (!take_any(a.pos[0], &sa, &err)) return fail("%s", err.c_str());
  if (!take_any(a.pos[1], &sb, &err)) return fail("%s", err.c_str());
  Figures fa = derive(sa), fb = derive(sb);
  // Classes present in either, by class index.
  std::map<unsigned, std::pair<const ClassFigures*, const ClassFigures*>> classes;
  for (const ClassFigures& c : fa.classes) classes[c.cls].first = &c;
  for (const ClassFigures& c : fb.classes) classes[c.cls].second = &c;
  static const ClassFigures kNone;
  auto sd = [](uint64_t x, uint64_t y) { return int64_t(y) - int64_t(x); };
  if (a.has("--json")) {
    std::printf("{\n  \"schema\": \"%s\",\n  \"a\": %s, \"b\": %s,\n", kDiffSchema, json_string(a.pos[0]).c_str(),
                json_string(a.pos[1]).c_str());
    std::printf("  \"live\": [%" PRIu64 ", %" PRIu64 "], \"committed\": [%" PRIu64 ", %" PRIu64
                "], \"reserved\": [%" PRIu64 ", %" PRIu64 "], \"rss\": [%" PRIu64 ", %" PRIu64
                "], \"blowup\": [%.4f, %.4f],\n",
                fa.live, fb.live, fa.committed, fb.committed, fa.reserved, fb.reserved, fa.rss, fb.rss, fa.blowup,
                fb.blowup);
    std::printf("  \"spans\": {");
    for (unsigned st = 0; st < FWT_SPAN_STATE_COUNT; st++)
      std::printf("%s\"%s\": [%" PRIu64 ", %" PRIu64 "]", st ? ", " : "", lower(state_name(st)).c_str(),
                  fa.spans_by_state[st], fb.spans_by_state[st]);
    std::printf("},\n  \"size_class\": [");
    bool first = true;
    for (auto& [cls, p] : classes) {
      const ClassFigures& x = p.first ? *p.first : kNone;
      const ClassFigures& y = p.second ? *p.second : kNone;
      std::printf("%s\n    {\"class\": %u, \"block_size\": %u, \"live_bytes\": [%" PRIu64 ", %" PRIu64
                  "], \"committed\": [%" PRIu64 ", %" PRIu64 "], \"spans\": [%" PRIu64 ", %" PRIu64
                  "], \"fullness\": [%.4f, %.4f]}",
                  first ? "" : ",", cls, p.first ? x.block_size : y.block_size, x.live_bytes, y.live_bytes,
                  x.committed_bytes, y.committed_bytes, x.spans_hot + x.spans_full + x.spans_partial,
                  y.spans_hot + y.spans_full + y.spans_partial, x.fullness, y.fullness);
      first = false;
    }
    std::printf("\n  ]\n}\n");
    return kExitOk;
  }
  std::printf("A: %s  (process %" PRIu64 ", %s, %.1f s)\nB: %s  (process %" PRIu64 ", %s, %.1f s)\n\n",
              a.pos[0].c_str(), sa.pid, sa.exe.c_str(), fa.time_s, a.pos[1].c_str(), sb.pid, sb.exe.c_str(),
              fb.time_s);
  std::printf("%-12s %12s %12s %14s\n", "", "A", "B", "B - A");
  auto row_bytes = [&](const char* name, uint64_t x, uint64_t y) {
    // In unsigned arithmetic: a difference of more than 2^63 bytes (only a
    // hostile recording has one) keeps its sign.
    std::string delta(1, y < x ? '-' : '+');
    delta += format_bytes(y < x ? x - y : y - x);
    std::printf("%-12s %12s %12s %14s\n", name, format_bytes(x).c_str(), format_bytes(y).c_str(), delta.c_str());
  };
  row_bytes("live", fa.live, fb.live);
  row_bytes("committed", fa.committed, fb.committed);
  row_bytes("reserved", fa.reserved, fb.reserved);
  row_bytes("rss", fa.rss, fb.rss);
  std::printf("%-12s %12.3f %12.3f %+14.3f\n", "blowup", fa.blowup, fb.blowup, fb.blowup - fa.blowup);
  std::printf("\nspans by state\n");
  for (unsigned st = 0; st < FWT_SPAN_STATE_COUNT; st++)
    std::printf("%-12s %12" PRIu64 " %12" PRIu64 " %+14" PRId64 "\n", lower(state_name(st)).c_str(),
                fa.spans_by_state[st], fb.spans_by_state[st], sd(fa.spans_by_state[st], fb.spans_by_state[st]));
  std::printf("\nper class (changed only)\n%5s %8s %21s %21s %13s %15s\n", "class", "size", "live A -> B",
              "committed A -> B", "spans A -> B", "fullness A -> B");
  unsigned shown = 0;
  for (auto& [cls, p] : classes) {
    const ClassFigures& x = p.first ? *p.first : kNone;
    const ClassFigures& y = p.second ? *p.second : kNone;
    uint64_t spx = x.spans_hot + x.spans_full + x.spans_partial, spy = y.spans_hot + y.spans_full + y.spans_partial;
    if (x.live_bytes == y.live_bytes && x.committed_bytes == y.committed_bytes && spx == spy) continue;
    shown++;
    std::printf("%5u %8u %10s->%-10s %10s->%-10s %6" PRIu64 "->%-6" PRIu64 " %6.1f%%->%5.1f%%\n", cls,
                p.first ? x.block_size : y.block_size, format_bytes(x.live_bytes).c_str(),
                format_bytes(y.live_bytes).c_str(), format_bytes(x.committed_bytes).c_str(),
                format_bytes(y.committed_bytes).c_str(), spx, spy, 100 * x.fullness, 100 * y.fullness);
  }
  if (!shown) std::printf("  (no class changed)\n");
  return kExitOk;
}

int cmd_help(FILE* out) {
  std::fputs(
      "freeway-inspect: watch a freeway heap live.\n"
      "\n"
      "  freeway-inspect [PID]                      the GUI (a process picker without PID)\n"
      "  freeway-inspect --replay FILE              the GUI on a recording\n"
      "  freeway-inspect PID --screenshot F.png [--frames N]   render N frames, write a PNG\n"
      "\n"
      "  freeway-inspect list [--json] [--keep-stale]\n"
      "        processes publishing telemetry; stale segments of dead pids are removed\n"
      "  freeway-inspect snapshot SOURCE [--json] [-o FILE]\n"
      "        one consistent snapshot as text, as JSON (schema freeway-inspect/snapshot/1),\n"
      "        or saved to FILE (a one-frame recording)\n"
      "  freeway-inspect watch PID [--hz N] [--count N] [--events N]\n"
      "        a refreshing view in the terminal (Ctrl-C stops)\n"
      "  freeway-inspect check SOURCE [--max-blowup X] [--max-committed BYTES] [--max-dropped N] [--quiet]\n"
      "        checks thresholds and the span equations; exit 1 naming each failure\n"
      "  freeway-inspect record PID -o FILE [--hz N] [--seconds S] [--quiet]\n"
      "        records snapshots (default 20 Hz, until the process exits or Ctrl-C)\n"
      "  freeway-inspect replay FILE [--json] [--events]\n"
      "        one line (or one JSON object) per recorded frame\n"
      "  freeway-inspect diff A B [--json]\n"
      "        compares two sources per state and per class\n"
      "\n"
      "SOURCE is a pid or a file written by `snapshot -o` or `record` (its last frame).\n"
      "BYTES takes K, M, G, T suffixes (powers of 1024).\n"
      "A process publishes when started with FREEWAY_TELEMETRY=1 (FREEWAY_TELEMETRY_HZ sets the rate)\n"
      "or after it calls fw_telemetry_start().\n"
      "Exit codes: 0 ok, 1 a check failed, 2 usage error or unreadable pid/file.\n",
      out);
  return kExitOk;
}

struct Command {
  const char* name;
  int (*run)(int, char**);
};
const Command kCommands[] = {{"list", cmd_list},   {"snapshot", cmd_snapshot}, {"watch", cmd_watch},
                             {"check", cmd_check}, {"record", cmd_record},     {"replay", cmd_replay},
                             {"diff", cmd_diff}};

}  // namespace

bool cli_is_command(const char* word) {
  for (const Command& c : kCommands)
    if (std::strcmp(word, c.name) == 0) return true;
  return !std::strcmp(word, "help") || !std::strcmp(word, "--help") || !std::strcmp(word, "-h") ||
         !std::strcmp(word, "--version");
}

int cli_main(int argc, char** argv) {
  const char* w = argv[1];
  if (!std::strcmp(w, "--version")) {
    std::printf("freeway-inspect %s (telemetry format %d.%d)\n", FREEWAY_VERSION_STRING, FWT_VERSION_MAJOR,
                FWT_VERSION_MINOR);
    return kExitOk;
  }
  if (!std::strcmp(w, "help") || !std::strcmp(w, "--help") || !std::strcmp(w, "-h")) return cmd_help(stdout);
  for (const Command& c : kCommands)
    if (std::strcmp(w, c.name) == 0) return c.run(argc, argv);
  return fail("unknown command %s", w);
}

}  // namespace fwi
