// inspector/model/recording.cpp: the recording file (record / replay / diff).
//
// The format is documented in docs/recording.md; in short:
//
//   file   = "FWREC" varint(format version = 1) varint(telemetry major) varint(telemetry minor) frame*
//   frame  = varint(body length) body
//   body   = u8 flags [identity] record(process) [zz(events_missed) zz(events_dropped)]
//            [table(classes)] [table(regions)] [table(spans)] [table(labs)] [events]
//            (each part in brackets present only when its flag bit says so)
//   table  = varint(count) varint(runs) { varint(gap) varint(len) record{len} }{runs}
//   record = varint(bitmap of changed 64-bit words) { zz(word - previous word) }{popcount}
//   events = varint(n) { varint(word){5} }{n}
//
// Every record (and the process record) is a delta against the record at the
// same index in the previous frame (zeros for the first frame or for a new
// index); a table lists only the runs of records that changed, so an idle heap
// costs a few bytes per frame (the clock, the snapshot counter, the publish
// time). Records at indices beyond the previous frame's count are always
// written, which bounds how much a frame can make the reader allocate by the
// frame's own length.
//
// The reader treats the file as hostile: every varint is bounds-checked, every
// count is checked against the format's limits and the bytes left, and each
// decoded frame passes validate_snapshot() before it is returned.
#include "inspector/model/recording.h"

#include <fcntl.h>
#include <sys/stat.h>
#ifndef _WIN32
#include <unistd.h>
#endif

#include <cerrno>
#include <cstring>
#include <type_traits>
#include <vector>

#include "inspector/model/segment.h"

namespace fwi {

namespace {

constexpr char kMagic[5] = {'F', 'W', 'R', 'E', 'C'};
constexpr uint64_t kFormatVersion = 1;
constexpr uint64_t kMaxFrameBytes = uint64_t(1) << 30;
// Flag bits of a frame: which optional parts follow. An absent table or
// counter pair is the previous frame's; absent events are none.
constexpr uint8_t kFlagIdentity = 1, kFlagClasses = 2, kFlagRegions = 4, kFlagSpans = 8, kFlagLabs = 16,
                  kFlagEvents = 32, kFlagEventCounters = 64, kFlagsKnown = 127;
// Limits a decoded frame must respect (those of a segment header, segment.cpp).
constexpr uint64_t kMaxClasses = 64, kMaxRegions = 1u << 20, kMaxSpans = 1u << 26, kMaxLabs = 1u << 20,
                   kMaxEvents = 1u << 20, kMaxVspansPerRegion = 1u << 20;

// ---------------------------------------------------------------------------
// Encoding.

void put_varint(std::vector<uint8_t>* o, uint64_t v) {
  while (v >= 0x80) {
    o->push_back(uint8_t(v) | 0x80);
    v >>= 7;
  }
  o->push_back(uint8_t(v));
}
uint64_t zigzag(uint64_t d) { return (d << 1) ^ uint64_t(int64_t(d) >> 63); }
uint64_t unzigzag(uint64_t z) { return (z >> 1) ^ (~(z & 1) + 1); }

template <class T>
constexpr size_t kWords = sizeof(T) / 8;

template <class T>
void words_of(const T& r, uint64_t* w) {
  static_assert(sizeof(T) % 8 == 0 && sizeof(T) / 8 <= 63, "records are whole 64-bit words");
  std::memcpy(w, &r, sizeof(T));
}

template <class T>
void put_record(std::vector<uint8_t>* o, const T* base, const T& cur) {
  uint64_t b[kWords<T>] = {}, c[kWords<T>];
  if (base != nullptr) words_of(*base, b);
  words_of(cur, c);
  uint64_t bitmap = 0;
  for (size_t w = 0; w < kWords<T>; w++)
    if (b[w] != c[w]) bitmap |= uint64_t(1) << w;
  put_varint(o, bitmap);
  for (size_t w = 0; w < kWords<T>; w++)
    if ((bitmap >> w) & 1) put_varint(o, zigzag(c[w] - b[w]));
}

template <class T>
void put_table(std::vector<uint8_t>* o, const std::vector<T>& prev, const std::vector<T>& cur) {
  put_varint(o, cur.size());
  auto changed = [&](size_t i) { return i >= prev.size() || std::memcmp(&prev[i], &cur[i], sizeof(T)) != 0; };
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < cur.size();) {
    if (!changed(i)) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < cur.size() && changed(j)) j++;
    runs.emplace_back(i, j - i);
    i = j;
  }
  put_varint(o, runs.size());
  size_t end = 0;
  for (auto [start, len] : runs) {
    put_varint(o, start - end);
    put_varint(o, len);
    for (size_t i = start; i < start + len; i++) put_record(o, i < prev.size() ? &prev[i] : nullptr, cur[i]);
    end = start + len;
  }
}

