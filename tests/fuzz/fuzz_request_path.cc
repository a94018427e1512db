// Stateful fuzzer for the server's request path: the input is a sequence of
// events from several connections (SENDs and ring messages, fragments in any
// order and size, messages of several writes (protocol 10), well formed or
// with one request malformed, lock words and tokens, STATS, ring-position and credit
// violations (more messages in flight than credits: the connection closes),
// ring rewrites while the store applies a request, connections
// that never take their replies, disconnects, assembly timeouts, rendezvous
// PUTs (protocol 10.1) whose READ the fuzzer completes later: with the
// client's value, with the value changed during the READ, with the window
// invalidated or never this connection's, or flushed by a close, while more
// messages wait behind it). They drive
// the real Worker (through a test peer, over fake transport objects, on the
// fuzzer's thread: deterministic) and the real Store.
//
// After every event the fuzzer checks: one reply per handled message, in
// request order, one record per request of a message of several (or one
// refusing the malformed message, which then changes nothing), each record
// with the status a simple model of the protocol predicts
// (locks from the lock word's layout, conditional writes from the versions
// the model saw in replies: neither with the worker's own checks); a
// connection is closed only when it holds all its reply buffers or has no
// send-queue room left, or when a message finds credits messages received
// and their replies not posted (and then always); every receive buffer is
// reposted once; the assembly budget equals
// what the model's assemblies hold; and the store holds exactly the model's
// key-value pairs (an operation the worker applied but could not acknowledge
// may or may not be there). A rendezvous PUT must post one READ of exactly
// the window the request names into the worker's staging memory or (the
// input picks) into the value's place in the log, right behind its key, answer
// nothing until it completes, hold the connection's later messages until
// then (answered afterwards, in order), and store the value only if the bytes
// the READ brought are the ones the client's checksum covers; a failed READ
// closes the connection and applies nothing behind it.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/log.h"
#include "server/store_backend.h"
#include "server/worker.h"
#include "tests/fuzz/fake_transport.h"

namespace kvrdma::server {
class WorkerTestPeer {
 public:
  // One completion of a batch: its reply (if any) is queued, and posted
  // by Flush (the end of the batch) or when the connection has
  // kReplyBatch queued.
  // A received message is queued on its connection and served by the
  // worker's next round (one completion at a time here: served at once).
  static void Dispatch(Worker& w, const Completion& c) {
    w.Dispatch(c);
    while (w.HasReady()) w.ServeRound();
  }
  static void Flush(Worker& w) { w.FlushReplies(); }
  static void ApplyControl(Worker& w) { w.ApplyControl(); }
  static void ExpireAll(Worker& w) {
    const int64_t later = SteadyMs() + w.cfg_.assembly_timeout_ms + 1;
    w.ExpireAssemblies(later);
    w.ExpireRendezvous(later);
  }
};
}  // namespace kvrdma::server

namespace kvrdma::fuzz {
namespace {

using server::ConnState;
using server::WorkerTestPeer;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "fuzz_request_path: %s failed: ", #cond);          \
      std::fprintf(stderr, __VA_ARGS__);                                      \
      std::fprintf(stderr, "\n");                                             \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

constexpr uint32_t kWordBytes = 512;
constexpr uint32_t kMaxKey = 64;
constexpr uint32_t kMaxValue = 2048;
constexpr uint32_t kConns = 3;
constexpr uint32_t kRecvBuffers = 4;
constexpr uint32_t kLockWords = 8;
const std::string kKeyNames[] = {"a", "b", "key-1", "key-2", std::string(40, 'L')};

// One store serves many inputs (opening one per input would dominate the
// run time); each input uses its own keys (a prefix), and the store is
// replaced before it fills up. A crashing input reproduces alone.
server::StoreBackend& SharedStore(uint64_t* generation) {
  static std::unique_ptr<server::StoreBackend> store;
  static uint64_t inputs = 0;
  if (!store || ++inputs % 1024 == 0 || store->store().Stats().segments_free < 8) {
    store.reset();
    StoreConfig sc;
    sc.index_homes = 32768;
    sc.segment_bytes = 64 << 10;
    sc.log_bytes = 256 * sc.segment_bytes;
    sc.workers = 1;
    sc.max_key_bytes = kMaxKey;
    sc.max_value_bytes = kMaxValue;
    sc.huge_pages = HugePages::kOff;
    sc.cleaner_thread = false;
    auto s = server::StoreBackend::Create(sc);
    if (!s.ok()) std::abort();
    store = std::move(s).value();
  }
  *generation = inputs;
  return *store;
}

// The store, with a hook that rewrites every ring and receive buffer while a
// request is being applied (what a client writing its ring, or the NIC
// refilling a reposted buffer, would do).
class RewritingBackend final : public server::Backend {
 public:
  explicit RewritingBackend(server::StoreBackend* s) : real(s) {}
  Status Put(uint32_t w, std::span<const uint8_t> k, std::span<const uint8_t> v, const CommitCheck& c, bool wait,
             uint64_t* ver) override {
    Rewrite();
    return real->Put(w, k, v, c, wait, ver);
  }
  Status Delete(uint32_t w, std::span<const uint8_t> k, const CommitCheck& c, bool wait, uint64_t* ver) override {
    Rewrite();
    return real->Delete(w, k, c, wait, ver);
  }
  Status PutChecked(uint32_t w, std::span<const uint8_t> k, std::span<const uint8_t> v, uint64_t expected,
                    const CommitCheck& c, bool wait, uint64_t* ver) override {
    Rewrite();
    return real->PutChecked(w, k, v, expected, c, wait, ver);
  }
  bool takes_values_in_place() const override { return real->takes_values_in_place(); }
  Result<uint64_t> BeginPut(uint32_t w, std::span<const uint8_t> k, uint32_t len, bool wait) override {
    return real->BeginPut(w, k, len, wait);
  }
  uint8_t* PlacedValue(uint64_t place) const override { return real->PlacedValue(place); }
  Status FinishPut(uint32_t w, uint64_t place, std::span<const uint8_t> k, uint32_t len, uint64_t expected,
                   const CommitCheck& c, uint64_t* ver) override {
    Rewrite();
    return real->FinishPut(w, place, k, len, expected, c, ver);
  }
  void AbandonPut(uint64_t place) override { real->AbandonPut(place); }
  server::StoreRegions regions() const override { return real->regions(); }
  void AppendStats(std::vector<std::pair<std::string_view, uint64_t>>* out) const override {
    real->AppendStats(out);
  }
  void Rewrite() {
    if (!armed) return;
    armed = false;
    for (auto& m : memory) std::memset(m.data(), 0x5a, m.size());
  }
  server::StoreBackend* real;
  bool armed = false;
  std::vector<std::span<uint8_t>> memory;
};

// What the client side of a connection is doing (to build plausible next
// fragments), and what the model knows of the server side.
struct ModelAssembly {
  bool active = false;
  uint64_t id = 0, token = 0;
  uint8_t cond = 0;  // kFlagIfVersion or 0
  uint64_t if_version = 0;
  uint32_t value_len = 0;
  uint16_t key_len = 0;
  std::string key, value;
  uint64_t charged = 0;  // bytes of the budget the server's assembly holds
};

// A rendezvous PUT as the server received it (its READ posted, or to be).
struct PendingRead {
  uint64_t id = 0, token = 0, if_version = 0, addr = 0, checksum = 0;
  uint8_t cond = 0;
  uint32_t rkey = 0, len = 0;
  std::string key;
  // Taken behind another and refused before its READ (no room on the QP):
  // no READ, answered with this after the ones before it.
  std::optional<Status::Code> refused;
};

// A memory window a client bound over a value of its own (its address is
// the map's key in Harness::windows_): the only bytes a READ can bring.
struct Window {
  uint32_t conn = 0;  // the connection whose QP it is bound to
  uint32_t rkey = 0;
  std::string value;
};

struct Conn {
  std::unique_ptr<ConnState> cs;
  FakeConnection* qp = nullptr;
  std::span<uint8_t> ring;  // owned by cs (as the server allocates it)
  std::vector<uint8_t> reply_mem;
  ModelAssembly server_asm;  // the model of the server's assembly
  // The client's own fragmented PUT in progress.
  std::string frag_key;
  uint64_t frag_id = 0, frag_token = 0, frag_if_version = 0;
  uint8_t frag_cond = 0;
  uint32_t frag_len = 0, frag_sent = 0;
  uint64_t next_id = 1;
  // Messages the worker accepted (the connection open, within its credits).
  uint64_t received = 0;
  // Every reply the worker gave, in order, as seen when it was queued (or
  // posted); qp->replies must be a prefix of it, all of it after a flush
  // unless the connection broke.
  std::vector<std::vector<uint8_t>> answers;
  size_t checked_posts = 0;  // answers[0, checked_posts) were found posted
  // The rendezvous PUTs the worker took and has not answered, oldest first
  // (a READ in flight each, but the refused ones), and the messages
  // received behind them that the worker holds, in order.
  std::deque<PendingRead> reading;
  std::vector<Completion> held;
};

struct Expect {
  uint64_t id = 0;
  Status::Code code = Status::Code::kOk;
  bool ack = false;
  std::optional<std::pair<std::string, std::optional<std::string>>> effect;  // key -> value (nullopt: delete)
  std::optional<uint64_t> clock;  // a CLOCK reply's body
  uint64_t current = 0;           // a VersionMismatch's version: the key's current one (0: no value)
  // A well-formed message of several writes: its requests (views of the
  // bytes the server saw), each predicted when its record is checked (the
  // model then knows what the ones before it did).
  std::vector<ParsedRequest> writes;
  std::optional<PendingRead> read;  // a rendezvous PUT: a READ, no reply yet
};

class Harness {
 public:
  explicit Harness(FuzzedDataProvider& in) : in_(in) {
    cfg_.workers = 1;
    cfg_.credits = in_.ConsumeIntegralInRange<uint32_t>(1, 6);
    cfg_.message_bytes = kWordBytes;
    cfg_.max_key_bytes = kMaxKey;
    cfg_.max_value_bytes = kMaxValue;
    cfg_.assembly_bytes = in_.ConsumeIntegralInRange<uint32_t>(kMaxValue, 3 * kMaxValue);
    cfg_.assembly_timeout_ms = 1000000;  // expiry only when an event says so
    max_inline_ = in_.PickValueInArray({0u, 24u, 64u, 256u});
    // The send queue's depth: the server's (2 * credits + 32), or, in one
    // input of four, a few WRs, so that READs and replies find it full
    // (refused, and answered in their turn).
    send_queue_ = in_.ConsumeIntegralInRange<int>(0, 3) == 0 ? cfg_.credits + in_.ConsumeIntegralInRange<uint32_t>(1, 4)
                                                             : 2 * cfg_.credits + 32;
    uint64_t generation = 0;
    backend_ = std::make_unique<RewritingBackend>(&SharedStore(&generation));
    const std::string prefix = std::to_string(generation) + ":";
    for (const std::string& k : kKeyNames) keys_.push_back(prefix + k);
    budget_ = std::make_unique<server::AssemblyBudget>(cfg_.assembly_bytes);
    locks_.assign(1 + kLockWords, 0);
    clock_ = 1000;  // the lease clock (read through server_clock_)
    recv_mem_.assign(size_t{kRecvBuffers} * kWordBytes, 0);
    recv_mr_ = std::make_unique<FakeRegion>(recv_mem_.data(), recv_mem_.size());
    backend_->memory.push_back(recv_mem_);
    server::ReceivePool pool{&srq_, recv_mr_.get(), kWordBytes};
    server::LockView lv{locks_.data(), &server_clock_, kLockWords, backend_->regions().hash_seed};
    worker_ = std::make_unique<server::Worker>(0, cfg_, *backend_, counters_, *budget_, pool, lv,
                                               std::make_unique<FakeCq>());
    // Where rendezvous READs land: the value's place in the log (a
    // memory-only store's way) or the worker's staging (a durable store's).
    in_place_ = in_.ConsumeBool();
    if (in_place_) {
      const server::StoreRegions r = backend_->regions();
      log_mr_ = std::make_unique<FakeRegion>(r.log_base, r.log_bytes);
      worker_->SetRendezvous(nullptr, log_mr_.get());
    } else {
      staging_.assign(size_t{server::Worker::kRendezvousSlots} * kMaxValue, 0);
      staging_mr_ = std::make_unique<FakeRegion>(staging_.data(), staging_.size());
      worker_->SetRendezvous(staging_mr_.get(), nullptr);
    }
    for (uint32_t i = 0; i < kConns; ++i) Open(i);
  }
  ~Harness() {
    worker_.reset();
    backend_->memory.clear();
  }

