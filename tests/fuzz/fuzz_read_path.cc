// libFuzzer target: the client read path, in two modes chosen by the
// input's first byte.
//
// Decode mode (any first byte but 0xFF): the read path's pure functions over
// arbitrary window and entry bytes (what a torn, recycled or hostile READ
// could return). It must never crash, and must never answer a value unless
// the entry's checksum holds and its key is the key asked for (checked
// against the documented layout by CheckIsTheEntry, not with DecodeEntry's
// own helpers), nor read past the bytes it was given; a candidate's READ is
// never longer than the largest size class's bytes.
//
// World mode (first byte 0xFF): the real client's GET state machine
// (client/client_get.cc: the cached-location GET, the window round, late
// rounds and their recheck) over the loopback transport, against an index
// and a log that this target keeps as the server does (an entry complete
// before its key's word names it, the entry it supersedes marked
// NOT-CURRENT, tombstones named by their key's word) and that the input
// changes between GETs and at a point inside a GET: before one of its READs
// or between two 8-byte chunks of one (READs copied ascending or
// descending); each change lands whole between two chunks. Besides PUTs,
// DELETEs and relocations (the cleaner's moves), the input writes at stale
// log offsets (that no word names now) what another client's value can hold
// there once the segment is reused (issue 25 item 1): complete, checksummed
// entry images of any key, values or tombstones, laid out for the offset's
// parity or for the other one, sized like the stale entry or not, and raw
// bytes. It keeps the server's reuse rule (DESIGN.md "Reclamation"): bytes a
// word named are rewritten only a grace period after the word stopped naming
// them (with a GET in flight it sleeps that long, so the GET's round is then
// late). The oracle: a GET that returns a value its key did not have at some
// instant of the GET (one no PUT of the key wrote, or one superseded before
// the GET began), or NotFound for a key present throughout the GET, aborts.
// With the forged-entry fix put back (tests/putback/run 25.1, 25.1b, 25.1c)
// the seeds world_* abort, and the fuzzer finds each bug from the other
// seeds within minutes (DESIGN.md, "Why a GET returns a value the key had
// during the GET"). The input's layout: tests/fuzz/make_seeds.py.
// KVRDMA_FUZZ_VERBOSE=1 prints a line per GET.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "client/client_internal.h"
#include "common/format/read_path.h"
#include "common/format/round_clock.h"
#include "common/log.h"
#include "common/protocol/handshake.h"
#include "common/transport/loopback_transport.h"