// ---------------------------------------------------------------------------
// Decoding: a cursor over one frame's bytes; every read is bounds-checked and
// the first failure sticks (ok() goes false, error() says where).

struct Cursor {
  const uint8_t* p;
  const uint8_t* end;
  std::string err;

  bool ok() const { return err.empty(); }
  size_t left() const { return size_t(end - p); }
  void fail(const std::string& e) {
    if (err.empty()) err = e;
    p = end;
  }
  uint64_t varint(const char* what) {
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (p >= end) {
        fail(std::string("truncated ") + what);
        return 0;
      }
      uint8_t b = *p++;
      if (shift == 63 && b > 1) break;
      v |= uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail(std::string("bad varint in ") + what);
    return 0;
  }
  uint8_t byte(const char* what) {
    if (p >= end) {
      fail(std::string("truncated ") + what);
      return 0;
    }
    return *p++;
  }
};

template <class T>
void get_record(Cursor* c, const char* what, T* r) {
  uint64_t w[kWords<T>];
  words_of(*r, w);
  uint64_t bitmap = c->varint(what);
  if (!c->ok()) return;
  if (kWords<T> < 64 && (bitmap >> kWords<T>) != 0) {
    c->fail(std::string("bad word bitmap in ") + what);
    return;
  }
  for (size_t i = 0; i < kWords<T>; i++)
    if ((bitmap >> i) & 1) w[i] += unzigzag(c->varint(what));
  if (c->ok()) std::memcpy(r, w, sizeof(T));
}

// Decodes a table into *cur, which holds the previous frame's table on entry.
template <class T>
void get_table(Cursor* c, const char* what, uint64_t limit, std::vector<T>* cur) {
  const size_t prev_n = cur->size();
  uint64_t n = c->varint(what);
  if (!c->ok()) return;
  // New records are always written (at least one byte each): the bytes left
  // bound how far the table can grow, hence what a frame makes us allocate.
  if (n > limit || (n > prev_n && n - prev_n > c->left())) {
    c->fail(std::string(what) + " count " + std::to_string(n) + " out of bounds");
    return;
  }
  cur->resize(size_t(n));
  uint64_t runs = c->varint(what);
  if (!c->ok()) return;
  if (runs > n) {
    c->fail(std::string(what) + ": more runs than records");
    return;
  }
  uint64_t end = 0, new_written = 0;
  for (uint64_t r = 0; r < runs && c->ok(); r++) {
    uint64_t gap = c->varint(what), len = c->varint(what);
    if (!c->ok()) return;
    if (gap > n - end || len == 0 || len > n - end - gap) {
      c->fail(std::string(what) + ": run outside the table");
      return;
    }
    uint64_t start = end + gap;
    for (uint64_t i = start; i < start + len && c->ok(); i++) {
      if (i >= prev_n) {
        (*cur)[i] = T{};
        new_written++;
      }
      get_record(c, what, &(*cur)[i]);
    }
    end = start + len;
  }
  if (c->ok() && n > prev_n && new_written != n - prev_n)
    c->fail(std::string(what) + ": new records missing from the frame");
}

}  // namespace

// ---------------------------------------------------------------------------
// Writer

struct RecordingWriter::Impl {
  FILE* f = nullptr;
  std::string path;
  uint64_t bytes = 0;
  bool first = true;
  Snapshot prev;  // the previous frame as written (events excluded)
  std::vector<uint8_t> buf;
  ~Impl() {
    if (f != nullptr) std::fclose(f);
  }
  bool write(const std::vector<uint8_t>& b, std::string* err) {
    if (std::fwrite(b.data(), 1, b.size(), f) != b.size() || std::fflush(f) != 0) {
      *err = "recording " + path + ": write failed: " + std::strerror(errno);
      return false;
    }
    bytes += b.size();
    return true;
  }
};