  void Run() {
    for (int step = 0; step < 256 && in_.remaining_bytes() > 0; ++step) {
      Conn& c = conns_[in_.ConsumeIntegralInRange<uint32_t>(0, kConns - 1)];
      // (No event of its own ends the worker's batch of completions, so that
      // the seeds keep their meaning: time passing ends it (the worker
      // flushes before it sleeps), and so does a client taking replies (it
      // can only take what was posted), a reconnect (the worker flushes
      // before Add/Remove) and the end of the input.)
      switch (in_.ConsumeIntegralInRange<int>(0, 15)) {
        case 0: Deliver(c, WholeWrite(c, Opcode::kPut)); break;
        case 1: Deliver(c, WholeWrite(c, Opcode::kDelete)); break;
        case 2: Deliver(c, Query(c, in_.ConsumeBool() ? Opcode::kStats : Opcode::kClock)); break;
        case 3: Deliver(c, First(c)); break;
        case 4: Deliver(c, Next(c)); break;
        case 5: Deliver(c, in_.ConsumeBytes<uint8_t>(in_.ConsumeIntegralInRange<size_t>(0, kWordBytes))); break;
        case 6: SetLock(); break;
        case 7:
          EndBatch();
          clock_ += in_.ConsumeIntegralInRange<uint64_t>(0, 3000);
          break;
        case 8:
          EndBatch();
          TakeReplies(c, in_.ConsumeIntegralInRange<int>(1, 8));
          break;
        case 9: Reopen(c); break;
        case 10: RingViolation(c); break;
        case 11: backend_->armed = true; break;
        case 12: ExpireAssemblies(); break;
        case 13: Deliver(c, Writes(c)); break;
        case 14: Deliver(c, RendezvousPut(c)); break;
        case 15: CompleteRead(c); break;
      }
      CheckStore();
    }
    EndBatch();
  }

