// core/options.cpp: the options table (see options.h).
#include "core/options.h"

#include <atomic>

#include "core/report.h"
#include "platform/os.h"

namespace fw {
namespace {

struct OptionDesc {
  const char* name;
  int64_t def;
  const char* doc;
};

constexpr OptionDesc kOptions[] = {
#define FW_OPTION_DESC(name, def, doc) {#name, def, doc},
    FW_OPTIONS(FW_OPTION_DESC)
#undef FW_OPTION_DESC
};
constexpr unsigned kCount = unsigned(Option::count);

// Values are written once by whichever thread reads the environment first;
// racing readers compute the same values, so relaxed order is enough.
std::atomic<int64_t> g_values[kCount];
std::atomic<bool> g_loaded{false};

// Parses a decimal integer, with an optional sign; false on anything else.
bool parse_int(const char* s, int64_t* out) {
  bool neg = false;
  if (*s == '-') {
    neg = true;
    s++;
  }
  if (*s == 0) return false;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return false;
    v = v * 10 + (*s - '0');
    if (v > (int64_t(1) << 40)) return false;
  }
  *out = neg ? -v : v;
  return true;
}

void load() {
  for (unsigned i = 0; i < kCount; i++) {
    char env[64] = "FREEWAY_";
    unsigned n = 8;
    for (const char* p = kOptions[i].name; *p && n < sizeof(env) - 1; p++)
      env[n++] = (*p >= 'a' && *p <= 'z') ? char(*p - 32) : *p;
    env[n] = 0;
    int64_t v = kOptions[i].def;
    if (const char* s = os::getenv(env)) {
      if (!parse_int(s, &v)) {
        Line l;
        l.str("freeway: ignoring ").str(env).str("=").str(s).str(" (not a whole number); using ")
            .dec(uint64_t(kOptions[i].def)).str("\n");
        l.write(2);
        v = kOptions[i].def;
      }
    }
    g_values[i].store(v, std::memory_order_relaxed);
  }
  g_loaded.store(true, std::memory_order_release);
}

}  // namespace

int64_t option(Option o) {
  if (!g_loaded.load(std::memory_order_acquire)) load();
  return g_values[unsigned(o)].load(std::memory_order_relaxed);
}

void options_print(int fd) {
  option(Option::verbose);
  Line head;
  head.str("freeway options (environment FREEWAY_<NAME>):\n");
  head.write(fd);
  for (unsigned i = 0; i < kCount; i++) {
    Line l;
    l.str("  ").str(kOptions[i].name).str(" = ");
    int64_t v = g_values[i].load(std::memory_order_relaxed);
    if (v < 0) l.str("-").dec(uint64_t(-v));
    else l.dec(uint64_t(v));
    l.str("  (default ").dec(uint64_t(kOptions[i].def)).str("): ").str(kOptions[i].doc).str("\n");
    l.write(fd);
  }
}

}  // namespace fw