std::unique_ptr<RecordingWriter> RecordingWriter::create(const std::string& path, std::string* err) {
  FILE* f = std::fopen(path.c_str(), "wbe");
  if (f == nullptr) {
    *err = "recording " + path + ": cannot create: " + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<RecordingWriter> w(new RecordingWriter);
  w->impl_ = std::make_unique<Impl>();
  w->impl_->f = f;
  w->impl_->path = path;
  std::vector<uint8_t> h(kMagic, kMagic + sizeof kMagic);
  put_varint(&h, kFormatVersion);
  put_varint(&h, FWT_VERSION_MAJOR);
  put_varint(&h, FWT_VERSION_MINOR);
  if (!w->impl_->write(h, err)) return nullptr;
  return w;
}

bool RecordingWriter::append(const Snapshot& s, std::string* err) {
  Impl& I = *impl_;
  std::vector<uint8_t>& b = I.buf;
  b.clear();
  const Snapshot& p = I.prev;
  bool identity = I.first || s.pid != p.pid || s.process_start_ticks != p.process_start_ticks || s.exe != p.exe ||
                  s.version_major != p.version_major || s.version_minor != p.version_minor ||
                  s.vspans_per_region != p.vspans_per_region || s.vspan_shift != p.vspan_shift ||
                  s.page_size != p.page_size || s.hz != p.hz;
  auto differs = [&](const auto& a, const auto& c) {
    using T = typename std::decay_t<decltype(a)>::value_type;
    return I.first || a.size() != c.size() || (!a.empty() && std::memcmp(a.data(), c.data(), a.size() * sizeof(T)) != 0);
  };
  const bool counters = I.first || s.events_missed != p.events_missed || s.events_dropped != p.events_dropped;
  uint8_t flags = (identity ? kFlagIdentity : 0) | (differs(p.classes, s.classes) ? kFlagClasses : 0) |
                  (differs(p.regions, s.regions) ? kFlagRegions : 0) | (differs(p.spans, s.spans) ? kFlagSpans : 0) |
                  (differs(p.labs, s.labs) ? kFlagLabs : 0) | (s.events.empty() ? 0 : kFlagEvents) |
                  (counters ? kFlagEventCounters : 0);
  b.push_back(flags);
  if (identity) {
    for (uint64_t v : {s.pid, s.process_start_ticks, uint64_t(s.version_major), uint64_t(s.version_minor),
                       uint64_t(s.vspans_per_region), uint64_t(s.vspan_shift), uint64_t(s.page_size), s.hz})
      put_varint(&b, v);
    size_t n = std::min<size_t>(s.exe.size(), FWT_EXE_MAX);
    put_varint(&b, n);
    b.insert(b.end(), s.exe.begin(), s.exe.begin() + ptrdiff_t(n));
  }
  put_record(&b, I.first ? nullptr : &p.process, s.process);
  if (flags & kFlagEventCounters) {
    put_varint(&b, zigzag(s.events_missed - (I.first ? 0 : p.events_missed)));
    put_varint(&b, zigzag(s.events_dropped - (I.first ? 0 : p.events_dropped)));
  }
  if (flags & kFlagClasses) put_table(&b, p.classes, s.classes);
  if (flags & kFlagRegions) put_table(&b, p.regions, s.regions);
  if (flags & kFlagSpans) put_table(&b, p.spans, s.spans);
  if (flags & kFlagLabs) put_table(&b, p.labs, s.labs);
  if (flags & kFlagEvents) {
    put_varint(&b, s.events.size());
    for (const fwt_event& e : s.events) {
      uint64_t w[kWords<fwt_event>];
      words_of(e, w);
      for (uint64_t x : w) put_varint(&b, x);
    }
  }
  std::vector<uint8_t> frame;
  put_varint(&frame, b.size());
  frame.insert(frame.end(), b.begin(), b.end());
  if (!I.write(frame, err)) return false;
  // Keep the frame for the next delta (the copy reuses prev's storage).
  I.prev.pid = s.pid;
  I.prev.process_start_ticks = s.process_start_ticks;
  I.prev.exe = s.exe.substr(0, FWT_EXE_MAX);
  I.prev.version_major = s.version_major;
  I.prev.version_minor = s.version_minor;
  I.prev.vspans_per_region = s.vspans_per_region;
  I.prev.vspan_shift = s.vspan_shift;
  I.prev.page_size = s.page_size;
  I.prev.hz = s.hz;
  I.prev.process = s.process;
  I.prev.classes = s.classes;
  I.prev.regions = s.regions;
  I.prev.spans = s.spans;
  I.prev.labs = s.labs;
  I.prev.events_missed = s.events_missed;
  I.prev.events_dropped = s.events_dropped;
  I.first = false;
  return true;
}

uint64_t RecordingWriter::bytes_written() const { return impl_->bytes; }

RecordingWriter::~RecordingWriter() = default;

// ---------------------------------------------------------------------------
// Reader

struct RecordingReader::Impl {
  FILE* f = nullptr;
  std::string path;
  uint64_t size = 0, pos = 0;  // file size at open, bytes consumed
  uint64_t frame = 0;
  bool have_prev = false, failed = false;
  Snapshot prev;
  std::vector<uint8_t> body;
  ~Impl() {
    if (f != nullptr) std::fclose(f);
  }
  std::string where() const { return "recording " + path + ": frame " + std::to_string(frame) + ": "; }
  // Reads one varint from the file. 1: read; 0: clean end of file; -1: error.
  int file_varint(uint64_t* v) {
    *v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      int ch = std::fgetc(f);
      if (ch == EOF) return shift == 0 ? 0 : -1;
      pos++;
      if (shift == 63 && ch > 1) return -1;
      *v |= uint64_t(ch & 0x7f) << shift;
      if ((ch & 0x80) == 0) return 1;
    }
    return -1;
  }
};

