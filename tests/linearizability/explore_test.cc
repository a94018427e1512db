// Schedule exploration (issue 13): many short random schedules, each from its
// own seed, against a store built to recycle memory under cached locations,
// every history checked for linearizability.
//
// Per seed: a tiny index (11 to 28 usable words for up to 39 keys, windows
// that overlap so that hops and move tags are common: PUTs of new keys
// answered ServerFull; for half the fault seeds READs are copied a word at a
// time, last word first), 4 KiB log segments (8 to 12 of them: little room
// beyond the live data, so a freed segment is reused soon), a 2 ms grace
// period, the cleaner run by the driver at points the seed chooses (no
// cleaner thread), store or cache mode (evictions enter the history as
// DELETEs), and a shape of key and value sizes that makes log offsets repeat
// across the reuses of a segment (every other seed "wide": 1016-byte
// entries, 4 per segment). Three clients with the location cache on keep up
// to 3 operations each in flight (client 0 is a slow reader whose cached
// locations outlive reuses); a single driver thread chooses, from the seed,
// what happens next: submit a GET / a same-size PUT / a DELETE (often of an
// absent key) on one of 1-3 hot keys or one of 36 fillers (a third of the
// filler PUTs carry forged entry images of hot keys, ForgedValue), poll a
// client, run the cleaner, wait out the grace period, or (half the seeds)
// break a connection (its operations in flight end unknown; the client
// reconnects and drops its cache). PUTs answered ServerFull changed nothing
// and are left out of the history. In half the seeds client 1 sends every
// PUT as a rendezvous PUT: the server READs the value into its place in the
// log, and the loopback NIC answers those READs 0 to 2.1 ms late (the seed
// chooses), while the worker's head moves on and the cleaner runs; half of
// those values come from memory client 1 registered (a slot per pending
// operation), sent over the value registrations the client keeps from one
// PUT of a slot to the next while the slot's bytes change. After each
// seed the store's index is checked (Store::CheckIndex: every ref names a
// current entry of its key in a segment in use), which shows what no GET
// happened to look at. With the segment pin taken out (tests/putback/run
// 26.pin-x: the cleaner claims a segment whose value is still arriving)
// runs of 200 seeds from 1, 201 and 401 failed at seeds 5, 277 and 405.
//
// One seed in sixteen has the "big" shape: hot entries longer than a GET's
// own 16 KiB buffer. Their READs take ranges of the client's large buffer
// (room for two: GETs wait for room in turn), are cached once two GETs find
// the same ref, and half of client 2's GETs READ the value straight into its
// registered memory. With every large READ at the start of the large buffer
// (tests/putback/run 26.ranges-x) 11 of big seeds 1-80 found a violation
// (the first at seed 10); with cached large READs holding no range
// (26.cached-large-x) 19 of 80 (the first at seed 2).
//
// It found the bug of issue 13 finding 1 (no bug since issue 25: no GET
// relies on the NOT-CURRENT bit now): with entries born current again (the fix reverted in Store::WriteEntry), and no
// forged values, 29 violations in 632 seeds (4.6 %), at most 84 seeds apart,
// the first after 7 to 29 seeds in five runs from seed 1 ("a GET returned a
// value no PUT of this key wrote": a ServerFull leftover under a cached
// location); format 4's shapes in format 5 found it after 235, 246 and 55
// seeds. With forged values (KVRDMA_EXPLORE_FORGE=1) it finds issue 25
// item 1 on 494e690 (a cached GET returns a forged image, value "#.."): 20
// times in seeds 1..198, at most 39 seeds apart; tests/putback/run 25.1x
// puts that bug back.
//
// The driver's choices are a function of the seed; the server's worker
// threads and the loopback transport's completion order are not, so a seed
// reproduces a schedule closely but not always exactly. On a violation the
// seed, the minimized history and the file with the whole history are
// printed; KVRDMA_EXPLORE_SEED=<seed> runs just that seed.
//
// KVRDMA_EXPLORE_SEEDS (default: 200 in the unit form, 2000 in the "explore"
// form; ctest sets it per label; or a range, "13-18"), KVRDMA_EXPLORE_FIRST
// (first seed, 1),
// KVRDMA_EXPLORE_STEPS (steps per seed, 1500), KVRDMA_EXPLORE_SHAPE (0..5:
// force one shape), KVRDMA_EXPLORE_FORGE (1: forged values; the default is
// the build's KVRDMA_EXPLORE_FORGE_DEFAULT, 1),
// KVRDMA_EXPLORE_RENDEZVOUS (1: client 1's PUTs are rendezvous PUTs in
// every seed, 0: in none; default: seeds whose (seed / 2) is even),
// KVRDMA_EXPLORE_THREADS (schedules run at once: default 4 over loopback,
// 1 over verbs), KVRDMA_EXPLORE_VERBOSE=1 (a line per seed).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "common/format/entry.h"
#include "server/store/entry_leader.h"
#ifndef KVRDMA_EXPLORE_FORGE_DEFAULT
#define KVRDMA_EXPLORE_FORGE_DEFAULT 1  // tests/linearizability/CMakeLists.txt sets it
#endif
#include "tests/e2e/e2e_util.h"
#include "tests/linearizability/checker.h"

