// core/options.cpp: the options table (see options.h).
#include "core/options.h"

#include <atomic>

#include "core/report.h"
#include "platform/os.h"

namespace fw {
namespace {

struct OptionDesc {
  const char* name;
  int64_t def, least, most;
  const char* doc;
};

constexpr OptionDesc kOptions[] = {
#define FW_OPTION_DESC(name, def, least, most, doc) {#name, def, least, most, doc},
    FW_OPTIONS(FW_OPTION_DESC)
#undef FW_OPTION_DESC
};
constexpr unsigned kCount = unsigned(Option::count);
constexpr bool defaults_in_range() {
  for (const OptionDesc& o : kOptions)
    if (o.def < o.least || o.def > o.most) return false;
  return true;
}
static_assert(defaults_in_range(), "every option's default lies in its range");

// Parses a decimal integer, with an optional sign; false on anything else.
bool parse_int(const char* s, int64_t* out) {
  bool neg = false;
  if (*s == '-' || *s == '+') {
    neg = *s == '-';
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

}  // namespace

namespace detail {
std::atomic<int64_t> g_option_values[kCount];
std::atomic<bool> g_options_loaded{false};

void load_options() {
  for (unsigned i = 0; i < kCount; i++) {
    char env[64] = "FREEWAY_";
    unsigned n = 8;
    for (const char* p = kOptions[i].name; *p && n < sizeof(env) - 1; p++)
      env[n++] = (*p >= 'a' && *p <= 'z') ? char(*p - 32) : *p;
    env[n] = 0;
    const OptionDesc& o = kOptions[i];
    int64_t v = o.def;
    if (const char* s = os::getenv(env)) {
      if (!parse_int(s, &v) || v < o.least || v > o.most) {
        // At most 64 characters of the value: the line always ends.
        char shown[68];
        unsigned k = 0;
        for (; s[k] != 0 && k < 64; k++) shown[k] = s[k];
        if (s[k] != 0) shown[k++] = '.', shown[k++] = '.', shown[k++] = '.';
        shown[k] = 0;
        Line l;
        l.str("freeway: ignoring ").str(env).str("=").str(shown);
        l.str(" (not a whole number from ").dec(uint64_t(o.least)).str(" to ").dec(uint64_t(o.most));
        l.str("); using ").dec(uint64_t(o.def)).str("\n");
        l.write(2);
        v = o.def;
      }
    }
    g_option_values[i].store(v, std::memory_order_relaxed);
  }
  g_options_loaded.store(true, std::memory_order_release);
}
}  // namespace detail

void options_print(int fd) {
  option(Option::verbose);
  Line head;
  head.str("freeway options (environment FREEWAY_<NAME>):\n");
  head.write(fd);
  for (unsigned i = 0; i < kCount; i++) {
    Line l;
    l.str("  ").str(kOptions[i].name).str(" = ");
    int64_t v = detail::g_option_values[i].load(std::memory_order_relaxed);
    if (v < 0) l.str("-").dec(uint64_t(-v));
    else l.dec(uint64_t(v));
    l.str("  (default ").dec(uint64_t(kOptions[i].def)).str(", ").dec(uint64_t(kOptions[i].least)).str(" to ")
        .dec(uint64_t(kOptions[i].most)).str("): ").str(kOptions[i].doc).str("\n");
    l.write(fd);
  }
}

}  // namespace fw