namespace {

// Opens path for reading if it is a regular file, and gives its size; nullptr
// and why if not. On POSIX the file is opened without blocking: opening a FIFO
// for reading would wait for a writer.
FILE* open_regular(const std::string& path, uint64_t* size, std::string* why) {
  struct stat st;
#ifdef _WIN32
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    *why = std::string("cannot open: ") + std::strerror(errno);
    return nullptr;
  }
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = "not a regular file";
    std::fclose(f);
    return nullptr;
  }
#else
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = std::string("cannot open: ") + std::strerror(errno);
    return nullptr;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = "not a regular file";
    ::close(fd);
    return nullptr;
  }
  FILE* f = fdopen(fd, "rb");
  if (f == nullptr) {
    *why = std::string("cannot open: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
#endif
  *size = uint64_t(st.st_size);
  return f;
}

}  // namespace

std::unique_ptr<RecordingReader> RecordingReader::open(const std::string& path, std::string* err) {
  std::string why;
  uint64_t size = 0;
  FILE* f = open_regular(path, &size, &why);
  if (f == nullptr) {
    *err = "recording " + path + ": " + why;
    return nullptr;
  }
  std::unique_ptr<RecordingReader> r(new RecordingReader);
  r->impl_ = std::make_unique<Impl>();
  Impl& I = *r->impl_;
  I.f = f;
  I.path = path;
  I.size = size;
  char magic[sizeof kMagic];
  if (std::fread(magic, 1, sizeof magic, f) != sizeof magic || std::memcmp(magic, kMagic, sizeof magic) != 0) {
    *err = "recording " + path + ": not a freeway recording (bad magic)";
    return nullptr;
  }
  I.pos = sizeof magic;
  uint64_t ver = 0, major = 0, minor = 0;
  if (I.file_varint(&ver) != 1 || I.file_varint(&major) != 1 || I.file_varint(&minor) != 1) {
    *err = "recording " + path + ": truncated file header";
    return nullptr;
  }
  if (ver != kFormatVersion) {
    *err = "recording " + path + ": recording format " + std::to_string(ver) + ", this inspector reads " +
           std::to_string(kFormatVersion);
    return nullptr;
  }
  if (major != FWT_VERSION_MAJOR) {
    *err = "recording " + path + ": telemetry format " + std::to_string(major) + "." + std::to_string(minor) +
           ", this inspector reads " + std::to_string(FWT_VERSION_MAJOR) + ".x";
    return nullptr;
  }
  return r;
}