namespace kvrdma::testing {
namespace {

uint64_t EnvOr(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : def;
}

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

constexpr int kClients = 3;
constexpr int kDepth = 3;
constexpr int kFillerKeys = 36;   // other keys ("f0".."fz") that fill the index and the log
// Key and value sizes are chosen so that log offsets repeat across the reuses
// of a segment: every entry is a multiple of one grid unit, the size of a
// tombstone (entries are 4-aligned with a 12-byte header, entry.h), so every
// entry of every use starts on the same grid, and an entry of a key often
// lands exactly where an older entry of the same key was. Keys are a 2-byte
// name ("h0", "f7") padded to key_bytes (5 = 1 mod 4: a tombstone's 17 bytes
// round up to 20, the size of an entry with a 3-byte value too). Per seed,
// one of these shapes:
//   small: every entry is 20 bytes (3-byte values, and tombstones): every
//          grid offset of a segment holds the start of an entry in every use;
//   mixed: hot values 20-byte entries, filler values 400 (20 x 20) bytes;
//   large: every value entry is 400 bytes, tombstones 20;
//   wide:  1001-byte keys, 3-byte values: every entry, tombstones included,
//          is 1016 bytes, 4 per segment, and segments are reused constantly;
//   half:  493-byte keys, 3-byte values: every entry is 508 bytes, 8 per
//          segment.
// (Format 4's shapes, 24-byte entries with a 16-byte header, no longer lined
// up in format 5: tombstones were 16 bytes and values 20, so the grids of two
// uses differed and the issue-13 bug was found once per ~300 seeds.)
//   big:   hot values of 19,575 bytes (19,600 with the leader: 700 grid
//          steps), fillers of 3: each hot entry is longer than a GET's own
//          16 KiB buffer, so its READ takes a range of the client's large
//          buffer (room for two such entries: GETs wait for room), or goes
//          straight into client 2's registered memory (a direct READ, half its
//          GETs); large locations are cached once confirmed. 64 KiB segments
//          (3 hot entries each), so that the grid still repeats.
struct Shape {
  const char* name;
  size_t key_bytes, hot_value_bytes, filler_value_bytes;
  // Log segments of segment_bytes (4 KiB but for "big"): room for the live
  // data (up to 28 words), the three heads and the cleaner's reserve, and
  // little more, so that a segment is reused soon after it is freed.
  uint64_t segments;
  uint64_t segment_bytes = 4096;
  // The server's limit: room for a forged value (ForgedValue) of the shape.
  size_t max_value_bytes = 1100;
};
constexpr Shape kShapes[] = {{"small", 5, 3, 3, 8},      {"mixed", 5, 3, 367, 8}, {"large", 5, 367, 367, 8},
                             {"wide", 1001, 3, 3, 12}, {"half", 489, 3, 3, 10},
                             {"big", 5, 19575, 3, 10, 64 << 10, 40000}};
constexpr uint64_t kBigShape = 5;
// Each write takes its leader and its entry (LogBytes): the grid is that of
// the shape's smallest write, and every write of a shape is a whole number of
// grid steps, so entries land at the same offsets of every segment.
static_assert(LogBytes(5, 0) == 28 && LogBytes(5, 3) == 28 && LogBytes(5, 367) == 28 * 14);
static_assert(LogBytes(1001, 0) == 1024 && LogBytes(1001, 3) == 1024 && 4096 % 1024 == 0);
static_assert(LogBytes(489, 0) == 512 && LogBytes(489, 3) == 512 && 4096 % 512 == 0);
static_assert(LogBytes(5, 19575) == 28 * 700 && EntryBytes(5, 19575) > (16 << 10));

// A value unique in its schedule: the sequence number `n` in base 62 at the
// end (3 characters: 238,328 values), the client's letter first if longer.
void UniqueValue(std::string* v, size_t len, int client, uint64_t n) {
  static constexpr char k62[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  v->assign(len, '0');
  for (size_t i = len; i > 0 && n != 0; n /= 62) (*v)[--i] = k62[n % 62];
  if (len > 4) (*v)[0] = static_cast<char>('A' + client);
}

// A forged value (issue 25 item 1): after a lead of (grid - 12 - key) bytes,
// so that the value ends on the grid, complete checksummed entry images of
// hot keys (NOT-CURRENT clear: a value "#.." no PUT wrote, or a tombstone),
// back to back, each laid out for the parity its offset has when the forged
// entry itself starts at a log offset of parity `parity` (0 or 4). A filler
// PUT of it that lands in a reused segment puts an image of a hot key at the
// grid offsets it covers: where a stale cached location of that key may
// point.
template <typename Pick>
std::string ForgedValue(const Shape& shape, int hot_keys, uint64_t parity, uint64_t hash_seed, Pick&& pick) {
  // A write at grid step j has its entry at j * grid + kLeaderBytes; the
  // forged value's images sit at the entry offsets of the following steps,
  // each after kLeaderBytes of padding where a real write's leader would be.
  const size_t grid = LogBytes(shape.key_bytes, 0);
  const size_t lead = grid - kEntryHeaderBytes - shape.key_bytes;
  const size_t value_image = EntryBytes(shape.key_bytes, shape.hot_value_bytes);
  static_assert(kLeaderBytes == 8);
  // About as large as a filler value of the mixed shape (at least one image).
  const size_t want = lead + value_image + pick(401);
  std::string v(lead, '#');
  while (v.size() + value_image <= want || v.size() == lead) {
    const bool tombstone = pick(4) == 0;
    const size_t n = tombstone ? EntryBytes(shape.key_bytes, 0) : value_image;
    const size_t pad = v.size() == lead ? 0 : kLeaderBytes;  // where the image's leader would be
    if (v.size() + pad + n > shape.max_value_bytes) break;
    v.append(pad, '#');
    std::string key = "h" + std::to_string(pick(hot_keys));
    key.resize(shape.key_bytes, 'k');
    // "#" and digits: no PUT's value (UniqueValue writes no '#').
    std::string forged = tombstone ? std::string() : std::string(shape.hot_value_bytes, '#');
    for (size_t i = 1; i < forged.size() && i < 4; ++i) forged[i] = static_cast<char>('0' + pick(10));
    const uint64_t off = parity + kEntryHeaderBytes + shape.key_bytes + v.size();  // the image's log offset
    const size_t at = v.size();
    v.resize(at + n);
    const size_t wrote = EncodeEntry({reinterpret_cast<std::byte*>(v.data() + at), n}, off, key, forged, tombstone, hash_seed);
    EXPECT_EQ(wrote, n);
  }
  EXPECT_EQ((kLeaderBytes + kEntryHeaderBytes + shape.key_bytes + v.size()) % grid, 0u);
  return v;
}

struct Pending {
  Op op;
  std::string key, value, result;
  bool into_buffer = false;  // a GET into client 2's registered memory (big shape)
  uint64_t invoke_ns = 0;
  bool busy = false;
};

struct ExploreStats {
  uint64_t ops = 0, server_full = 0, unknown = 0, cache_hits = 0, cache_stale = 0, cleaner_passes = 0,
           reconnects = 0, segments_cleaned = 0, evictions = 0, index_moves = 0, miss_rounds = 0, forged_puts = 0,
           rendezvous_puts = 0, rendezvous_registrations = 0, rendezvous_copies = 0, large_values = 0,
           direct_reads = 0;
  ExploreStats& operator+=(const ExploreStats& o) {
    ops += o.ops, server_full += o.server_full, unknown += o.unknown, cache_hits += o.cache_hits;
    cache_stale += o.cache_stale, cleaner_passes += o.cleaner_passes, reconnects += o.reconnects;
    segments_cleaned += o.segments_cleaned, evictions += o.evictions, index_moves += o.index_moves;
    miss_rounds += o.miss_rounds, forged_puts += o.forged_puts, rendezvous_puts += o.rendezvous_puts;
    rendezvous_registrations += o.rendezvous_registrations, rendezvous_copies += o.rendezvous_copies;
    large_values += o.large_values, direct_reads += o.direct_reads;
    return *this;
  }
};

// The seed's shape (an index into kShapes): every other seed is "wide" (its
// segments are reused fastest, at the fewest offsets), one in four "half",
// one in sixteen "big", the rest small, mixed or large.
uint64_t ShapeOf(uint64_t seed) {
  const uint64_t q = (seed / 4) % 4;
  return EnvOr("KVRDMA_EXPLORE_SHAPE", seed % 2 == 1 ? 3 : seed % 4 == 2 ? 4 : q == 3 ? kBigShape : q) %
         std::size(kShapes);
}

// One schedule. Returns the history (hot keys only) and counts into *st.
lin::History RunSchedule(Kind kind, uint64_t seed, uint64_t steps, ExploreStats* st) {
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return static_cast<uint64_t>(rng() % n); };
  TransportEnv env = TransportEnv::Make(kind);
  const uint64_t shape_pick = ShapeOf(seed);
  const Shape shape = kShapes[shape_pick];
  const int hot_keys = 1 + static_cast<int>(pick(3));  // keys the history is about ("h0".."h2")
  const bool cache_mode = pick(4) == 0;
  // Index shapes (homes x window): 11 to 28 usable words for up to 39 keys,
  // often full; windows that overlap make hops (and their move tags) common.
  struct IndexShape {
    uint64_t homes, window;
  };
  constexpr IndexShape kIndexShapes[] = {{1, 14}, {1, 28}, {4, 8}, {8, 8}, {8, 16}, {16, 4}};
  const IndexShape index = kIndexShapes[pick(std::size(kIndexShapes))];
  const bool faults = kind == Kind::kLoopback && pick(2) == 0;
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 2;
  cfg.max_key_bytes = 1023;
  cfg.max_value_bytes = shape.max_value_bytes;
  cfg.grace_period_ms = 2;
  // Evictions (cache mode) of hot keys enter the history as DELETEs.
  auto evicted = std::make_shared<std::pair<std::mutex, lin::History>>();
  // The eviction's interval: from just before the key's word is cleared to
  // just after (both under the key's window lock, on the evicting thread).
  // It was [before, before + 100 us] until a Soft-RoCE run (CI, 9d605b9,
  // seed 4) found a GET that started 218 us after `before` still reading
  // the value: the evicting thread had not cleared the word yet.
  static thread_local uint64_t evict_start_ns = 0;
  TestServer server(env, cfg, [&](StoreConfig& sc) {
    sc.on_evict = [](std::string_view) { evict_start_ns = NowNs(); };
    sc.on_evicted = [evicted](std::string_view key) {
      if (key.empty() || key[0] != 'h') return;
      lin::HistoryOp ho;
      ho.client = 999;
      ho.key = std::string(key.substr(0, 2));
      ho.type = lin::OpType::kDelete;
      ho.outcome = lin::Outcome::kOk;
      ho.invoke_ns = evict_start_ns;
      ho.complete_ns = NowNs();
      std::lock_guard<std::mutex> g(evicted->first);
      evicted->second.push_back(std::move(ho));
    };
    sc.cleaner_thread = false;
    sc.index_homes = index.homes;
    sc.index_window = index.window;
    sc.segment_bytes = shape.segment_bytes;
    sc.log_bytes = shape.segments * shape.segment_bytes;
    sc.full_wait = std::chrono::milliseconds(1);
    sc.min_free_segments = 4;
    sc.mode = cache_mode ? CapacityMode::kCache : CapacityMode::kStore;
  });
  // The driver decides when; the next WR anyone posts fails (breaking its
  // QP). Shared: the fabric may outlive this scope.
  auto break_next = std::make_shared<std::atomic<bool>>(false);
  LoopbackFaults f;
  if (faults) {
    f.fail_wr = [break_next](const SendWr&) {
      return break_next->exchange(false) ? WcStatus::kRetryExceeded : WcStatus::kSuccess;
    };
    // READs copied a word at a time, last word first, yielding in between:
    // a window READ then reads a hop's destination (higher) before its
    // source, the order that would show a moved key nowhere without the
    // move tag (DESIGN.md, "Misses while entry refs move").
    if (pick(2) == 0) {
      f.read_chunk_bytes = 8;
      f.read_descending = true;
      f.between_read_chunks = [](const SendWr&, size_t) { std::this_thread::yield(); };
    }
  }
  Store& store = server.backend().store();
  // Forged values (issue 25 item 1): a third of the filler PUTs carry entry
  // images of hot keys (KVRDMA_EXPLORE_FORGE=1; 0: none).
  const bool forge = EnvOr("KVRDMA_EXPLORE_FORGE", KVRDMA_EXPLORE_FORGE_DEFAULT) != 0;
  const uint64_t hash_seed = store.index_params().seed;  // what every client learns
  // Rendezvous PUTs (half the seeds, client 1's): each value is READ by the
  // server straight into its place in the log, whose segment the worker's
  // head may seal and the cleaner must leave alone until the READ is over.
  const bool rendezvous = EnvOr("KVRDMA_EXPLORE_RENDEZVOUS", (seed / 2) % 2 == 0 ? 1 : 0) != 0;
  if (rendezvous && kind == Kind::kLoopback) {
    // The server's READs (into its log) answered late, 0 to 2 ms as the
    // seed chooses: meanwhile the worker's head moves on, the cleaner runs,
    // segments are retired and reused.
    const uint64_t hold_ns = pick(4) * 700'000;
    struct Held {
      std::mutex mu;
      std::map<uint64_t, uint64_t> since;  // wr_id -> first asked (ns)
    };
    auto held = std::make_shared<Held>();
    const auto log_lo = reinterpret_cast<uint64_t>(store.log_base());
    const uint64_t log_hi = log_lo + store.log_bytes();
    f.hold_wr = [held, hold_ns, log_lo, log_hi](const SendWr& w) {
      if (w.opcode != WrOpcode::kRead || w.local.addr < log_lo || w.local.addr >= log_hi || hold_ns == 0) return false;
      std::lock_guard<std::mutex> g(held->mu);
      const uint64_t now = NowNs();
      auto [it, fresh] = held->since.try_emplace(w.wr_id, now);
      if (now - it->second < hold_ns) return true;
      held->since.erase(it);
      return false;
    };
  }
  if (faults || f.hold_wr) env.fabric->SetFaults(std::move(f));

  std::unique_ptr<Client> clients[kClients];
  for (auto& c : clients) {
    const bool mine = &c == &clients[1];  // client 1's PUTs are the rendezvous ones
    ClientOptions o;
    o.host = env.addr;
    o.port = server.port();
    o.put_mode = pick(2) ? PutMode::kSend : PutMode::kWriteImm;
    // A connection the driver broke leaves operations that only time out
    // (they end unknown): 300 ms, not 5 s, keeps such a seed short.
    o.op_timeout_ms = 300;
    o.location_cache_entries = 64;
    o.rendezvous_bytes = rendezvous && mine ? 1 : 0;
    // Values copied into the window's buffer, or registered for their PUT:
    // by the seed (not the rng, whose stream the other choices keep).
    o.rendezvous_copy_bytes = (seed / 3) % 2 == 0 ? 128 * 1024 : 0;
    auto r = ClientFactory::ConnectWith(env.client, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    c = std::move(r).value();
  }
  Pending pend[kClients][kDepth];
  // Rendezvous seeds: client 1 registers memory with a slot per pending
  // operation, and half its PUTs send their value from the slot. The client
  // keeps the registration of a slot's bytes across PUTs (and reconnects),
  // while the bytes in it change from one PUT to the next: the server must
  // READ each PUT's own value through the kept registration.
  const size_t slot_bytes = std::max(shape.hot_value_bytes, shape.filler_value_bytes);
  std::vector<std::byte> arena;
  if (rendezvous && slot_bytes > 0) {
    arena.resize(size_t{kDepth} * slot_bytes);
    const Status st = clients[1]->RegisterMemory(arena);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) arena.clear();
  }
  // Big shape: client 2 registers memory with a slot per pending operation,
  // as long as a hot value, and half its GETs of hot keys go into a slot: the
  // entry's value is READ straight into it (direct READs). Chosen by a
  // generator of their own, so that the other shapes' schedules are the ones
  // they were.
  std::mt19937_64 rng_direct(seed ^ 0x6a09e667f3bcc908ull);
  std::vector<std::byte> get_arena;
  if (shape_pick == kBigShape) {
    get_arena.resize(size_t{kDepth} * shape.hot_value_bytes);
    const Status st = clients[2]->RegisterMemory(get_arena);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) get_arena.clear();
  }
  uint64_t seq = 0;
  lin::History h;