 private:
  // --- connections ---
  void Open(uint32_t i) {
    Conn& c = conns_[i];
    c = Conn{};
    c.cs = std::make_unique<ConnState>();
    const size_t ring_bytes = size_t{cfg_.credits} * kWordBytes;
    c.cs->ring.reset(static_cast<uint8_t*>(std::calloc(ring_bytes, 1)));
    c.ring = {c.cs->ring.get(), ring_bytes};
    const uint32_t buffers = server::ReplyBufferCount(cfg_.credits);
    c.reply_mem.assign(server::ReplyMemoryBytes(cfg_.credits), 0);
    c.cs->id = i + 1;
    c.cs->reply_mr = std::make_unique<FakeRegion>(c.reply_mem.data(), c.reply_mem.size());
    c.cs->replies.busy.assign(buffers, 0);
    // A QP number may come back after its connection closed (as on a NIC).
    uint32_t qp = next_qp_++;
    if (!freed_qps_.empty() && in_.ConsumeBool()) {
      qp = freed_qps_.back();
      freed_qps_.pop_back();
    }
    auto fc = std::make_unique<FakeConnection>(qp, max_inline_, send_queue_);
    c.qp = fc.get();
    c.cs->conn = std::move(fc);
    c.cs->qp = c.qp;
    c.cs->qp_num = qp;
    backend_->memory.push_back(c.ring);
    worker_->Add(c.cs.get());
  }
  void Reopen(Conn& c) {
    const size_t reposted = srq_.reposted.size();
    const std::deque<FakeConnection::PostedRead> reads = c.qp->reads;
    size_t refused = 0;
    for (const PendingRead& p : c.reading) refused += p.refused.has_value();
    CHECK(reads.size() + refused == c.reading.size(), "%zu READs posted for %zu rendezvous PUTs (%zu refused)",
          reads.size(), c.reading.size(), refused);
    worker_->Remove(c.cs.get());
    WorkerTestPeer::ApplyControl(*worker_);
    CHECK(c.cs->released.load(), "a removed connection was not released");
    // The messages held behind its READ are dropped, their buffers reposted.
    CHECK(srq_.reposted.size() == reposted + c.held.size(), "%zu receive buffers reposted at a close, %zu held",
          srq_.reposted.size() - reposted, c.held.size());
    // A refused PUT's slot (no READ) comes back at once.
    staging_busy_ -= static_cast<uint32_t>(refused);
    for (const FakeConnection::PostedRead& read : reads) {
      // A READ's staging slot stays busy until the READ's completion
      // (flushed, as the NIC delivers it once the QP is gone) comes, or
      // forever here (until ExpireRendezvous gives it back).
      if (in_.ConsumeBool()) {
        Completion wc;
        wc.wr_id = read.wr_id;
        wc.opcode = WrOpcode::kRead;
        wc.status = WcStatus::kFlushed;
        wc.qp_num = c.cs->qp_num;
        WorkerTestPeer::Dispatch(*worker_, wc);
        --staging_busy_;
      } else {
        ++staging_orphans_;
      }
    }
    CheckPosted(c, /*flushed=*/true);  // the worker posts what it queued before it lets go
    DropAssembly(c);
    freed_qps_.push_back(c.cs->qp_num);
    std::erase_if(backend_->memory, [&](std::span<uint8_t> m) { return m.data() == c.ring.data(); });
    CheckBudget();
    Open(static_cast<uint32_t>(&c - conns_));
  }

  // --- messages ---
  static std::vector<uint8_t> Encode(const RequestHeader& h, std::string_view key, std::string_view frag) {
    std::vector<uint8_t> m(kRequestHeaderSize);
    EncodeRequestHeader(h, m.data());
    if (h.flags & kFlagFirst) m.insert(m.end(), key.begin(), key.end());
    m.insert(m.end(), frag.begin(), frag.end());
    return m;
  }
  std::string Value(size_t n) { return std::string(n, static_cast<char>('A' + (value_seed_++ % 26))); }
  uint64_t Token(const std::string& key) {
    switch (in_.ConsumeIntegralInRange<int>(0, 2)) {
      case 0: return 0;
      case 1: return locks_[Place(key).index];  // the holder's token
      default: return in_.ConsumeIntegral<uint64_t>();
    }
  }
  // A write's condition: none, the key's version as the model knows it, 0
  // (absent), a neighbour of it, anything; now and then a version without
  // the flag (malformed).
  void Condition(const std::string& key, RequestHeader* h) {
    const uint64_t cur = CurrentVersion(key);
    switch (in_.ConsumeIntegralInRange<int>(0, 6)) {
      case 0: h->flags |= kFlagIfVersion; h->if_version = cur; break;
      case 1: h->flags |= kFlagIfVersion; h->if_version = 0; break;
      case 2: h->flags |= kFlagIfVersion; h->if_version = cur + in_.ConsumeIntegralInRange<uint64_t>(0, 2) - 1; break;
      case 3: h->flags |= kFlagIfVersion; h->if_version = in_.ConsumeIntegral<uint64_t>(); break;
      case 4: h->if_version = in_.ConsumeIntegral<uint64_t>(); break;  // no flag
      default: break;                                                  // unconditional
    }
  }
  uint64_t CurrentVersion(const std::string& key) const {
    auto it = versions_.find(key);
    return model_.count(key) && it != versions_.end() ? it->second : 0;
  }
  // Whether a write may change a key, as docs/DESIGN.md ("Locks with leases")
  // states it, read off the word's documented layout (owner:20 | key byte:8 |
  // expiry:36 in 16 ms units) without locks.h's helpers: the worker decides
  // with LockAllows, so a bug there or in the field accessors shows as a
  // reply the model did not predict.
  static bool ModelLockAllows(uint64_t word, uint8_t key, uint64_t token, uint32_t requester, uint64_t now_ms) {
    if (word == 0) return true;                                               // free
    if ((word & ((uint64_t{1} << 36) - 1)) * 16 <= now_ms) return true;       // the lease has ended
    const auto covers = static_cast<uint8_t>(word >> 36);
    if (covers != 0 && covers != key) return true;                            // other keys of the word
    return word == token && (word >> 44) == requester;                        // its holder, with the lease
  }
  LockPlace Place(const std::string& key) const { return LockPlaceOf(key, backend_->regions().hash_seed, kLockWords); }
  const std::string& Key() { return keys_[in_.ConsumeIntegralInRange<size_t>(0, keys_.size() - 1)]; }
  std::vector<uint8_t> WholeWrite(Conn& c, Opcode op, size_t max_value = kWordBytes) {
    const std::string& key = Key();
    RequestHeader h;
    h.opcode = op;
    h.key_len = static_cast<uint16_t>(key.size());
    h.request_id = c.next_id++;
    h.lock_token = Token(key);
    Condition(key, &h);
    std::string v;
    if (op == Opcode::kPut) {
      v = Value(in_.ConsumeIntegralInRange<size_t>(0, std::min(max_value, kWordBytes - kRequestHeaderSize - key.size())));
    }
    h.value_len = h.frag_len = static_cast<uint32_t>(v.size());
    return Encode(h, key, v);
  }
  // A message of several whole writes (MORE on all but the last), now and
  // then malformed: MORE missing in the middle or on the last, cut short,
  // a query or a fragment among them, more than kMaxRequestsPerMessage (or
  // more than fit: Deliver cuts at the message size).
  std::vector<uint8_t> Writes(Conn& c) {
    const size_t n = in_.ConsumeIntegralInRange<size_t>(2, kMaxRequestsPerMessage + 1);
    std::vector<uint8_t> m;
    std::vector<size_t> starts;
    for (size_t i = 0; i < n; ++i) {
      auto r = WholeWrite(c, in_.ConsumeBool() ? Opcode::kPut : Opcode::kDelete, 24);
      if (i + 1 < n) r[1] |= kFlagMore;
      starts.push_back(m.size());
      m.insert(m.end(), r.begin(), r.end());
    }
    const size_t at = starts[in_.ConsumeIntegralInRange<size_t>(0, n - 1)];
    switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
      case 0: m[at + 1] ^= kFlagMore; break;                              // MORE missing, or on the last
      case 1: m.resize(m.size() - in_.ConsumeIntegralInRange<size_t>(1, 30)); break;  // cut short
      case 2: m[at] = static_cast<uint8_t>(in_.PickValueInArray({Opcode::kStats, Opcode::kClock})); break;
      case 3: m[at + 1] &= static_cast<uint8_t>(~kFlagLast); break;       // a FIRST fragment
      case 4: m[at + 1] |= in_.ConsumeBool() ? 32 : kFlagRendezvous; break;  // an unknown flag, or RENDEZVOUS
      default: break;                                                     // well formed
    }
    return m;
  }
  // A rendezvous PUT: the client binds a window over a value of its own and
  // names it; now and then it lies (a checksum over another value, another
  // rkey, another connection's window, a length past the window, a length
  // the protocol refuses).
  std::vector<uint8_t> RendezvousPut(Conn& c) {
    const std::string& key = Key();
    RequestHeader h;
    h.opcode = Opcode::kPut;
    h.key_len = static_cast<uint16_t>(key.size());
    h.request_id = c.next_id++;
    h.lock_token = Token(key);
    Condition(key, &h);
    h.flags = static_cast<uint8_t>(kFlagFirst | kFlagLast | kFlagRendezvous | (h.flags & kFlagIfVersion));
    const uint32_t n = in_.ConsumeIntegralInRange<uint32_t>(1, kMaxValue);
    std::string v = Value(n);
    // Values differ in more than their letter: a READ that brings another
    // value of the same letter and length must still fail the checksum.
    for (size_t i = 0; i < v.size(); i += 61) v[i] = static_cast<char>(value_seed_ + i);
    const uint32_t id = next_window_++;
    RendezvousValue rv;
    rv.addr = 0x7e0000000000ull + uint64_t{id} * 0x10000;
    rv.rkey = 0x1000 + id;
    rv.checksum = RendezvousChecksum({reinterpret_cast<const uint8_t*>(key.data()), key.size()},
                                     {reinterpret_cast<const uint8_t*>(v.data()), v.size()},
                                     backend_->regions().hash_seed);
    windows_[rv.addr] = {static_cast<uint32_t>(&c - conns_), rv.rkey, v};
    h.value_len = n;
    switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
      case 0: rv.checksum ^= in_.ConsumeIntegralInRange<uint64_t>(1, ~uint64_t{0}); break;
      case 1: rv.rkey ^= in_.ConsumeIntegralInRange<uint32_t>(1, 0xffff); break;
      case 2:  // the newest window of another connection
        for (auto it = windows_.rbegin(); it != windows_.rend(); ++it) {
          if (it->second.conn != static_cast<uint32_t>(&c - conns_)) {
            h.value_len = static_cast<uint32_t>(it->second.value.size());
            rv.addr = it->first;
            rv.rkey = it->second.rkey;
            break;
          }
        }
        break;
      case 3: h.value_len = std::min(n + in_.ConsumeIntegralInRange<uint32_t>(1, 64), kMaxValue); break;
      case 4: h.value_len = in_.PickValueInArray({0u, kMaxValue + 1}); break;
      default: break;  // as the protocol says
    }
    h.frag_len = kRendezvousFieldsBytes;
    std::string fields(kRendezvousFieldsBytes, '\0');
    EncodeRendezvous(rv, reinterpret_cast<uint8_t*>(fields.data()));
    return Encode(h, key, fields);
  }
  std::vector<uint8_t> Query(Conn& c, Opcode op) {
    RequestHeader h;
    h.opcode = op;
    h.request_id = c.next_id++;
    return Encode(h, {}, {});
  }
  std::vector<uint8_t> First(Conn& c) {
    c.frag_key = Key();
    c.frag_id = c.next_id++;
    c.frag_token = Token(c.frag_key);
    RequestHeader cond;
    Condition(c.frag_key, &cond);
    c.frag_cond = cond.flags & kFlagIfVersion;
    c.frag_if_version = cond.if_version;
    c.frag_len = in_.ConsumeIntegralInRange<uint32_t>(0, kMaxValue + 16);
    const uint32_t room = kWordBytes - kRequestHeaderSize - static_cast<uint32_t>(c.frag_key.size());
    c.frag_sent = std::min(in_.ConsumeIntegralInRange<uint32_t>(0, room), c.frag_len);
    RequestHeader h;
    h.flags = kFlagFirst | (c.frag_sent == c.frag_len && in_.ConsumeBool() ? kFlagLast : 0) | c.frag_cond;
    h.if_version = c.frag_if_version;
    h.key_len = static_cast<uint16_t>(c.frag_key.size());
    h.value_len = c.frag_len;
    h.request_id = c.frag_id;
    h.lock_token = c.frag_token;
    h.frag_len = c.frag_sent;
    return Encode(h, c.frag_key, Value(c.frag_sent));
  }
  // The next fragment of the client's PUT, possibly with one field wrong.
  std::vector<uint8_t> Next(Conn& c) {
    RequestHeader h;
    h.key_len = static_cast<uint16_t>(c.frag_key.size());
    h.value_len = c.frag_len;
    h.request_id = c.frag_id;
    h.lock_token = c.frag_token;
    h.if_version = c.frag_if_version;
    h.frag_offset = c.frag_sent;
    uint32_t chunk = std::min(in_.ConsumeIntegralInRange<uint32_t>(0, kWordBytes - kRequestHeaderSize),
                              c.frag_len - std::min(c.frag_sent, c.frag_len));
    switch (in_.ConsumeIntegralInRange<int>(0, 6)) {
      case 0:  // another total length than the FIRST's, consistent with a LAST
        chunk = in_.ConsumeIntegralInRange<uint32_t>(0, kWordBytes - kRequestHeaderSize);
        h.value_len = h.frag_offset + chunk;
        break;
      case 1: h.frag_offset = in_.ConsumeIntegralInRange<uint32_t>(0, kMaxValue); break;
      case 2: h.request_id = in_.ConsumeIntegral<uint64_t>(); break;
      case 3: h.key_len = in_.ConsumeIntegralInRange<uint16_t>(0, kMaxKey); break;
      case 4: h.lock_token = in_.ConsumeIntegral<uint64_t>(); break;
      case 5: h.if_version = in_.ConsumeIntegral<uint64_t>(); break;
      default: break;  // as the protocol says
    }
    chunk = std::min<uint64_t>(chunk, h.value_len - std::min(h.frag_offset, h.value_len));
    const bool last = uint64_t{h.frag_offset} + chunk == h.value_len;
    h.flags = (last ? kFlagLast : 0) | (in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? c.frag_cond ^ kFlagIfVersion
                                                                                   : c.frag_cond);
    h.frag_len = chunk;
    c.frag_sent = h.frag_offset + chunk;
    return Encode(h, {}, Value(chunk));
  }

