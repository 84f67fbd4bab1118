// core/secure.cpp: keys for the canaries and encoded lists (see secure.h).
#include "core/secure.h"

#include "core/options.h"
#include "platform/os.h"

namespace fw {

std::atomic<uint64_t> g_canary_key{0};
std::atomic<uint64_t> g_list_key{0};

std::atomic<int> g_secure{-1};

namespace {
uint64_t fresh_key() {
  uint64_t k = os::random_u64();
  return k == 0 ? 0x9e3779b97f4a7c15ull : k;
}
}  // namespace

bool secure_mode_read() {
  // Racing first callers read the same option and store the same value.
  const int s = option(Option::secure) > 0 ? 1 : 0;
  g_secure.store(s, std::memory_order_relaxed);
  return s == 1;
}

void secure_init() {
  uint64_t zero = 0;
  if (g_canary_key.load(std::memory_order_acquire) == 0)
    g_canary_key.compare_exchange_strong(zero, fresh_key(), std::memory_order_acq_rel);
  zero = 0;
  if (secure_mode() && g_list_key.load(std::memory_order_acquire) == 0)
    g_list_key.compare_exchange_strong(zero, fresh_key(), std::memory_order_acq_rel);
}

}  // namespace fw