  auto complete = [&](int c, Op* op) {
    Pending& p = *static_cast<Pending*>(op->user);
    p.busy = false;
    const uint64_t done = NowNs();
    ++st->ops;
    if (p.key[0] != 'h') {  // fillers: pressure only
      EXPECT_TRUE(op->status.ok() || op->status.IsNotFound() || op->status.code() == Status::Code::kServerFull ||
                  op->status.IsConnectionLost() || op->status.code() == Status::Code::kTimeout)
          << op->status.ToString();
      return;
    }
    lin::HistoryOp ho;
    ho.client = static_cast<uint32_t>(c);
    ho.key = p.key.substr(0, 2);
    ho.invoke_ns = p.invoke_ns;
    ho.complete_ns = done;
    ho.type = op->type == Op::Type::kGet ? lin::OpType::kGet
              : op->type == Op::Type::kPut ? lin::OpType::kPut
                                           : lin::OpType::kDelete;
    const Status& s = op->status;
    if (s.ok()) {
      ho.outcome = lin::Outcome::kOk;
      if (op->type == Op::Type::kGet && p.into_buffer) {
        ho.value.assign(reinterpret_cast<const char*>(op->buffer.data()), op->value_bytes);
      } else {
        ho.value = op->type == Op::Type::kGet ? p.result : p.value;
      }
      if (op->type == Op::Type::kGet && ho.value.size() > (16 << 10)) ++st->large_values;
    } else if (s.IsNotFound()) {
      ho.outcome = lin::Outcome::kNotFound;
    } else if (s.code() == Status::Code::kServerFull) {
      ++st->server_full;
      return;  // not applied
    } else {
      ++st->unknown;
      if (op->type == Op::Type::kGet) return;  // constrains nothing
      ho.outcome = lin::Outcome::kUnknown;
      EXPECT_TRUE(s.IsConnectionLost() || s.code() == Status::Code::kTimeout) << s.ToString();
    }
    if (op->type == Op::Type::kPut) ho.value = p.value;
    h.push_back(std::move(ho));
  };
  auto poll = [&](int c) {
    Op* done[kDepth];
    size_t n = clients[c]->Poll(done);
    for (size_t i = 0; i < n; ++i) complete(c, done[i]);
  };
  auto submit = [&](int c) {
    Pending* p = nullptr;
    for (Pending& q : pend[c]) {
      if (!q.busy) p = &q;
    }
    if (p == nullptr) {  // all in flight: wait (bounded) for one to complete
      Op* done[kDepth];
      size_t n = clients[c]->Wait(done, 1000);
      for (size_t i = 0; i < n; ++i) complete(c, done[i]);
      return;
    }
    // Client 0 is a slow reader of hot keys: its cached locations outlive
    // several reuses of their segments.
    uint64_t what = c == 0 ? pick(50) : pick(100);
    const bool filler = c != 0 && pick(2) == 0;
    // Big shape: hot keys are mostly read (two GETs of a large entry that
    // find the same ref confirm its cached location; a write in between
    // makes it stale), so that cached large READs are common.
    if (shape_pick == kBigShape && !filler && what >= 45 && pick(4) != 0) what = pick(45);
    static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    p->key = filler ? std::string{'f', kAlphabet[pick(kFillerKeys)]} : "h" + std::to_string(pick(hot_keys));
    p->key.resize(shape.key_bytes, 'k');
    p->op = Op{};
    p->op.key = p->key;
    p->op.user = p;
    p->into_buffer = false;
    if (what < 45) {
      p->op.type = Op::Type::kGet;
      p->op.result = &p->result;
      if (c == 2 && !filler && !get_arena.empty() && rng_direct() % 2 == 0) {
        p->into_buffer = true;
        p->op.result = nullptr;
        p->op.buffer = std::span<std::byte>(get_arena).subspan(static_cast<size_t>(p - pend[2]) * shape.hot_value_bytes,
                                                               shape.hot_value_bytes);
      }
    } else if (what < 80) {
      p->op.type = Op::Type::kPut;
      if (filler && forge && pick(3) == 0) {
        p->value = ForgedValue(shape, hot_keys, 4 * pick(2), hash_seed, pick);
        ++st->forged_puts;
      } else {
        UniqueValue(&p->value, filler ? shape.filler_value_bytes : shape.hot_value_bytes, c, ++seq);
      }
      p->op.value = p->value;
      if (c == 1 && !arena.empty() && p->value.size() <= slot_bytes && pick(2) == 0) {
        std::byte* slot = arena.data() + static_cast<size_t>(p - pend[1]) * slot_bytes;
        std::memcpy(slot, p->value.data(), p->value.size());
        p->op.value = std::string_view(reinterpret_cast<const char*>(slot), p->value.size());
      }
    } else {
      p->op.type = Op::Type::kDelete;
    }
    p->busy = true;
    p->invoke_ns = NowNs();
    Op* ops[1] = {&p->op};
    if (clients[c]->Submit(ops) == 0) p->busy = false;
  };

