// shim/windows/patch.cpp: function-entry patches on x86-64 (see patch.h).
#include "shim/windows/patch.h"

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <tlhelp32.h>

#include <cstring>

namespace fw::win {
namespace {

constexpr int kJmpLen = 5;            // jmp rel32
constexpr size_t kSlotBytes = 96;     // stub (16) + trampoline (up to 80)
constexpr size_t kNearBlock = 65536;  // allocation granularity
constexpr int kMaxInsns = 8;

// --- Decoding ------------------------------------------------------------

enum Branch : uint8_t { kNone, kJmp8, kJcc8, kJmp32, kCall32, kJcc32 };

struct Insn {
  int len = 0;
  int disp_at = -1;     // offset of a RIP-relative disp32, or -1
  Branch branch = kNone;
  int rel_at = 0;       // offset of the rel8/rel32 of a branch
  uint8_t cc = 0;       // condition of a jcc
  bool ends = false;    // ret or int3: the function may end here
};

bool decode(const uint8_t* c, Insn* out) {
  Insn d;
  int i = 0;
  bool op16 = false, rexw = false;
  for (int prefixes = 0;; prefixes++) {
    uint8_t b = c[i];
    if (prefixes > 4) return false;
    if (b == 0x66) {
      op16 = true;
      i++;
    } else if (b == 0x67 || b == 0xF2 || b == 0xF3 || b == 0x2E || b == 0x3E || b == 0x26 || b == 0x64 ||
               b == 0x65 || b == 0x36 || b == 0xF0) {
      i++;
    } else {
      break;
    }
  }
  if ((c[i] & 0xF0) == 0x40) rexw = (c[i++] & 8) != 0;
  uint8_t op = c[i++];
  uint8_t reg = 0;
  auto modrm = [&]() {
    uint8_t m = c[i++];
    uint8_t mod = m >> 6, rm = m & 7;
    reg = (m >> 3) & 7;
    if (mod != 3 && rm == 4) {
      uint8_t sib = c[i++];
      if (mod == 0 && (sib & 7) == 5) i += 4;
    }
    if (mod == 0 && rm == 5) {
      d.disp_at = i;  // RIP-relative in 64-bit mode
      i += 4;
    } else if (mod == 1) {
      i += 1;
    } else if (mod == 2) {
      i += 4;
    }
  };
  const int imm = op16 ? 2 : 4;
  if (op < 0x40 && op != 0x0F) {
    switch (op & 7) {
      case 0: case 1: case 2: case 3: modrm(); break;
      case 4: i += 1; break;
      case 5: i += imm; break;
      default: return false;  // invalid in 64-bit mode (or a prefix, handled above)
    }
  } else if (op == 0x0F) {
    uint8_t op2 = c[i++];
    if (op2 >= 0x80 && op2 <= 0x8F) {
      d.branch = kJcc32;
      d.cc = op2 & 0x0F;
      d.rel_at = i;
      i += 4;
    } else if (op2 == 0x38) {
      i++;
      modrm();
    } else if (op2 == 0x3A) {
      i++;
      modrm();
      i += 1;
    } else if ((op2 >= 0x70 && op2 <= 0x73) || op2 == 0xBA || op2 == 0xC2 || op2 == 0xC4 || op2 == 0xC5 ||
               op2 == 0xC6 || op2 == 0xA4 || op2 == 0xAC) {
      modrm();
      i += 1;
    } else if ((op2 >= 0x10 && op2 <= 0x1F) || (op2 >= 0x28 && op2 <= 0x2F) || (op2 >= 0x40 && op2 <= 0x6F) ||
               (op2 >= 0x74 && op2 <= 0x7F) || (op2 >= 0x90 && op2 <= 0x9F) || op2 == 0xA3 || op2 == 0xAB ||
               op2 == 0xAF || op2 == 0xB0 || op2 == 0xB1 || op2 == 0xB3 || (op2 >= 0xB6 && op2 <= 0xBF) ||
               op2 == 0xC0 || op2 == 0xC1 || op2 >= 0xD0) {
      modrm();
    } else {
      return false;
    }
  } else if (op >= 0x50 && op <= 0x5F) {
  } else if (op == 0x63 || (op >= 0x84 && op <= 0x8F) || (op >= 0xD0 && op <= 0xD3) || op == 0xFE || op == 0xFF) {
    modrm();
  } else if (op == 0x68) {
    i += 4;
  } else if (op == 0x6A || op == 0xA8 || (op >= 0xB0 && op <= 0xB7)) {
    i += 1;
  } else if (op == 0x69) {
    modrm();
    i += imm;
  } else if (op == 0x6B || op == 0x80 || op == 0x83 || op == 0xC0 || op == 0xC1 || op == 0xC6) {
    modrm();
    i += 1;
  } else if (op == 0x81 || op == 0xC7) {
    modrm();
    i += imm;
  } else if (op >= 0x70 && op <= 0x7F) {
    d.branch = kJcc8;
    d.cc = op & 0x0F;
    d.rel_at = i;
    i += 1;
  } else if ((op >= 0x90 && op <= 0x99) || op == 0xC9) {
  } else if (op == 0xA9) {
    i += imm;
  } else if (op >= 0xB8 && op <= 0xBF) {
    i += rexw ? 8 : imm;
  } else if (op == 0xC3 || op == 0xCC) {
    d.ends = true;
  } else if (op == 0xC2) {
    i += 2;
    d.ends = true;
  } else if (op == 0xE8 || op == 0xE9) {
    d.branch = op == 0xE8 ? kCall32 : kJmp32;
    d.rel_at = i;
    i += 4;
  } else if (op == 0xEB) {
    d.branch = kJmp8;
    d.rel_at = i;
    i += 1;
  } else if (op == 0xF6 || op == 0xF7) {
    modrm();
    if (reg < 2) i += op == 0xF6 ? 1 : imm;
  } else {
    return false;
  }
  if (i > 15) return false;
  d.len = i;
  *out = d;
  return true;
}

bool fits32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

void put32(uint8_t* p, int64_t v) {
  int32_t x = int32_t(v);
  std::memcpy(p, &x, 4);
}

// --- Memory near a target ---------------------------------------------------

struct NearBlock {
  uint8_t* base;
  size_t used;
};
NearBlock g_blocks[64];
int g_block_count = 0;

bool within_reach(const void* a, const void* b) {
  int64_t d = reinterpret_cast<intptr_t>(a) - reinterpret_cast<intptr_t>(b);
  return d > -(int64_t(1) << 31) + int64_t(kNearBlock) && d < (int64_t(1) << 31) - int64_t(kNearBlock);
}

// kSlotBytes of executable memory within 2 GiB of target.
uint8_t* near_slot(const void* target) {
  for (int i = 0; i < g_block_count; i++)
    if (within_reach(g_blocks[i].base, target) && g_blocks[i].used + kSlotBytes <= kNearBlock) {
      uint8_t* s = g_blocks[i].base + g_blocks[i].used;
      g_blocks[i].used += kSlotBytes;
      return s;
    }
  if (g_block_count == 64) return nullptr;
  uintptr_t t = reinterpret_cast<uintptr_t>(target) & ~uintptr_t(kNearBlock - 1);
  // Below the target first (the space under a DLL is usually free), then above.
  for (int dir = -1; dir <= 1; dir += 2)
    for (uintptr_t step = 1; step < (uintptr_t(1) << 31) / kNearBlock - 2; step++) {
      uintptr_t a = dir < 0 ? t - step * kNearBlock : t + step * kNearBlock;
      if (dir < 0 && a > t) break;  // wrapped below zero
      MEMORY_BASIC_INFORMATION mi;
      if (VirtualQuery(reinterpret_cast<void*>(a), &mi, sizeof mi) == 0 || mi.State != MEM_FREE) continue;
      void* p = VirtualAlloc(reinterpret_cast<void*>(a), kNearBlock, MEM_RESERVE | MEM_COMMIT, PAGE_EXECUTE_READWRITE);
      if (p == nullptr) continue;
      g_blocks[g_block_count] = {static_cast<uint8_t*>(p), kSlotBytes};
      return static_cast<uint8_t*>(g_blocks[g_block_count++].base);
    }
  return nullptr;
}

// --- Preparing one patch ----------------------------------------------------

struct Prepared {
  uint8_t* slot;
  int count;                        // instructions displaced
  uint8_t from[kMaxInsns];          // their offsets in the original
  uint8_t to[kMaxInsns];            // and in the trampoline
};

const char* prepare(Patch* p, Prepared* out) {
  const uint8_t* code = static_cast<const uint8_t*>(p->target);
  uint8_t* slot = near_slot(code);
  if (slot == nullptr) return "no memory within 2 GiB of the function for its trampoline";
  // Stub: jmp [rip+0]; .quad replacement
  slot[0] = 0xFF;
  slot[1] = 0x25;
  put32(slot + 2, 0);
  uint64_t r = reinterpret_cast<uintptr_t>(p->replacement);
  std::memcpy(slot + 6, &r, 8);
  uint8_t* tramp = slot + 16;
  int at = 0, out_at = 0, n = 0;
  const uint8_t* dests[kMaxInsns];
  int ndests = 0;
  while (at < kJmpLen) {
    Insn d;
    if (n == kMaxInsns || !decode(code + at, &d)) return "its prologue has an instruction the patcher cannot relocate";
    if (d.ends && at + d.len < kJmpLen) return "it is shorter than the 5-byte jump";
    out->from[n] = uint8_t(at);
    out->to[n] = uint8_t(out_at);
    n++;
    const uint8_t* src = code + at;
    uint8_t* dst = tramp + out_at;
    if (d.branch != kNone) {
      int64_t rel = d.branch == kJmp8 || d.branch == kJcc8 ? int8_t(src[d.rel_at]) : [&] {
        int32_t x;
        std::memcpy(&x, src + d.rel_at, 4);
        return int64_t(x);
      }();
      const uint8_t* dest = src + d.len + rel;
      dests[ndests++] = dest;
      int len;
      if (d.branch == kJcc8 || d.branch == kJcc32) {
        dst[0] = 0x0F;
        dst[1] = uint8_t(0x80 | d.cc);
        len = 6;
      } else if (d.branch == kCall32) {
        std::memcpy(dst, src, size_t(d.rel_at));  // prefixes and opcode
        len = d.rel_at + 4;
      } else {
        dst[0] = 0xE9;
        len = 5;
      }
      int64_t nrel = dest - (dst + len);
      if (!fits32(nrel)) return "a branch in its prologue cannot reach from the trampoline";
      put32(dst + len - 4, nrel);
      out_at += len;
    } else {
      std::memcpy(dst, src, size_t(d.len));
      if (d.disp_at >= 0) {
        int32_t disp;
        std::memcpy(&disp, src + d.disp_at, 4);
        const uint8_t* dest = src + d.len + disp;
        if (dest >= code && dest < code + kJmpLen) return "its prologue reads its own bytes";
        int64_t ndisp = dest - (dst + d.len);
        if (!fits32(ndisp)) return "a RIP-relative operand cannot reach from the trampoline";
        put32(dst + d.disp_at, ndisp);
      }
      out_at += d.len;
    }
    at += d.len;
  }
  for (int k = 0; k < ndests; k++)
    if (dests[k] > code && dests[k] < code + at) return "a branch in its prologue jumps into the bytes to be replaced";
  // Jump back to the first instruction not displaced.
  uint8_t* back = tramp + out_at;
  back[0] = 0xE9;
  int64_t rel = (code + at) - (back + 5);
  if (!fits32(rel)) return "the trampoline cannot jump back";
  put32(back + 1, rel);
  if (16 + out_at + 5 > int(kSlotBytes)) return "its relocated prologue is too long";
  p->trampoline = tramp;
  p->displaced = uint8_t(at);
  out->slot = slot;
  out->count = n;
  return nullptr;
}

// --- Other threads ------------------------------------------------------------

struct Suspended {
  HANDLE* handles;
  int count;
};

Suspended suspend_others() {
  Suspended s{nullptr, 0};
  HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
  if (snap == INVALID_HANDLE_VALUE) return s;
  constexpr int kMax = 8192;
  s.handles = static_cast<HANDLE*>(VirtualAlloc(nullptr, kMax * sizeof(HANDLE), MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE));
  if (s.handles == nullptr) {
    CloseHandle(snap);
    return s;
  }
  THREADENTRY32 te;
  te.dwSize = sizeof te;
  DWORD pid = GetCurrentProcessId(), self = GetCurrentThreadId();
  for (BOOL ok = Thread32First(snap, &te); ok && s.count < kMax; ok = Thread32Next(snap, &te)) {
    if (te.th32OwnerProcessID != pid || te.th32ThreadID == self) continue;
    HANDLE h = OpenThread(THREAD_SUSPEND_RESUME | THREAD_GET_CONTEXT | THREAD_SET_CONTEXT, FALSE, te.th32ThreadID);
    if (h == nullptr) continue;
    if (SuspendThread(h) == DWORD(-1)) {
      CloseHandle(h);
      continue;
    }
    s.handles[s.count++] = h;
  }
  CloseHandle(snap);
  return s;
}

void resume(Suspended& s) {
  for (int i = 0; i < s.count; i++) {
    ResumeThread(s.handles[i]);
    CloseHandle(s.handles[i]);
  }
  if (s.handles != nullptr) VirtualFree(s.handles, 0, MEM_RELEASE);
}

// A suspended thread about to run displaced bytes continues in the trampoline.
void move_threads(Suspended& s, const Patch* patches, const Prepared* prep, const bool* ready, int n) {
  for (int t = 0; t < s.count; t++) {
    CONTEXT ctx;
    ctx.ContextFlags = CONTEXT_CONTROL;
    if (!GetThreadContext(s.handles[t], &ctx)) continue;
    for (int i = 0; i < n; i++) {
      if (!ready[i]) continue;
      uintptr_t base = reinterpret_cast<uintptr_t>(patches[i].target);
      if (ctx.Rip <= base || ctx.Rip >= base + patches[i].displaced) continue;  // at the entry is fine
      for (int k = 0; k < prep[i].count; k++)
        if (ctx.Rip == base + prep[i].from[k]) {
          ctx.Rip = reinterpret_cast<uintptr_t>(patches[i].trampoline) + prep[i].to[k];
          SetThreadContext(s.handles[t], &ctx);
        }
    }
  }
}

}  // namespace

int instruction_length(const uint8_t* code) {
  Insn d;
  return decode(code, &d) ? d.len : 0;
}

int patch_apply(Patch* patches, int n, void (*before_write)(void*), void* arg) {
  DWORD saved = GetLastError();
  auto* prep = static_cast<Prepared*>(VirtualAlloc(nullptr, sizeof(Prepared) * size_t(n) + size_t(n),
                                                    MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE));
  if (prep == nullptr) return 0;
  bool* ready = reinterpret_cast<bool*>(prep + n);
  for (int i = 0; i < n; i++) {
    patches[i].trampoline = nullptr;
    patches[i].displaced = 0;
    patches[i].failure = prepare(&patches[i], &prep[i]);
    ready[i] = patches[i].failure == nullptr;
  }
  if (before_write != nullptr) before_write(arg);
  Suspended s = suspend_others();
  move_threads(s, patches, prep, ready, n);
  int written = 0;
  for (int i = 0; i < n; i++) {
    if (!ready[i]) continue;
    uint8_t* code = static_cast<uint8_t*>(patches[i].target);
    DWORD old;
    if (!VirtualProtect(code, kJmpLen, PAGE_EXECUTE_READWRITE, &old)) {
      patches[i].failure = "VirtualProtect refused to make its code writable";
      continue;
    }
    uint8_t jmp[kJmpLen] = {0xE9};
    put32(jmp + 1, prep[i].slot - (code + kJmpLen));
    std::memcpy(code, jmp, kJmpLen);
    VirtualProtect(code, kJmpLen, old, &old);
    FlushInstructionCache(GetCurrentProcess(), code, kJmpLen);
    written++;
  }
  resume(s);
  VirtualFree(prep, 0, MEM_RELEASE);
  SetLastError(saved);
  return written;
}

}  // namespace fw::win