namespace {

// What a valid entry is, written out from docs/DESIGN.md ("Log entry")
// without entry.h's helpers: at log offset `off`, the guard is the 8-aligned
// word of the first 12 bytes and the lengths the other 4; the guard's low 63
// bits are XXH3-64 of key and value seeded with seed ^ lengths * 0x9E3779B97F4A7C15.
// Aborts unless `bytes` hold such an entry of `key` whose value is `value`.
void CheckIsTheEntry(std::span<const std::byte> bytes, uint64_t off, std::string_view key, uint64_t seed,
                     bool tombstone, std::span<const std::byte> value) {
  if (bytes.size() < 12) std::abort();
  uint64_t guard;
  uint32_t lengths;
  std::memcpy(&guard, bytes.data() + (off % 8 == 0 ? 0 : 4), 8);
  std::memcpy(&lengths, bytes.data() + (off % 8 == 0 ? 8 : 0), 4);
  const size_t klen = lengths & 1023, vlen = (lengths >> 10) & ((1u << 21) - 1);
  if (((lengths >> 31) != 0) != tombstone) std::abort();
  if (klen != key.size() || 12 + klen + vlen > bytes.size()) std::abort();
  if (std::memcmp(bytes.data() + 12, key.data(), klen) != 0) std::abort();
  const uint64_t sum = XXH3_64bits_withSeed(bytes.data() + 12, klen + vlen, seed ^ (uint64_t{lengths} * 0x9E3779B97F4A7C15ull));
  if (((sum ^ guard) & ((uint64_t{1} << 63) - 1)) != 0) std::abort();
  if (!tombstone && (value.data() != bytes.data() + 12 + klen || value.size() != vlen)) std::abort();
}


// ---- World mode --------------------------------------------------------

namespace world {

using namespace kvrdma;

constexpr uint64_t kLogBytes = 2048;
constexpr uint32_t kRoundLimitUs = 1000;                   // D, in the descriptor
constexpr auto kGrace = std::chrono::microseconds(2500);   // the reuse rule's wait
// What Server::Start checks of a real server's grace period against D.
static_assert(kRecheckRoundLimits * kRoundLimitUs < 2 * 2500);
constexpr uint64_t kSeed = 0x1234;
constexpr int kKeys = 3;
// Lengths 2, 4 and 7: entries of the same value length end on different
// grids, so images of one key land at offsets where another's entries were.
constexpr std::string_view kKeyNames[kKeys] = {"k0", "key1", "k2-long"};
constexpr size_t kMaxValue = 40;
// Every write of an input fits (32 commands, up to 4 actions in a GET's
// plan): no stale location is forgotten while a GET could depend on it.
constexpr size_t kMaxLocs = 256;

// Server memory: the index at 0, the log at 4096, lock words, the ring.
constexpr size_t kIndexAt = 0, kLogAt = 4096, kLocksAt = 8192, kRingAt = 16384, kMem = 1 << 15;
constexpr uint32_t kMessageBytes = 512;
constexpr uint16_t kCredits = 4;

struct Net {
  std::shared_ptr<LoopbackFabric> fabric = LoopbackFabric::Create();
  std::shared_ptr<Device> server = fabric->CreateDevice("fuzz-server");
  std::shared_ptr<Device> client = fabric->CreateDevice("fuzz-client");
  std::vector<uint8_t> mem = std::vector<uint8_t>(kMem, 0);
  std::unique_ptr<MemoryRegion> mr;
  Net() {
    auto r = server->RegisterMemory(mem.data(), mem.size(),
                                    kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic);
    if (!r.ok()) std::abort();
    mr = std::move(r).value();
  }
};

Net& N() {
  static Net n;
  return n;
}

// Reads the input front to back (so seeds can be written by hand:
// tests/fuzz/make_seeds.py); zeros past its end.
struct Reader {
  const uint8_t* p;
  size_t n;
  size_t i = 0;
  uint8_t U8() { return i < n ? p[i++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  std::string Bytes(size_t k) {
    k = std::min(k, n - std::min(n, i));
    std::string s(reinterpret_cast<const char*>(p + i), k);
    i += k;
    return s;
  }
  bool Done() const { return i >= n; }
};

// An entry the world wrote (or a location a word named): named while its
// key's word holds its ref; afterwards a stale location, where a reader's
// cached ref, or a window READ of a round that is now late, may still point.
struct Loc {
  uint64_t off;
  uint32_t bytes;
  int key;
  uint32_t value_len;
  bool named;
  RoundClock::time_point unnamed_at;
};

struct Key {
  uint64_t word = 0;  // index word (absolute) that names the key's entry
  uint16_t fingerprint = 0;
  bool present = false;  // a value (not a tombstone, not never written)
  std::string value;
};

class World {
 public:
  std::mutex mu;
  IndexParams p;
  Key keys[kKeys];
  std::vector<Loc> locs;
  // The GET in flight (the oracle) and the plan to run inside it.
  bool in_get = false;
  int get_key = 0;
  std::vector<std::string> allowed;  // values the key had at some instant of the GET
  bool absent_ok = false;            // the key was absent at some instant of the GET
  // The point the plan runs at: 1..127, the n-th point of the GET (before
  // each READ, between two chunks of one); 128 + n, before its READ n % 8 + 1
  // (the second: a window round's entry READ, or a cached GET's entry READ);
  // 0: none.
  int fire_at = 0, hook_calls = 0, reads = 0;
  std::string plan;

  uint8_t* Log() { return N().mem.data() + kLogAt; }
  uint8_t* Index() { return N().mem.data() + kIndexAt; }

  // False if [off, off + n) is outside the log or overlaps an entry a word
  // names now (the server never writes there).
  bool Writable(uint64_t off, size_t n) const {
    if (n == 0 || off + n > kLogBytes) return false;
    for (const Loc& l : locs) {
      if (l.named && off < l.off + l.bytes && l.off < off + n) return false;
    }
    return true;
  }
  // The reuse rule: bytes a word named are rewritten only a grace period
  // after it stopped naming them. Between GETs no READ is in flight, so the
  // wait changes nothing a reader can see: only a GET in flight waits.
  void WaitReuse(uint64_t off, size_t n) const {
    if (!in_get) return;
    RoundClock::time_point latest{};
    for (const Loc& l : locs) {
      if (!l.named && off < l.off + l.bytes && l.off < off + n) latest = std::max(latest, l.unnamed_at);
    }
    while (RoundClock::now() < latest + kGrace) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  void PutBytes(uint64_t off, const void* b, size_t n) {
    WaitReuse(off, n);
    std::memcpy(Log() + off, b, n);
  }
  void Remember(Loc l) {
    if (locs.size() >= kMaxLocs) {  // not reached (kMaxLocs): forget the one unnamed longest ago
      auto oldest = locs.end();
      for (auto it = locs.begin(); it != locs.end(); ++it) {
        if (!it->named && (oldest == locs.end() || it->unnamed_at < oldest->unnamed_at)) oldest = it;
      }
      if (oldest != locs.end()) locs.erase(oldest);
    }
    locs.push_back(l);
  }
  // The write of a PUT (tombstone: DELETE) of key k whose entry the server
  // placed at `off`: as Store::Write does it, the entry first (written
  // unpublished), then the key's word, then the entry published (its
  // NOT-CURRENT bit cleared) and the superseded one marked NOT-CURRENT.
  // A hook runs between two chunks of a READ, so a READ sees all of it or
  // none of it; that order matters only to readers between GETs (none).
  void Write(int k, uint64_t off, const std::string& value, bool tombstone) {
    const std::string_view key = kKeyNames[k];
    const size_t n = EntryBytes(key.size(), value.size());
    if (!Writable(off, n)) return;
    std::byte buf[EntryBytes(16, kMaxValue)];
    if (EncodeEntry({buf, n}, off, key, value, tombstone, kSeed) != n) std::abort();
    PutBytes(off, buf, n);
    for (Loc& l : locs) {
      if (l.named && l.key == k) {
        l.named = false;
        l.unnamed_at = RoundClock::now();
        uint64_t g;
        std::memcpy(&g, Log() + l.off + GuardAt(l.off), 8);
        g |= kGuardNotCurrentBit;
        std::memcpy(Log() + l.off + GuardAt(l.off), &g, 8);
      }
    }
    const uint64_t ref = PackRef(keys[k].fingerprint, SizeClassFor(n), off);
    std::memcpy(Index() + keys[k].word * kWordBytes, &ref, 8);
    Remember({off, static_cast<uint32_t>(n), k, static_cast<uint32_t>(value.size()), true, {}});
    keys[k].present = !tombstone;
    keys[k].value = value;
    if (in_get && k == get_key) {
      if (tombstone) {
        absent_ok = true;
      } else {
        allowed.push_back(value);
      }
    }
  }
  // A stale location, the most recently unnamed first.
  const Loc* Stale(uint8_t which) const {
    std::vector<const Loc*> s;
    for (const Loc& l : locs) {
      if (!l.named) s.push_back(&l);
    }
    if (s.empty()) return nullptr;
    std::sort(s.begin(), s.end(), [](const Loc* a, const Loc* b) { return a->unnamed_at > b->unnamed_at; });
    return s[which % s.size()];
  }
  const Loc* Named(int k) const {
    for (const Loc& l : locs) {
      if (l.named && l.key == k) return &l;
    }
    return nullptr;
  }

  // One action of the input. Ops: 0 PUT, 1 DELETE, 2 relocate (the cleaner
  // moves the key's entry: same value, new offset), 3 an entry image, 4 raw
  // bytes, 5 a relocation and an image where the key was; 3 and 4 land at a
  // stale location or at any offset: what another client's value may put
  // there once the segment is reused.
  void Act(Reader& r) {
    const uint8_t op = r.U8() % 6;
    const int k = r.U8() % kKeys;
    switch (op) {
      case 0: {
        const uint64_t off = 4 * (r.U16() % (kLogBytes / 4));
        return Write(k, off, r.Bytes(r.U8() % (kMaxValue + 1)), false);
      }
      case 1: return Write(k, 4 * (r.U16() % (kLogBytes / 4)), std::string(), true);
      case 2: {
        const uint64_t off = 4 * (r.U16() % (kLogBytes / 4));
        const Loc* cur = Named(k);
        if (cur != nullptr) Write(k, off, keys[k].value, !keys[k].present);
        return;
      }
      case 3: {
        // flags: 1 tombstone image, 2 laid out for the other parity, 4 the
        // size of the stale entry it lands on, 8 at any offset (else a stale
        // location, `which`), 16 shifted 4 bytes past that location.
        const uint8_t flags = r.U8(), which = r.U8();
        const uint16_t any = r.U16();
        std::string v = r.Bytes(r.U8() % (kMaxValue + 1));
        uint64_t off = 4 * (any % (kLogBytes / 4));
        const Loc* at = (flags & 8) == 0 ? Stale(which) : nullptr;
        if ((flags & 8) == 0 && at == nullptr) return;
        if (at != nullptr) off = at->off + ((flags & 16) != 0 ? 4 : 0);
        const bool tombstone = (flags & 1) != 0;
        if (tombstone) v.clear();
        if (!tombstone && (flags & 4) != 0 && at != nullptr) {
          const std::string_view key = kKeyNames[k];
          // The same entry size as the stale one: a value length that makes it so.
          const size_t body = at->bytes - kEntryHeaderBytes;
          if (body >= key.size() && body - key.size() <= kMaxValue) v.resize(body - key.size(), '#');
        }
        const std::string_view key = kKeyNames[k];
        const size_t n = EntryBytes(key.size(), v.size());
        if (!Writable(off, n)) return;
        std::byte buf[EntryBytes(16, kMaxValue)];
        if (EncodeEntry({buf, n}, off ^ ((flags & 2) != 0 ? 4 : 0), key, v, tombstone, kSeed) != n) std::abort();
        return PutBytes(off, buf, n);
      }
      case 4: {
        const uint8_t which = r.U8();
        const std::string b = r.Bytes(r.U8() % 33);
        const Loc* at = Stale(which);
        const uint64_t off = at != nullptr ? at->off : 4 * (which % (kLogBytes / 4));
        if (Writable(off, b.size())) PutBytes(off, b.data(), b.size());
        return;
      }
      case 5: {
        // 2 and 3 in one: the key moves (the cleaner relocates it) and its
        // old location gets an image sized like the entry that was there
        // (flags: 1 a tombstone image, 2 of the next key, 4 laid out for the
        // other parity), or as close as the image's key allows.
        const uint8_t flags = r.U8();
        const uint64_t to = 4 * (r.U16() % (kLogBytes / 4));
        std::string v = r.Bytes(r.U8() % (kMaxValue + 1));
        const Loc* cur = Named(k);
        if (cur == nullptr) return;
        const Loc old = *cur;
        Write(k, to, keys[k].value, !keys[k].present);
        if (Named(k) == nullptr || Named(k)->off == old.off) return;  // not moved
        const std::string_view key = kKeyNames[(k + ((flags & 2) != 0 ? 1 : 0)) % kKeys];
        const bool tombstone = (flags & 1) != 0;
        const size_t body = old.bytes - kEntryHeaderBytes;
        if (tombstone) {
          v.clear();
        } else if (body >= key.size() && body - key.size() <= kMaxValue) {
          v.resize(body - key.size(), '#');
        }
        const size_t n = EntryBytes(key.size(), v.size());
        if (!Writable(old.off, n)) return;
        std::byte buf[EntryBytes(16, kMaxValue)];
        if (EncodeEntry({buf, n}, old.off ^ ((flags & 4) != 0 ? 4 : 0), key, v, tombstone, kSeed) != n) std::abort();
        return PutBytes(old.off, buf, n);
      }
    }
  }
};

std::atomic<World*> g_world{nullptr};

// KVRDMA_FUZZ_VERBOSE=1: a line per GET (to see what a seed does).
bool Verbose() {
  static const bool v = std::getenv("KVRDMA_FUZZ_VERBOSE") != nullptr;
  return v;
}

// The points where a GET's plan may run (on the fabric's thread, while the
// client waits): before each of its READs executes (LoopbackFaults::fail_wr,
// which fails nothing here) and between any two 8-byte chunks of one
// (between_read_chunks); the input chooses the point by its number.
void AtPoint(bool before_read) {
  World* w = g_world.load();
  if (w == nullptr) return;
  std::lock_guard<std::mutex> g(w->mu);
  if (!w->in_get || w->fire_at == 0) return;
  ++w->hook_calls;
  w->reads += before_read;
  if (w->fire_at < 128 ? w->hook_calls != w->fire_at : !before_read || w->reads != w->fire_at % 8 + 1) return;
  Reader r{reinterpret_cast<const uint8_t*>(w->plan.data()), w->plan.size()};
  for (int i = 0; i < 4 && !r.Done(); ++i) w->Act(r);
}

// The server's side of the connection: accept every connect (the client's
// retried one, its reconnects) with a descriptor of the world's regions.
void Serve(Listener& l, const IndexParams& p, std::atomic<bool>& stop) {
  Net& n = N();
  std::vector<std::unique_ptr<Connection>> conns;
  while (!stop.load()) {
    auto ev = l.NextEvent(5);
    if (!ev.ok() || ev->type != CmEvent::Type::kConnectRequest) continue;
    ServerDescriptor d;
    d.conn_id = 1;
    d.index = {n.mr->base() + kIndexAt, IndexWords(p.home_count, p.window_words) * kWordBytes, n.mr->rkey()};
    d.index_homes = p.home_count;
    d.index_window = static_cast<uint16_t>(p.window_words);
    d.hash_seed = kSeed;
    d.log = {n.mr->base() + kLogAt, kLogBytes, n.mr->rkey()};
    d.locks = {n.mr->base() + kLocksAt, 9 * 8, n.mr->rkey()};
    d.ring = {n.mr->base() + kRingAt, kCredits * kMessageBytes, n.mr->rkey()};
    d.message_bytes = kMessageBytes;
    d.credits = kCredits;
    d.max_key_bytes = 64;
    d.max_value_bytes = 4096;
    d.round_limit_us = kRoundLimitUs;
    d.lock_words = 8;
    uint8_t buf[kMaxAcceptData];
    const size_t len = EncodeServerDescriptor(d, buf);
    QpConfig qc;
    qc.max_inline = 256;
    auto c = ev->request->Accept(qc, {buf, len});
    if (c.ok()) conns.push_back(std::move(c).value());
  }
}

// One World for the process: a READ of a GET that timed out may still run
// its hook after Run returns (it finds in_get false and does nothing).
World& TheWorld() {
  static World* w = new World;
  return *w;
}

int Run(const uint8_t* data, size_t size) {
  Reader r{data, size};
  World& w = TheWorld();
  {
    std::lock_guard<std::mutex> g(w.mu);
    w.in_get = false;
    w.locs.clear();
    for (Key& k : w.keys) k = Key{};
  }
  w.p.home_count = uint64_t{1} << (r.U8() % 3);
  w.p.window_words = 3 + r.U8() % 6;
  w.p.seed = kSeed;
  w.p.log_bytes = kLogBytes;
  const bool descending = (r.U8() & 1) != 0;
  Net& n = N();
  std::memset(n.mem.data(), 0, kLocksAt);
  // Each key in a word of its window that no other key took.
  std::vector<bool> taken(IndexWords(w.p.home_count, w.p.window_words), false);
  for (int k = 0; k < kKeys; ++k) {
    const KeyHash kh = MakeKeyHash(kKeyNames[k], kSeed, w.p.home_count);
    w.keys[k].fingerprint = kh.fingerprint;
    uint64_t j = kh.home;
    while (taken[j]) ++j;  // 3 keys, windows of 3 or more words: always within the window
    taken[j] = true;
    w.keys[k].word = j;
  }
  LoopbackFaults f;
  f.read_chunk_bytes = 8;
  f.read_descending = descending;
  f.between_read_chunks = [](const SendWr&, size_t) { AtPoint(false); };
  f.fail_wr = [](const SendWr&) {
    AtPoint(true);
    return WcStatus::kSuccess;
  };
  n.fabric->SetFaults(std::move(f));

  auto l = n.server->Listen("", 0, 4);
  if (!l.ok()) std::abort();
  std::atomic<bool> stop{false};
  std::thread srv([&] { Serve(**l, w.p, stop); });
  {
    ClientOptions o;
    o.host = "loopback";
    o.port = (*l)->port();
    o.op_timeout_ms = 300;
    o.connect_timeout_ms = 2000;
    o.location_cache_entries = 64;
    // A loaded machine may stall a connect: try again before calling the
    // target broken (it would test nothing without one).
    auto c = ClientFactory::ConnectWith(n.client, o);
    for (int i = 0; i < 3 && !c.ok(); ++i) c = ClientFactory::ConnectWith(n.client, o);
    if (!c.ok()) {
      std::fprintf(stderr, "fuzz_read_path: connect failed: %s\n", c.status().ToString().c_str());
      std::abort();
    }
    g_world.store(&w);
    for (int cmd = 0; cmd < 32 && !r.Done(); ++cmd) {
      // 0..5: an action between GETs (Act reads that byte as its op); 6: a GET.
      if (r.p[r.i] % 7 != 6) {
        std::lock_guard<std::mutex> g(w.mu);
        w.Act(r);
        continue;
      }
      r.U8();
      const int k = r.U8() % kKeys;
      {
        std::lock_guard<std::mutex> g(w.mu);
        w.in_get = true;
        w.get_key = k;
        w.allowed.clear();
        if (w.keys[k].present) w.allowed.push_back(w.keys[k].value);
        w.absent_ok = !w.keys[k].present;
        w.hook_calls = 0;
        w.reads = 0;
        w.fire_at = r.U8();
        w.plan = r.Bytes(r.U8() % 64);
      }
      std::string v;
      const Status st = (*c)->Get(kKeyNames[k], &v);
      std::lock_guard<std::mutex> g(w.mu);
      w.in_get = false;
      if (Verbose()) {
        const ClientStats cs = (*c)->stats();
        std::fprintf(stderr, "[world] GET %s: %s%s%s (point %d of %d; cache hits %llu, stale %llu, retries %llu)\n",
                     std::string(kKeyNames[k]).c_str(), st.ToString().c_str(), st.ok() ? " " : "",
                     st.ok() ? v.c_str() : "", w.fire_at, w.hook_calls,
                     static_cast<unsigned long long>(cs.cache_hits), static_cast<unsigned long long>(cs.cache_stale),
                     static_cast<unsigned long long>(cs.get_retries));
      }
      if (st.ok() && std::find(w.allowed.begin(), w.allowed.end(), v) == w.allowed.end()) {
        std::fprintf(stderr,
                     "fuzz_read_path: GET %s returned a value (%zu bytes) that the key did not have while the GET "
                     "ran (%zu values it had)\n",
                     std::string(kKeyNames[k]).c_str(), v.size(), w.allowed.size());
        std::abort();
      }
      if (st.IsNotFound() && !w.absent_ok) {
        std::fprintf(stderr, "fuzz_read_path: GET %s answered NotFound, but the key was present throughout the GET\n",
                     std::string(kKeyNames[k]).c_str());
        std::abort();
      }
    }
    g_world.store(nullptr);
  }
  stop.store(true);
  srv.join();
  return 0;
}

}  // namespace world

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kvrdma::SetLogLevel(kvrdma::LogLevel::kOff);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 1 && data[0] == 0xFF) return world::Run(data + 1, size - 1);
  if (size < 4) return 0;
  // Layout of the input: [home count exponent][window words - 1][key length | 0x80: entry at 4 mod 8][key]
  // [window][entry bytes].
  kvrdma::IndexParams p;
  p.home_count = uint64_t{1} << (data[0] % 41);
  p.window_words = 1 + data[1] % kvrdma::kMaxWindowWords;
  p.seed = 0x1234;
  p.log_bytes = uint64_t{1} << 30;
  size_t klen = 1 + data[2] % 64;
  size_t off = 3;
  if (size < off + klen) return 0;
  std::string_view key(reinterpret_cast<const char*>(data + off), klen);
  off += klen;
  auto kw = kvrdma::KeyWindowRead(p, key);
  if (!kw.ok()) std::abort();  // valid parameters and key always give a READ
  const uint64_t index_bytes = kvrdma::IndexWords(p.home_count, p.window_words) * kvrdma::kWordBytes;
  if (kw->read.offset + kw->read.length > index_bytes || kw->read.length != p.window_words * 8) std::abort();
  if (size < off + kw->read.length) return 0;
  const std::span<const std::byte> window(reinterpret_cast<const std::byte*>(data + off), kw->read.length);
  kvrdma::WindowProbe probe;
  if (!kvrdma::ProbeWindow(window, kw->hash, p, &probe).ok()) std::abort();  // a well-sized window always probes
  off += kw->read.length;
  std::span<const std::byte> entry(reinterpret_cast<const std::byte*>(data + off), size - off);
  int candidates = 0;
  // No candidate: an entry ref whose size class agrees with the header's lengths
  // (exact or coarse), so the fuzzer reaches the checksum and key checks.
  // The entry's offset decides where its header's words sit (entry.h).
  const uint64_t entry_off = (data[2] & 0x80) != 0 ? 4 : 0;
  uint64_t code = kvrdma::kMinSizeClass;
  if (entry.size() >= kvrdma::kEntryHeaderBytes) {
    uint32_t lengths;
    std::memcpy(&lengths, entry.data() + kvrdma::LengthsAt(entry_off), sizeof(lengths));
    code = kvrdma::SizeClassFor(kvrdma::EntryBytes(kvrdma::LengthsKey(lengths), kvrdma::LengthsValue(lengths)));
    code = std::clamp(code, kvrdma::kMinSizeClass, kvrdma::kMaxSizeClass);
  }
  uint64_t ref = kvrdma::PackRef(kw->hash.fingerprint, code, entry_off);
  for (int w = kvrdma::NextCandidate(probe, 0); w >= 0; w = kvrdma::NextCandidate(probe, w + 1), ++candidates) {
    if (w >= static_cast<int>(p.window_words)) std::abort();
    const kvrdma::Candidate c = kvrdma::CandidateAt(window, w, p);
    if (c.entry.offset + c.entry.length > p.log_bytes || kvrdma::WordTag(c.ref) != 0) std::abort();
    if (c.entry.length > kvrdma::SizeClassBytes(kvrdma::kMaxSizeClass)) std::abort();
    if (candidates == 0) ref = c.ref;
  }
  if (candidates != probe.count) std::abort();
  for (bool current : {false, true}) {
    kvrdma::EntryView v = kvrdma::DecodeEntry(entry, key, ref, p.seed, current);
    if (v.verdict == kvrdma::EntryVerdict::kValue || v.verdict == kvrdma::EntryVerdict::kTombstone) {
      CheckIsTheEntry(entry, kvrdma::RefLogOffset(ref), key, p.seed, v.verdict == kvrdma::EntryVerdict::kTombstone,
                      v.value);
    }
    if (v.verdict == kvrdma::EntryVerdict::kValue) {
      if (!v.value.empty() && (v.value.data() < entry.data() || v.value.data() + v.value.size() > entry.data() + entry.size())) {
        std::abort();
      }
      if (current && v.superseded) std::abort();
      // One READ's bytes: the entry lies within them and its length maps to the ref's size class.
      if (v.total_bytes > entry.size() || kvrdma::SizeClassFor(v.total_bytes) != kvrdma::RefSizeClass(ref)) {
        std::abort();
      }
    }
    // Into a buffer (a GET into the caller's memory, client_impl.h): the same
    // verdict and value bytes, copied into the buffer in the checksum's pass
    // from kFusedCopyMinBytes on.
    std::vector<std::byte> out(entry.size());
    kvrdma::EntryView u = kvrdma::DecodeEntryInto(entry, key, ref, p.seed, current, out);
    if (u.verdict != v.verdict) std::abort();
    if (u.verdict == kvrdma::EntryVerdict::kValue &&
        (u.value.size() != v.value.size() ||
         (u.value.size() >= kvrdma::kFusedCopyMinBytes && u.value.data() != out.data()) ||
         (!u.value.empty() && std::memcmp(u.value.data(), v.value.data(), u.value.size()) != 0))) {
      std::abort();
    }
    // The same bytes in two pieces (a direct READ: client_get.cc), cut where
    // the input says within header and key (the client cuts right after the
    // key): where the bytes hold the whole entry, the same verdict and the
    // same value bytes; a value only after the same checks.
    const size_t cut =
        std::min<size_t>(entry.size(), kvrdma::kEntryHeaderBytes + std::min<size_t>(data[1] % 64, key.size()));
    const std::span<const std::byte> all(entry);
    kvrdma::EntryView w = kvrdma::DecodeEntry(all.first(cut), all.subspan(cut), key, ref, p.seed, current);
    if (v.verdict != kvrdma::EntryVerdict::kMalformed && w.verdict != v.verdict) std::abort();
    if (w.verdict == kvrdma::EntryVerdict::kValue || w.verdict == kvrdma::EntryVerdict::kTombstone) {
      CheckIsTheEntry(entry, kvrdma::RefLogOffset(ref), key, p.seed, w.verdict == kvrdma::EntryVerdict::kTombstone,
                      w.value);
    }
    if (w.verdict == kvrdma::EntryVerdict::kValue && v.verdict == kvrdma::EntryVerdict::kValue &&
        (w.value.data() != v.value.data() || w.value.size() != v.value.size())) {
      std::abort();
    }
  }
  if (probe.tag_matched && kvrdma::MissIsProven(probe, true)) std::abort();
  return 0;
}