  for (uint64_t step = 0; step < steps; ++step) {
    const uint64_t what = pick(100);
    const int c = pick(16) == 0 ? 0 : 1 + static_cast<int>(pick(kClients - 1));
    if (what < 65) {
      submit(c);
    } else if (what < 90) {
      poll(c);
    } else if (what < 97) {
      store.RunCleanerOnce();
      ++st->cleaner_passes;
    } else if (what < 99) {
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg.grace_period_ms + 1));
    } else if (faults && pick(3) == 0) {
      break_next->store(true);
      ++st->reconnects;
    }
  }
  // Drain (bounded by the operation timeout).
  for (int c = 0; c < kClients; ++c) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (clients[c]->in_flight() > 0 && std::chrono::steady_clock::now() < deadline) poll(c);
    poll(c);
    for (Pending& p : pend[c]) EXPECT_FALSE(p.busy) << "seed " << seed << ": an operation never completed";
    st->cache_hits += clients[c]->stats().cache_hits;
    st->cache_stale += clients[c]->stats().cache_stale;
    // Window rounds beyond the first of GETs that found nothing: a tag that
    // matched, or a round over the round limit.
    st->miss_rounds += clients[c]->stats().get_miss_rounds - clients[c]->stats().get_misses;
    st->rendezvous_puts += clients[c]->stats().rendezvous_puts;
    st->rendezvous_registrations += clients[c]->stats().rendezvous_registrations;
    st->rendezvous_copies += clients[c]->stats().rendezvous_copies;
    st->direct_reads += clients[c]->stats().direct_reads;
  }
  const StoreStats ss = store.Stats();
  if (EnvOr("KVRDMA_EXPLORE_VERBOSE", 0) != 0) {
    std::printf("[explore] seed %llu: shape %s, %d hot keys, index %llu x %llu, %s mode%s; %zu history ops; "
                "segments cleaned %llu, relocations %llu, evictions %llu, index moves %llu; client 0: %llu cache hits, %llu stale\n",
                static_cast<unsigned long long>(seed), shape.name, hot_keys,
                static_cast<unsigned long long>(index.homes), static_cast<unsigned long long>(index.window),
                cache_mode ? "cache" : "store",
                faults ? ", faults" : "", h.size(), static_cast<unsigned long long>(ss.segments_cleaned),
                static_cast<unsigned long long>(ss.relocations), static_cast<unsigned long long>(ss.evictions),
                static_cast<unsigned long long>(ss.index_moves), static_cast<unsigned long long>(clients[0]->stats().cache_hits),
                static_cast<unsigned long long>(clients[0]->stats().cache_stale));
  }
  st->segments_cleaned += ss.segments_cleaned;
  st->evictions += ss.evictions;
  st->index_moves += ss.index_moves;
  server.Stop();
  // What no history shows until a GET happens to look: every ref names a
  // current entry of its key inside a segment in use (a write published into
  // a segment retired under it, say).
  if (Status ok = store.CheckIndex(); !ok.ok()) ADD_FAILURE() << "seed " << seed << ": " << ok.ToString();
  std::lock_guard<std::mutex> g(evicted->first);
  h.insert(h.end(), evicted->second.begin(), evicted->second.end());
  return h;
}