  // --- delivery: SEND into a receive buffer, or WRITE_WITH_IMM into the ring ---
  void Deliver(Conn& c, std::vector<uint8_t> msg) {
    if (msg.size() > kWordBytes) msg.resize(kWordBytes);
    // At its credits, a client within the rules sends again only after a
    // reply was posted: mostly the batch ends first (so that connections
    // live long enough for deep fragment and lock sequences); once in 8 it
    // sends past its credits, and the connection must close.
    if (!c.qp->broken() && c.received - c.qp->replies.size() >= cfg_.credits &&
        in_.ConsumeIntegralInRange<int>(0, 7) != 0) {
      EndBatch();
    }
    Completion wc;
    wc.qp_num = c.cs->qp_num;
    wc.wr_id = next_recv_++ % kRecvBuffers;
    if (in_.ConsumeBool()) {
      wc.opcode = WrOpcode::kRecv;
      wc.byte_len = static_cast<uint32_t>(msg.size());
      if (!msg.empty()) std::memcpy(recv_mem_.data() + wc.wr_id * kWordBytes, msg.data(), msg.size());
    } else {
      const uint32_t pos = in_.ConsumeIntegralInRange<uint32_t>(0, cfg_.credits - 1);
      if (!msg.empty()) std::memcpy(c.ring.data() + size_t{pos} * kWordBytes, msg.data(), msg.size());
      wc.opcode = WrOpcode::kRecvWriteImm;
      wc.imm = (pos << 24) | static_cast<uint32_t>(msg.size());
    }
    Handle(c, wc);
  }
  void RingViolation(Conn& c) {
    Completion wc;
    wc.qp_num = c.cs->qp_num;
    wc.wr_id = next_recv_++ % kRecvBuffers;
    wc.opcode = WrOpcode::kRecvWriteImm;
    const uint32_t pos = in_.ConsumeIntegralInRange<uint32_t>(0, 255);
    const uint32_t len = in_.ConsumeIntegralInRange<uint32_t>(0, 0xffffff);
    wc.imm = (pos << 24) | len;
    Handle(c, wc);
  }