bool RecordingReader::next(Snapshot* out, std::string* err) {
  Impl& I = *impl_;
  err->clear();
  if (I.failed) {
    *err = I.where() + "the file is unreadable past this frame";
    return false;
  }
  auto bad = [&](const std::string& e) {
    I.failed = true;
    *err = I.where() + e;
    return false;
  };
  uint64_t len = 0;
  int r = I.file_varint(&len);
  if (r == 0) return false;  // clean end
  if (r < 0) return bad("truncated or bad frame length");
  if (len == 0 || len > kMaxFrameBytes) return bad("bad frame length " + std::to_string(len));
  if (len > I.size - std::min(I.size, I.pos))
    return bad("truncated frame (" + std::to_string(len) + " bytes, beyond the end of the file)");
  I.body.resize(size_t(len));
  if (std::fread(I.body.data(), 1, size_t(len), I.f) != len) return bad("truncated frame");
  I.pos += len;

  Cursor c{I.body.data(), I.body.data() + I.body.size(), {}};
  Snapshot s;
  if (I.have_prev) {
    s = I.prev;  // the base of every delta
  }
  uint8_t flags = c.byte("flags");
  if ((flags & ~kFlagsKnown) != 0) return bad("unknown flags");
  if (!I.have_prev && !(flags & kFlagIdentity)) return bad("the first frame has no identity");
  if (flags & kFlagIdentity) {
    s.pid = c.varint("pid");
    s.process_start_ticks = c.varint("identity");
    uint64_t vmaj = c.varint("identity"), vmin = c.varint("identity"), vspr = c.varint("identity"),
             vshift = c.varint("identity"), page = c.varint("identity");
    s.hz = c.varint("identity");
    uint64_t n = c.varint("exe");
    if (!c.ok()) return bad(c.err);
    if (vmaj != FWT_VERSION_MAJOR || vmin > UINT32_MAX) return bad("telemetry version in frame differs");
    if (vspr == 0 || vspr > kMaxVspansPerRegion || (vspr & (vspr - 1)) != 0)
      return bad("vspans per region " + std::to_string(vspr) + " is not a power of two up to 2^20");
    if (vshift < 12 || vshift > 40 || page > UINT32_MAX) return bad("bad span geometry");
    if (n > FWT_EXE_MAX || n > c.left()) return bad("exe name length out of bounds");
    s.version_major = uint32_t(vmaj);
    s.version_minor = uint32_t(vmin);
    s.vspans_per_region = uint32_t(vspr);
    s.vspan_shift = uint32_t(vshift);
    s.page_size = uint32_t(page);
    s.exe = printable_exe(reinterpret_cast<const char*>(c.p), size_t(n));  // a crafted file's bytes reach terminals
    c.p += n;
  }
  get_record(&c, "process", &s.process);
  if (flags & kFlagEventCounters) {
    s.events_missed += unzigzag(c.varint("events_missed"));
    s.events_dropped += unzigzag(c.varint("events_dropped"));
  }
  if (flags & kFlagClasses) get_table(&c, "classes", kMaxClasses, &s.classes);
  if (flags & kFlagRegions) get_table(&c, "regions", kMaxRegions, &s.regions);
  if (flags & kFlagSpans) get_table(&c, "spans", kMaxSpans, &s.spans);
  if (flags & kFlagLabs) get_table(&c, "labs", kMaxLabs, &s.labs);
  s.events.clear();
  if (flags & kFlagEvents) {
    uint64_t nev = c.varint("events");
    if (!c.ok()) return bad(c.err);
    if (nev == 0 || nev > kMaxEvents || nev * 5 > c.left())
      return bad("event count " + std::to_string(nev) + " out of bounds");
    s.events.resize(size_t(nev));
    for (fwt_event& e : s.events) {
      uint64_t w[kWords<fwt_event>];
      for (uint64_t& x : w) x = c.varint("event");
      std::memcpy(&e, w, sizeof e);
    }
  }
  if (!c.ok()) return bad(c.err);
  if (c.left() != 0) return bad(std::to_string(c.left()) + " bytes left over in the frame");
  std::string v = validate_snapshot(s, uint32_t(kMaxLabs));
  if (!v.empty()) return bad(v);
  // Keep this frame (without its events) as the next base.
  I.prev = s;
  I.prev.events.clear();
  I.have_prev = true;
  I.frame++;
  *out = std::move(s);
  return true;
}

RecordingReader::~RecordingReader() = default;

}  // namespace fwi