// Reports a violation of `seed`: the minimized history per key on stdout,
// the whole history in a file, and a test failure.
void ReportViolation(uint64_t seed, uint64_t after, const lin::History& h, const lin::CheckResult& r) {
  const std::string file = "explore-" + std::to_string(seed) + ".history";
  std::ofstream out(file);
  lin::WriteHistory(out, h);
  for (const lin::KeyResult& k : r.keys) {
    if (k.verdict != lin::Verdict::kViolation) continue;
    std::printf("[explore] VIOLATION at seed %llu (after %llu seeds) on %s: %s\n", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(after), k.key.c_str(), k.explanation.c_str());
    lin::History mine;
    for (const lin::HistoryOp& op : h) {
      if (op.key == k.key) mine.push_back(op);
    }
    lin::History m = lin::MinimizeViolation(mine, 10.0);
    uint64_t t = m.empty() ? 0 : m.front().invoke_ns;
    for (const lin::HistoryOp& op : m) t = std::min(t, op.invoke_ns);
    for (const lin::HistoryOp& op : m) std::printf("[explore]     %s\n", lin::DescribeOp(op, t).c_str());
  }
  ADD_FAILURE() << "seed " << seed << ": history not linearizable (" << lin::VerdictName(r.verdict)
                << "), whole history in " << file << "; rerun with KVRDMA_EXPLORE_SEED=" << seed;
}