  // What the server must answer to `seen` (the bytes as it received them).
  Expect Predict(Conn& c, const Completion& wc, std::span<const uint8_t> seen) {
    Expect e;
    if (wc.opcode == WrOpcode::kRecvWriteImm &&
        ((wc.imm >> 24) >= cfg_.credits || (wc.imm & 0xffffff) > kWordBytes)) {
      e.code = Status::Code::kInvalidArgument;
      return e;
    }
    if (seen.empty()) {
      e.code = Status::Code::kInvalidArgument;
      return e;
    }
    std::array<ParsedRequest, kMaxRequestsPerMessage> all;
    auto n = ParseMessage(seen, kMaxKey, kMaxValue, all);
    if (!n.ok()) {
      for (int i = 0; i < 8 && seen.size() >= 16; ++i) e.id |= uint64_t{seen[8 + i]} << (8 * i);
      e.code = n.status().code();
      DropAssembly(c);
      return e;
    }
    if (*n > 1) {  // several whole writes: predicted record by record (CheckRecords)
      // The rule of protocol 10, checked here on the parser's result rather
      // than trusted from it: only whole PUT/DELETEs share a message, MORE on
      // all but the last.
      for (size_t i = 0; i < *n; ++i) {
        const RequestHeader& h = all[i].header;
        CHECK(h.opcode == Opcode::kPut || h.opcode == Opcode::kDelete, "opcode %d in a message of %zu requests",
              static_cast<int>(h.opcode), *n);
        CHECK((h.flags & (kFlagFirst | kFlagLast)) == (kFlagFirst | kFlagLast), "a fragment in a message of %zu", *n);
        CHECK(((h.flags & kFlagMore) != 0) == (i + 1 < *n), "MORE on request %zu of %zu", i, *n);
      }
      e.id = all[0].header.request_id;
      e.writes.assign(all.begin(), all.begin() + static_cast<ptrdiff_t>(*n));
      return e;
    }
    const ParsedRequest* p = &all[0];
    const RequestHeader& h = p->header;
    e.id = h.request_id;
    auto str = [](std::span<const uint8_t> b) { return std::string(b.begin(), b.end()); };
    const bool first = h.flags & kFlagFirst, last = h.flags & kFlagLast;
    if (first && last) {
      // A well-formed rendezvous PUT: a READ into a free staging slot, the
      // reply when it completes (CompleteRead); none free: NoResource.
      if (h.flags & kFlagRendezvous) {
        if (staging_busy_ == server::Worker::kRendezvousSlots) {
          e.code = Status::Code::kNoResource;
          return e;
        }
        e.read = PendingRead{h.request_id, h.lock_token, h.if_version, p->rendezvous.addr, p->rendezvous.checksum,
                             static_cast<uint8_t>(h.flags & kFlagIfVersion), p->rendezvous.rkey, h.value_len,
                             str(p->key), std::nullopt};
        return e;
      }
      if (h.opcode == Opcode::kStats) return e;
      if (h.opcode == Opcode::kClock) {
        e.clock = clock_;
        return e;
      }
      return Write(e, c, str(p->key), h.opcode == Opcode::kPut ? std::optional(str(p->value)) : std::nullopt,
                   h.lock_token, static_cast<uint8_t>(h.flags & kFlagIfVersion), h.if_version);
    }
    ModelAssembly& a = c.server_asm;
    if (first) {
      DropAssembly(c);
      a = {true,        h.request_id, h.lock_token, static_cast<uint8_t>(h.flags & kFlagIfVersion), h.if_version,
           h.value_len, h.key_len,    str(p->key),  "",          0};
      if (!ChargeModel(a, p->value.size())) {
        a = {};  // charged nothing
        e.code = Status::Code::kNoResource;
        return e;
      }
      a.value = str(p->value);
      e.ack = true;
      return e;
    }
    if (!a.active || a.id != h.request_id || a.key_len != h.key_len || a.token != h.lock_token ||
        a.cond != (h.flags & kFlagIfVersion) || a.if_version != h.if_version || a.value_len != h.value_len ||
        a.value.size() != h.frag_offset) {
      DropAssembly(c);
      e.code = Status::Code::kInvalidArgument;
      return e;
    }
    if (!ChargeModel(a, p->value.size())) {
      DropAssembly(c);
      e.code = Status::Code::kNoResource;
      return e;
    }
    a.value += str(p->value);
    if (!last) {
      e.ack = true;
      return e;
    }
    ModelAssembly done = a;
    DropAssembly(c);
    return Write(e, c, done.key, done.value, done.token, done.cond, done.if_version);
  }
  // The lock first, then the condition (DESIGN "Conditional writes"), then
  // a DELETE's NotFound.
  Expect& Write(Expect& e, const Conn& c, const std::string& key, std::optional<std::string> value, uint64_t token,
                uint8_t cond, uint64_t if_version) {
    if (!ModelLockAllows(locks_[Place(key).index], Place(key).key, token, c.cs->id, clock_)) {
      e.code = Status::Code::kLocked;
      return e;
    }
    if (cond != 0 && CurrentVersion(key) != if_version) {
      e.code = Status::Code::kVersionMismatch;
      e.current = CurrentVersion(key);
      return e;
    }
    if (!value && !model_.count(key)) {
      e.code = Status::Code::kNotFound;
      return e;
    }
    e.effect = {key, std::move(value)};
    return e;
  }
  void DropAssembly(Conn& c) {
    if (c.server_asm.active) budget_model_ -= c.server_asm.charged;
    c.server_asm = {};
  }
  // The budget as DESIGN "The request path on the server" documents it: an assembly is
  // charged for the bytes that arrived, its buffer doubling up to the value's
  // length (or just what it needs when the budget cannot hold the doubling).
  // False: NoResource (the caller drops the assembly).
  bool ChargeModel(ModelAssembly& a, size_t frag) {
    const uint64_t need = a.value.size() + frag;
    if (need <= a.charged && a.charged != 0) return true;
    uint64_t want = std::max<uint64_t>({need, std::min<uint64_t>(a.value_len, 2 * a.charged), 1});
    if (budget_model_ + (want - a.charged) > cfg_.assembly_bytes) {
      want = std::max<uint64_t>(need, 1);
      if (budget_model_ + (want - a.charged) > cfg_.assembly_bytes) return false;
    }
    budget_model_ += want - a.charged;
    a.charged = want;
    return true;
  }

  // The bytes the worker will copy for `wc` (empty for a ring position or
  // length it refuses).
  std::vector<uint8_t> Seen(const Conn& c, const Completion& wc) const {
    if (wc.opcode == WrOpcode::kRecv) {
      return {recv_mem_.data() + wc.wr_id * kWordBytes, recv_mem_.data() + wc.wr_id * kWordBytes + wc.byte_len};
    }
    if ((wc.imm >> 24) < cfg_.credits && (wc.imm & 0xffffff) <= kWordBytes) {
      const uint8_t* p = c.ring.data() + size_t{wc.imm >> 24} * kWordBytes;
      return {p, p + (wc.imm & 0xffffff)};
    }
    return {};
  }

  void Handle(Conn& c, const Completion& wc) {
    const bool was_broken = c.qp->broken();
    const std::vector<uint8_t> seen = Seen(c, wc);
    // The credit limit, from the documented rule (DESIGN "Flow control"): a
    // message that finds credits messages received and their replies not
    // posted closes the connection, unanswered and unapplied.
    const bool over_credits = !was_broken && c.received - c.qp->replies.size() >= cfg_.credits;
    if (!was_broken && !over_credits) ++c.received;
    // Behind rendezvous PUTs not yet answered: held, served when they are,
    // but for the first in line, which the worker may take now (TakenBehind).
    const bool behind = !was_broken && !over_credits && !c.reading.empty();
    if (behind) c.held.push_back(wc);
    const std::vector<uint8_t> first_seen = behind ? Seen(c, c.held.front()) : std::vector<uint8_t>{};
    const bool take_first = behind && TakenBehind(c, first_seen);
    Expect e;
    if (!was_broken && !over_credits && !behind) e = Predict(c, wc, seen);
    const size_t replies = Answered(c);
    const size_t reposted = srq_.reposted.size();
    const size_t reads = c.qp->reads.size();
    // Large replies holding a buffer: posted and not completed, or queued.
    size_t large_out = c.qp->large_outstanding();
    for (const SendWr& w : c.cs->replies.queued) large_out += !w.inline_data;
    WorkerTestPeer::Dispatch(*worker_, wc);
    CHECK(c.cs->replies.queued.size() < server::kReplyBatch, "%u replies queued", c.cs->replies.queued.size());
    if (behind && !take_first) {
      CHECK(srq_.reposted.size() == reposted, "a message behind a rendezvous READ was served before the READ ended");
      CHECK(Answered(c) == replies, "a message behind a rendezvous READ was answered before the READ ended");
      return;
    }
    if (behind) {
      const Completion first = c.held.front();
      c.held.erase(c.held.begin());
      CHECK(srq_.reposted.size() >= reposted + 1 && srq_.reposted[reposted] == first.wr_id,
            "the message taken behind rendezvous PUTs: its buffer not reposted");
      if (!TakeBehind(c, first, first_seen, replies, reads)) {  // closed: the rest are dropped
        CHECK(srq_.reposted.size() == reposted + 1 + c.held.size(), "%zu of %zu held messages' buffers reposted",
              srq_.reposted.size() - reposted - 1, c.held.size());
        c.held.clear();
      } else {
        CHECK(srq_.reposted.size() == reposted + 1, "a message behind rendezvous PUTs served before they ended");
      }
      CheckBudget();
      return;
    }
    CHECK(srq_.reposted.size() == reposted + 1 && srq_.reposted.back() == wc.wr_id, "receive buffer not reposted");
    if (was_broken) {  // a closed connection's messages are dropped
      CHECK(Answered(c) == replies, "a broken connection was answered");
      return;
    }
    if (over_credits) {
      CHECK(c.qp->broken(), "a message past the credits (%llu received, %zu replies posted, %u credits) was accepted",
            static_cast<unsigned long long>(c.received), c.qp->replies.size(), cfg_.credits);
      CHECK(Answered(c) == replies, "a message past the credits was answered");
      return;
    }
    if (e.read && c.qp->reads.size() == reads + 1) return ReadPosted(c, *e.read, replies, reads);
    if (e.read) ReadRefused(c, &e);
    if (Answered(c) <= replies) {
      // No reply: only if the worker closed the connection for not taking
      // its replies. The request may or may not have been applied. (Fewer:
      // a post that failed dropped the replies the connection had queued.)
      CHECK(c.qp->broken(), "a request got no reply");
      CHECK(large_out >= server::ReplyBufferCount(cfg_.credits) || c.qp->refused_full,
            "connection closed with %zu large replies outstanding and room in its send queue", large_out);
      Unapplied(e);
      CheckBudget();
      return;
    }
    CHECK(Answered(c) == replies + 1, "%zu replies to one request", Answered(c) - replies);
    CheckAnswer(c, e, LastAnswer(c));
    CheckBudget();
  }
  // A rendezvous PUT the worker took: one READ of exactly what the request
  // names, into the worker's own staging memory, signaled, and no reply yet.
  // (The READ is the QP's `index`th in flight: several may be posted in one
  // dispatch.)
  void ReadPosted(Conn& c, const PendingRead& p, size_t replies, size_t index) {
    CHECK(Answered(c) == replies, "a rendezvous PUT was answered before its READ completed");
    const FakeConnection::PostedRead& r = c.qp->reads[index];
    CHECK(r.remote_addr == p.addr && r.rkey == p.rkey && r.len == p.len,
          "the READ (addr %llx rkey %x, %u bytes) is not the one the request names (%llx %x, %u)",
          static_cast<unsigned long long>(r.remote_addr), r.rkey, r.len, static_cast<unsigned long long>(p.addr),
          p.rkey, p.len);
    if (in_place_) {
      // Into the log, right behind the entry's key: the value's own place.
      const server::StoreRegions g = backend_->regions();
      const auto base = reinterpret_cast<uint64_t>(g.log_base);
      CHECK(r.local_addr >= base + p.key.size() && r.local_addr + r.len <= base + g.log_bytes,
            "a READ into memory that is not the log");
      CHECK(std::memcmp(reinterpret_cast<const void*>(r.local_addr - p.key.size()), p.key.data(), p.key.size()) == 0,
            "a READ into the log that is not behind its entry's key");
    } else {
      const auto base = reinterpret_cast<uint64_t>(staging_.data());
      CHECK(r.local_addr >= base && r.local_addr + r.len <= base + staging_.size(),
            "a READ into memory that is not the worker's staging memory");
    }
    CHECK(r.signaled, "an unsignaled rendezvous READ (its end would never be seen)");
    c.reading.push_back(p);
    ++staging_busy_;
    CheckBudget();
  }
  // Whether the worker takes c's first held message (its bytes `seen`, as
  // they lie) although c has rendezvous PUTs not yet answered, from the
  // documented rule (Worker::TakesBehindRendezvous): fewer than
  // kRendezvousPerConnection of them, fewer than half the worker's slots
  // busy, and the RENDEZVOUS flag in the message's header.
  bool TakenBehind(const Conn& c, const std::vector<uint8_t>& seen) const {
    return c.reading.size() < server::kRendezvousPerConnection &&
           staging_busy_ < server::Worker::kRendezvousSlots / 2 && seen.size() >= kRequestHeaderSize &&
           (seen[1] & kFlagRendezvous) != 0;
  }
  // The worker took c's message wc (bytes `seen`) behind c's rendezvous
  // PUTs: a rendezvous PUT gets its READ (or, refused, is answered after
  // them); anything else (the client rewrote it after sending it) closes the
  // connection, unanswered and unapplied (returns false). replies, reads:
  // c's answers and READs before.
  bool TakeBehind(Conn& c, const Completion& wc, const std::vector<uint8_t>& seen, size_t replies, size_t reads) {
    CHECK(Answered(c) == replies, "a message taken behind rendezvous PUTs was answered before them");
    std::array<ParsedRequest, kMaxRequestsPerMessage> all;
    auto n = ParseMessage(seen, kMaxKey, kMaxValue, all);
    if (!n.ok() || *n != 1 || (all[0].header.flags & kFlagRendezvous) == 0) {
      CHECK(c.qp->broken(), "a message taken behind rendezvous PUTs, not one itself, left its connection open");
      return false;
    }
    Expect e = Predict(c, wc, seen);
    CHECK(e.read, "a rendezvous PUT taken behind others, not read");
    if (c.qp->reads.size() > reads) {
      ReadPosted(c, *e.read, replies, reads);
    } else {
      CHECK(c.qp->refused_full, "a rendezvous PUT posted no READ and its send queue had room");
      e.read->refused = Status::Code::kNoResource;
      c.reading.push_back(*e.read);
      ++staging_busy_;
    }
    return true;
  }
  // A rendezvous PUT whose READ could not be posted: only a full send queue
  // refuses it here (the fake's NoResource), and the worker answers that.
  void ReadRefused(Conn& c, Expect* e) {
    CHECK(c.qp->refused_full, "a rendezvous PUT posted no READ and its send queue had room");
    e->read.reset();
    e->code = Status::Code::kNoResource;
  }
  // A request that got no reply and is known not to have been applied, or
  // may have been: the store may hold either value of its keys.
  void Unapplied(const Expect& e) {
    if (e.effect) Uncertain(e.effect->first);
    for (const ParsedRequest& w : e.writes) Uncertain(std::string(w.key.begin(), w.key.end()));
  }
  // One answer, checked against what the model predicted, and the model
  // then follows it.
  void CheckAnswer(Conn& c, const Expect& e, std::vector<uint8_t> answer) {
    c.answers.push_back(std::move(answer));
    CheckPosted(c, /*flushed=*/false);
    if (!e.writes.empty()) return CheckRecords(c, e.writes, c.answers.back());
    auto r = ParseReply(c.answers.back());
    CHECK(r.ok(), "unparsable reply: %s", r.status().ToString().c_str());
    CHECK(r->header.request_id == e.id, "reply to request %llu, expected %llu",
          static_cast<unsigned long long>(r->header.request_id), static_cast<unsigned long long>(e.id));
    CHECK(r->header.status == e.code, "status %d, model says %d (request %llu)", static_cast<int>(r->header.status),
          static_cast<int>(e.code), static_cast<unsigned long long>(e.id));
    CHECK((r->header.flags == kReplyFragmentAck) == e.ack, "fragment ack flag %u", r->header.flags);
    if (e.clock) {
      auto now = DecodeClock(r->body);
      CHECK(now.ok(), "a CLOCK reply of %zu bytes", r->body.size());
      CHECK(*now == *e.clock, "CLOCK answered %llu, the clock is %llu", static_cast<unsigned long long>(*now),
            static_cast<unsigned long long>(*e.clock));
    }
    CheckOutcome(e, r->header);
  }
  // The fuzzer as the NIC: c's rendezvous READ completes. The bytes are the
  // window's value if the window is c's, has the request's rkey and covers
  // the READ (else an access error, as a NIC answers); the input may instead
  // change a byte of it (the client wrote its buffer during the READ) or fail
  // the READ (the client invalidated its window); a closed connection's
  // READ is flushed. Then the PUT's reply and the held messages' replies, in
  // order.
  void CompleteRead(Conn& c) {
    if (c.reading.empty()) return;
    CHECK(!c.reading.front().refused, "a refused rendezvous PUT is the oldest of its connection's");
    CHECK(!c.qp->reads.empty(), "a rendezvous READ in flight is not on its QP");
    const FakeConnection::PostedRead r = c.qp->reads.front();
    c.qp->reads.pop_front();
    const PendingRead p = c.reading.front();
    c.reading.pop_front();
    --staging_busy_;
    Completion wc;
    wc.wr_id = r.wr_id;
    wc.opcode = WrOpcode::kRead;
    wc.qp_num = c.cs->qp_num;
    const auto w = windows_.find(r.remote_addr);
    const bool reachable = w != windows_.end() && w->second.conn == static_cast<uint32_t>(&c - conns_) &&
                           w->second.rkey == r.rkey && r.len <= w->second.value.size();
    std::string bytes;
    const int outcome = in_.ConsumeIntegralInRange<int>(0, 3);
    if (c.qp->broken()) {
      wc.status = WcStatus::kFlushed;
    } else if (outcome == 3 || !reachable) {
      wc.status = WcStatus::kRemoteAccessError;
    } else {
      bytes = w->second.value.substr(0, r.len);
      if (outcome == 2) {
        const size_t at = in_.ConsumeIntegralInRange<size_t>(0, bytes.size() - 1);
        bytes[at] = static_cast<char>(bytes[at] ^ in_.ConsumeIntegralInRange<int>(1, 255));
      }
      std::memcpy(reinterpret_cast<void*>(r.local_addr), bytes.data(), bytes.size());
      wc.byte_len = r.len;
    }
    // The held messages as the worker will copy them: nothing rewrites them
    // during this dispatch.
    std::vector<std::vector<uint8_t>> seen;
    for (const Completion& h : c.held) seen.push_back(Seen(c, h));
    if (!c.held.empty()) backend_->armed = false;
    Expect e;
    e.id = p.id;
    const bool failed = wc.status != WcStatus::kSuccess;
    if (failed) {
      e.code = CompletionStatus(wc).code();
    } else if (RendezvousChecksum({reinterpret_cast<const uint8_t*>(p.key.data()), p.key.size()},
                                  {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                  backend_->regions().hash_seed) != p.checksum) {
      e.code = Status::Code::kInvalidArgument;  // the value changed during the READ, or the client lied
    } else {
      Write(e, c, p.key, bytes, p.token, p.cond, p.if_version);
    }
    // The refused ones right behind it: answered next, in order (unless the
    // connection closes: then not at all).
    std::vector<Expect> refused;
    while (!c.reading.empty() && c.reading.front().refused) {
      Expect x;
      x.id = c.reading.front().id;
      x.code = *c.reading.front().refused;
      refused.push_back(x);
      c.reading.pop_front();
      --staging_busy_;
    }
    const size_t reposted = srq_.reposted.size();
    size_t next = Answered(c);
    std::vector<Completion> held = std::move(c.held);
    c.held.clear();
    size_t reads = c.qp->reads.size();
    WorkerTestPeer::Dispatch(*worker_, wc);
    if (failed) {
      // The connection closes; its reply may be queued (never posted), the
      // refused ones behind it are not answered, and nothing held is served.
      CHECK(c.qp->broken(), "a failed rendezvous READ left its connection open");
      CHECK(Answered(c) <= next + 1, "%zu answers after a failed READ", Answered(c) - next);
      if (Answered(c) > next) CheckAnswer(c, e, LastAnswer(c));
      CHECK(srq_.reposted.size() == reposted + held.size(), "%zu of %zu held messages' buffers reposted",
            srq_.reposted.size() - reposted, held.size());
      CheckBudget();
      return;
    }
    size_t served = 0;
    bool answered = TakeAnswer(c, e, &next);
    for (size_t i = 0; answered && i < refused.size(); ++i) answered = TakeAnswer(c, refused[i], &next);
    bool open = answered;
    for (size_t i = 0; open && i < held.size(); ++i) {
      if (!c.reading.empty()) {
        // Behind rendezvous PUTs again: the first in line may be taken
        // (one at most: then there are kRendezvousPerConnection), the rest wait.
        if (!TakenBehind(c, seen[i])) {
          c.held.assign(held.begin() + static_cast<ptrdiff_t>(i), held.end());
          break;
        }
        ++served;
        open = TakeBehind(c, held[i], seen[i], next, reads);
        if (open && !c.reading.back().refused) ++reads;
        continue;
      }
      Expect h = Predict(c, held[i], seen[i]);
      ++served;
      if (h.read && c.qp->reads.size() > reads) {  // another rendezvous PUT: the rest may wait behind it
        ReadPosted(c, *h.read, next, reads);
        ++reads;
        continue;
      }
      if (h.read) ReadRefused(c, &h);
      open = answered = TakeAnswer(c, h, &next);
    }
    if (!open) {
      // Closed (for not taking its replies, or a message rewritten behind
      // rendezvous PUTs): what was not served was dropped. (A post that
      // failed drops the replies queued before it, so any write served here
      // may be applied and unanswered.)
      CHECK(srq_.reposted.size() == reposted + held.size(), "a closed connection's held messages not all reposted");
      if (!answered) {
        for (const std::string& k : keys_) Uncertain(k);
      }
      c.held.clear();
    } else {
      CHECK(srq_.reposted.size() == reposted + served, "%zu buffers reposted for %zu messages served",
            srq_.reposted.size() - reposted, served);
      CHECK(Answered(c) == next, "%zu answers after a rendezvous PUT's READ, %zu expected", Answered(c), next);
    }
    CheckBudget();
  }
  // The answer at position *next to the request e predicts, if the
  // connection gave one; false if it closed instead (for not taking its
  // replies: the request may have been applied).
  bool TakeAnswer(Conn& c, const Expect& e, size_t* next) {
    if (Answered(c) <= *next) {
      CHECK(c.qp->broken(), "a request behind a rendezvous READ got no reply");
      Unapplied(e);
      return false;
    }
    CheckAnswer(c, e, AnswerAt(c, (*next)++));
    return true;
  }
  // The reply to a message of several writes: one record each, in order,
  // each as the model predicts it after the ones before it took effect.
  void CheckRecords(Conn& c, const std::vector<ParsedRequest>& writes, const std::vector<uint8_t>& reply) {
    std::array<ParsedReply, kMaxRequestsPerMessage> rec;
    auto n = ParseReplies(reply, rec);
    CHECK(n.ok(), "unparsable reply of records: %s", n.status().ToString().c_str());
    CHECK(*n == writes.size(), "%zu records for %zu requests", *n, writes.size());
    CHECK(reply.size() <= kMaxReplySize, "a reply of %zu bytes", reply.size());
    for (size_t i = 0; i < writes.size(); ++i) {
      const RequestHeader& h = writes[i].header;
      Expect e;
      e.id = h.request_id;
      const std::string key(writes[i].key.begin(), writes[i].key.end());
      Write(e, c, key,
            h.opcode == Opcode::kPut ? std::optional(std::string(writes[i].value.begin(), writes[i].value.end()))
                                     : std::nullopt,
            h.lock_token, static_cast<uint8_t>(h.flags & kFlagIfVersion), h.if_version);
      CHECK(rec[i].header.request_id == e.id, "record %zu for request %llu, expected %llu", i,
            static_cast<unsigned long long>(rec[i].header.request_id), static_cast<unsigned long long>(e.id));
      CHECK(rec[i].header.status == e.code, "record %zu: status %d, model says %d", i,
            static_cast<int>(rec[i].header.status), static_cast<int>(e.code));
      CHECK(rec[i].header.flags == 0, "record %zu: flags %u", i, rec[i].header.flags);
      CHECK(rec[i].body.size() <= kMaxBatchErrorText, "record %zu: %zu bytes of text", i, rec[i].body.size());
      CheckOutcome(e, rec[i].header);
    }
  }
  // A reply (record) to a write: its version, and the model follows it.
  void CheckOutcome(const Expect& e, const ReplyHeader& h) {
    if (e.code == Status::Code::kVersionMismatch) {
      CHECK(h.version == e.current, "VersionMismatch names version %llu, the model's is %llu",
            static_cast<unsigned long long>(h.version), static_cast<unsigned long long>(e.current));
    }
    if (e.effect && e.code == Status::Code::kOk) {
      // Versions grow with every write (the store's write sequence).
      CHECK(h.version > last_version_, "write version %llu after %llu",
            static_cast<unsigned long long>(h.version), static_cast<unsigned long long>(last_version_));
      last_version_ = h.version;
      if (e.effect->second) {
        model_[e.effect->first] = *e.effect->second;
        versions_[e.effect->first] = h.version;
      } else {
        model_.erase(e.effect->first);
        versions_.erase(e.effect->first);
      }
    }
  }
  // Replies given to c: posted, or queued until the batch ends.
  static size_t Answered(const Conn& c) { return c.qp->replies.size() + c.cs->replies.queued.size(); }
  // The bytes of the newest reply: the last queued one (its scratch or large
  // buffer, as the post will copy or send it), else the last posted.
  // The bytes of answer j (posted, else queued).
  static std::vector<uint8_t> AnswerAt(const Conn& c, size_t j) {
    if (j < c.qp->replies.size()) return c.qp->replies[j].bytes;
    const SendWr& w = c.cs->replies.queued[j - c.qp->replies.size()];
    const auto* p = reinterpret_cast<const uint8_t*>(w.local.addr);
    return {p, p + w.local.length};
  }
  static std::vector<uint8_t> LastAnswer(const Conn& c) {
    if (c.cs->replies.queued.empty()) return c.qp->replies.back().bytes;
    const SendWr& w = c.cs->replies.queued[c.cs->replies.queued.size() - 1];
    const auto* p = reinterpret_cast<const uint8_t*>(w.local.addr);
    return {p, p + w.local.length};
  }
  // What was posted is what was answered, in order; after a flush, all of it
  // (unless the connection broke, which drops what it had queued).
  void CheckPosted(Conn& c, bool flushed) {
    const auto& posted = c.qp->replies;
    CHECK(posted.size() <= c.answers.size(), "%zu replies posted, %zu given", posted.size(), c.answers.size());
    for (size_t i = c.checked_posts; i < posted.size(); ++i) {
      CHECK(posted[i].bytes == c.answers[i], "reply %zu posted differs from the one queued (order or buffer reuse)", i);
    }
    c.checked_posts = posted.size();
    if (flushed) {
      CHECK(c.cs->replies.queued.empty(), "replies still queued after the batch ended");
      CHECK(c.qp->broken() || posted.size() == c.answers.size(), "%zu replies given, %zu posted, connection open",
            c.answers.size(), posted.size());
    }
  }
  void EndBatch() {
    WorkerTestPeer::Flush(*worker_);
    for (Conn& c : conns_) CheckPosted(c, /*flushed=*/true);
  }
  // An applied-but-unacknowledged write: the store may hold either version.
  void Uncertain(const std::string& key) {
    std::string v;
    uint64_t version = 0;
    Status st = backend_->real->store().Get(key, &v, &version);
    if (st.ok()) {
      model_[key] = v;
      versions_[key] = version;
      last_version_ = std::max(last_version_, version);
    } else {
      model_.erase(key);
      versions_.erase(key);
    }
  }

  void TakeReplies(Conn& c, int n) {
    for (int i = 0; i < n; ++i) {
      Completion wc;
      bool intact = true;
      if (!c.qp->CompleteNext(&wc, &intact)) return;
      CHECK(intact, "a reply buffer was reused before its SEND completed");
      WorkerTestPeer::Dispatch(*worker_, wc);
    }
  }
  void SetLock() {
    const std::string& key = Key();
    const LockPlace place = Place(key);
    uint64_t& w = locks_[place.index];
    if (in_.ConsumeBool()) {
      w = 0;
    } else {
      // The key's own byte, every key of the word, or any byte (another key's).
      const int cover = in_.ConsumeIntegralInRange<int>(0, 2);
      const uint8_t k = cover == 0 ? place.key : cover == 1 ? kLockAllKeys : in_.ConsumeIntegral<uint8_t>();
      w = PackLock(in_.ConsumeIntegralInRange<uint32_t>(1, 3), k,
                   clock_ + in_.ConsumeIntegralInRange<uint64_t>(0, 2000) - 500);
    }
  }
  void ExpireAssemblies() {
    WorkerTestPeer::ExpireAll(*worker_);
    for (Conn& c : conns_) {
      DropAssembly(c);
      // A READ past the timeout closes its connection (its flushed
      // completion, CompleteRead, gives its staging slot back).
      CHECK(c.reading.empty() || c.qp->broken(), "a rendezvous READ past the timeout left its connection open");
    }
    staging_busy_ -= staging_orphans_;  // a removed connection's slot comes back after the timeout
    staging_orphans_ = 0;
    CheckBudget();
  }
  void CheckBudget() {
    CHECK(budget_->used() == budget_model_, "assembly budget %llu, model %llu",
          static_cast<unsigned long long>(budget_->used()), static_cast<unsigned long long>(budget_model_));
  }
  void CheckStore() {
    for (const std::string& k : keys_) {
      std::string v;
      Status st = backend_->real->store().Get(k, &v);
      auto it = model_.find(k);
      if (it == model_.end()) {
        CHECK(st.IsNotFound(), "store has key %s (%zu bytes), model does not", k.c_str(), v.size());
      } else {
        CHECK(st.ok(), "store lost key %s: %s", k.c_str(), st.ToString().c_str());
        CHECK(v == it->second, "store value of %s differs from the model (%zu vs %zu bytes)", k.c_str(), v.size(),
              it->second.size());
      }
    }
  }

  FuzzedDataProvider& in_;
  server::ServerConfig cfg_;
  uint32_t max_inline_ = 0;
  uint32_t send_queue_ = 0;  // each fake QP's send queue depth
  std::unique_ptr<RewritingBackend> backend_;
  std::unique_ptr<server::AssemblyBudget> budget_;
  server::ServerCounters counters_;
  std::vector<uint64_t> locks_;
  uint64_t clock_ = 1;                  // the lease clock's time, set by the input
  server::ServerClock server_clock_{&clock_};  // what the worker reads
  std::vector<uint8_t> recv_mem_;
  std::unique_ptr<FakeRegion> recv_mr_;
  FakeSrq srq_;
  std::unique_ptr<server::Worker> worker_;
  bool in_place_ = false;         // READs land in the log (else in staging_)
  std::unique_ptr<FakeRegion> log_mr_;
  std::vector<uint8_t> staging_;  // the worker's rendezvous staging slots
  std::unique_ptr<FakeRegion> staging_mr_;
  uint32_t staging_busy_ = 0;     // slots with a READ in flight (or orphaned)
  uint32_t staging_orphans_ = 0;  // busy slots of removed connections
  std::map<uint64_t, Window> windows_;  // every window a client bound, by address
  uint32_t next_window_ = 0;
  Conn conns_[kConns];
  std::vector<std::string> keys_;  // this input's keys
  std::map<std::string, std::string> model_;
  std::map<std::string, uint64_t> versions_;  // the version of each value in model_, from the replies
  uint64_t last_version_ = 0;  // the newest version a reply named (the store is shared: versions grow across inputs)
  uint64_t budget_model_ = 0;
  uint32_t next_qp_ = 100;
  std::vector<uint32_t> freed_qps_;
  uint64_t next_recv_ = 0;
  uint32_t value_seed_ = 0;
};

}  // namespace
}  // namespace kvrdma::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kvrdma::SetLogLevel(kvrdma::LogLevel::kOff);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  kvrdma::fuzz::Harness h(in);
  h.Run();
  return 0;
}