// Runs seeds [first, first + count) on `threads` threads (each takes the next
// seed; a schedule mostly waits: for grace periods, the cleaner, replies);
// stops at the first violation and reports the lowest violating seed found.
void Explore(Kind kind, uint64_t first, uint64_t count, uint64_t steps, unsigned threads) {
  threads = static_cast<unsigned>(std::clamp<uint64_t>(threads, 1, std::max<uint64_t>(count, 1)));
  std::vector<ExploreStats> per(threads);
  std::atomic<uint64_t> next{first}, histories{0}, history_ops{0};
  std::atomic<bool> stop{false};
  std::mutex mu;  // guards the violation below
  struct Violation {
    uint64_t seed = UINT64_MAX, after = 0;
    lin::History h;
    lin::CheckResult r;
  } worst;
  const auto t0 = std::chrono::steady_clock::now();
  auto run = [&](ExploreStats* st) {
    for (uint64_t seed; !stop.load() && (seed = next.fetch_add(1)) < first + count;) {
      lin::History h = RunSchedule(kind, seed, steps, st);
      if (::testing::Test::HasFatalFailure()) {
        stop = true;
        return;
      }
      lin::CheckResult r = lin::CheckHistory(h);
      const uint64_t after = histories.fetch_add(1) + 1;
      history_ops += h.size();
      if (r.verdict != lin::Verdict::kLinearizable) {
        stop = true;
        std::lock_guard<std::mutex> g(mu);
        if (seed < worst.seed) worst = {seed, after, std::move(h), std::move(r)};
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back(run, &per[i]);
  run(&per[0]);
  for (std::thread& t : pool) t.join();
  if (worst.seed != UINT64_MAX) return ReportViolation(worst.seed, worst.after, worst.h, worst.r);
  if (::testing::Test::HasFatalFailure()) return;
  ExploreStats st;
  for (const ExploreStats& p : per) st += p;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[explore] %s: %llu seeds from %llu on %u threads, %llu histories checked (%llu ops of hot keys, %llu ops in all), "
              "0 violations, %.1f s; cache hits %llu, stale cached locations %llu, ServerFull %llu, unknown %llu, "
              "cleaner passes %llu, segments cleaned %llu, evictions %llu, broken connections %llu, index moves %llu, "
              "extra miss rounds %llu, forged values %llu, rendezvous PUTs %llu (%llu value registrations, %llu copies), "
              "large values read %llu (direct READs %llu)\n",
              kind == Kind::kLoopback ? "loopback" : "verbs", static_cast<unsigned long long>(count),
              static_cast<unsigned long long>(first), threads, static_cast<unsigned long long>(histories.load()),
              static_cast<unsigned long long>(history_ops.load()), static_cast<unsigned long long>(st.ops), secs,
              static_cast<unsigned long long>(st.cache_hits), static_cast<unsigned long long>(st.cache_stale),
              static_cast<unsigned long long>(st.server_full), static_cast<unsigned long long>(st.unknown),
              static_cast<unsigned long long>(st.cleaner_passes), static_cast<unsigned long long>(st.segments_cleaned),
              static_cast<unsigned long long>(st.evictions), static_cast<unsigned long long>(st.reconnects),
              static_cast<unsigned long long>(st.index_moves), static_cast<unsigned long long>(st.miss_rounds),
              static_cast<unsigned long long>(st.forged_puts), static_cast<unsigned long long>(st.rendezvous_puts),
              static_cast<unsigned long long>(st.rendezvous_registrations),
              static_cast<unsigned long long>(st.rendezvous_copies),
              static_cast<unsigned long long>(st.large_values), static_cast<unsigned long long>(st.direct_reads));
  // The schedules must have exercised what they claim to (a run of one seed,
  // KVRDMA_EXPLORE_SEED, need not: it reproduces a violation or shows it gone).
  if (count == 1) return;
  EXPECT_GT(st.cache_hits, 0u);
  EXPECT_GT(st.cache_stale, 0u);
  EXPECT_GT(st.server_full, 0u);
  EXPECT_GT(st.segments_cleaned, 0u);
  EXPECT_GT(st.index_moves, 0u);
  if (count >= 3 && EnvOr("KVRDMA_EXPLORE_RENDEZVOUS", 1) != 0) {
    EXPECT_GT(st.rendezvous_puts, 0u);
    // Some sent from registered memory over a kept registration.
    EXPECT_LT(st.rendezvous_registrations, st.rendezvous_puts);
  }
  if (count >= 30 && EnvOr("KVRDMA_EXPLORE_RENDEZVOUS", 1) != 0) {
    EXPECT_GT(st.rendezvous_copies, 0u);  // every other group of three seeds copies (rendezvous_copy_bytes)
  }
  uint64_t big_seeds = 0;
  for (uint64_t seed = first; seed < first + count; ++seed) big_seeds += ShapeOf(seed) == kBigShape;
  if (big_seeds > 0) {  // large entries were read, some straight into registered memory
    EXPECT_GT(st.large_values, 0u);
    EXPECT_GT(st.direct_reads, 0u);
  }
}

void ExploreFromEnv(Kind kind, uint64_t default_seeds) {
  const uint64_t steps = EnvOr("KVRDMA_EXPLORE_STEPS", 1500);
  // Loopback schedules run 4 at a time by default; the verbs form one (a
  // real device, whose every connection is costly on Soft-RoCE).
  const auto threads = static_cast<unsigned>(EnvOr("KVRDMA_EXPLORE_THREADS", kind == Kind::kLoopback ? 4 : 1));
  if (const char* one = std::getenv("KVRDMA_EXPLORE_SEED"); one != nullptr && *one != '\0') {
    return Explore(kind, std::strtoull(one, nullptr, 10), 1, steps, 1);
  }
  uint64_t first = EnvOr("KVRDMA_EXPLORE_FIRST", 1), count = EnvOr("KVRDMA_EXPLORE_SEEDS", default_seeds);
  // A range, FIRST-LAST, in KVRDMA_EXPLORE_SEEDS: one variable (ctest's
  // per-test ENVIRONMENT, through gtest_discover_tests, keeps just one).
  if (const char* seeds = std::getenv("KVRDMA_EXPLORE_SEEDS"); seeds != nullptr && std::strchr(seeds, '-') != nullptr) {
    first = std::strtoull(seeds, nullptr, 10);
    const uint64_t last = std::strtoull(std::strchr(seeds, '-') + 1, nullptr, 10);
    count = last >= first ? last - first + 1 : 0;
  }
  Explore(kind, first, count, steps, threads);
}

TEST(ScheduleExploration, Loopback) { ExploreFromEnv(Kind::kLoopback, 200); }
TEST(ScheduleExplorationLong, Loopback) { ExploreFromEnv(Kind::kLoopback, 2000); }
TEST(ScheduleExploration, Verbs) {
  TransportEnv env = TransportEnv::Make(Kind::kVerbs);
  if (!env.skip_reason.empty()) GTEST_SKIP() << env.skip_reason;
  ExploreFromEnv(Kind::kVerbs, 12);  // seed 12: the big shape (large entry READs over rxe)
}

}  // namespace
}  // namespace kvrdma::testing
