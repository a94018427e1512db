// Hostile clients against the server's request path (issue 12): each test
// replays one attack that broke c1cae9c and checks that the server now
// refuses it, keeps the store intact and keeps serving everyone else.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "server/server.h"
#include "server/store_backend.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/rogue_client.h"

namespace kvrdma::testing {
namespace {

// The real store, with a hook that runs in the worker just before a request
// reaches the store (where a PUT could block in ReserveSpace, or a client
// could rewrite its ring meanwhile).
class HookedBackend final : public server::Backend {
 public:
  explicit HookedBackend(std::unique_ptr<server::StoreBackend> real) : real_(std::move(real)) {}
  Status Put(uint32_t worker, std::span<const uint8_t> key, std::span<const uint8_t> value,
             const CommitCheck& check, bool wait_for_space, uint64_t* version) override {
    RunHook(key);
    SlowDown(key);
    // The Gate's PUT only holds the worker: it never waits for log space.
    if (std::string_view(reinterpret_cast<const char*>(key.data()), key.size()) == "gate") return Status::OK();
    return real_->Put(worker, key, value, check, wait_for_space, version);
  }
  Status PutChecked(uint32_t worker, std::span<const uint8_t> key, std::span<const uint8_t> value, uint64_t expected,
                    const CommitCheck& check, bool wait_for_space, uint64_t* version) override {
    RunHook(key);
    SlowDown(key);
    return real_->PutChecked(worker, key, value, expected, check, wait_for_space, version);
  }
  Status Delete(uint32_t worker, std::span<const uint8_t> key, const CommitCheck& check, bool wait_for_space,
                uint64_t* version) override {
    RunHook(key);
    return real_->Delete(worker, key, check, wait_for_space, version);
  }
  // A durable store's Commit (as StoreBackend with --data-dir), counted;
  // the store itself keeps memory only. Set before the server starts.
  void PretendDurable() { durable_ = true; }
  bool durable() const override { return durable_; }
  Status Commit(uint32_t worker) override {
    commits_.fetch_add(1, std::memory_order_relaxed);
    return real_->Commit(worker);
  }
  uint64_t commits() const { return commits_.load(std::memory_order_relaxed); }
  server::StoreRegions regions() const override { return real_->regions(); }
  void AppendStats(std::vector<std::pair<std::string_view, uint64_t>>* out) const override {
    real_->AppendStats(out);
  }
  // Runs `h` once, for the next request whose key is `key`.
  void HookOnce(std::string key, std::function<void()> h) {
    std::lock_guard<std::mutex> g(mu_);
    hook_key_ = std::move(key);
    hook_ = std::move(h);
  }
  Store& store() { return real_->store(); }
  // Every PUT of a key starting with `prefix` takes `delay` more in the
  // worker (as a slow store would): traffic that keeps a worker busy.
  void SlowPutsOf(std::string prefix, std::chrono::microseconds delay) {
    std::lock_guard<std::mutex> g(mu_);
    slow_put_prefix_ = std::move(prefix);
    slow_put_delay_ = delay;
  }
  // From now on, every request whose key starts with `prefix` spends `ms`
  // more in the store (on the worker).
  void SlowKeys(std::string prefix, int ms) {
    std::lock_guard<std::mutex> g(mu_);
    slow_prefix_ = std::move(prefix);
    slow_ms_ = ms;
  }
  // The keys of the PUT/DELETEs that reached the store, in order.
  std::vector<std::string> Applied() {
    std::lock_guard<std::mutex> g(mu_);
    return applied_;
  }

 private:
  void SlowDown(std::span<const uint8_t> key) {
    std::chrono::microseconds d{0};
    {
      std::lock_guard<std::mutex> g(mu_);
      std::string_view k(reinterpret_cast<const char*>(key.data()), key.size());
      if (!slow_put_prefix_.empty() && k.starts_with(slow_put_prefix_)) d = slow_put_delay_;
    }
    if (d.count() > 0) std::this_thread::sleep_for(d);
  }
  void RunHook(std::span<const uint8_t> key) {
    const std::string_view k(reinterpret_cast<const char*>(key.data()), key.size());
    std::function<void()> h;
    int slow_ms = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      applied_.emplace_back(k);
      if (!slow_prefix_.empty() && k.starts_with(slow_prefix_)) slow_ms = slow_ms_;
      if (hook_ && k == hook_key_) {
        h = std::move(hook_);
        hook_ = nullptr;
      }
    }
    if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
    if (h) h();
  }
  std::unique_ptr<server::StoreBackend> real_;
  std::mutex mu_;
  std::string hook_key_;
  std::function<void()> hook_;
  std::string slow_prefix_;
  std::string slow_put_prefix_;
  std::chrono::microseconds slow_put_delay_{0};
  int slow_ms_ = 0;
  std::vector<std::string> applied_;
  bool durable_ = false;
  std::atomic<uint64_t> commits_{0};
};

class HostileClientTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
  }
  void TearDown() override { StopServer(); }

  // Starts kvserver (the real Server over the hooked store) with cfg.
  // store_tweak: changes to the store's configuration (a smaller log...).
  void StartServer(server::ServerConfig cfg = TestServer::Defaults(),
                   const std::function<void(StoreConfig&)>& store_tweak = {}) {
    StoreConfig sc;
    sc.index_homes = 1 << 15;
    sc.segment_bytes = 4 << 20;
    sc.log_bytes = 64 << 20;
    sc.workers = cfg.workers;
    sc.max_key_bytes = cfg.max_key_bytes;
    sc.max_value_bytes = cfg.max_value_bytes;
    sc.huge_pages = HugePages::kOff;
    sc.grace_period = std::chrono::milliseconds(cfg.grace_period_ms);
    if (store_tweak) store_tweak(sc);
    auto b = server::StoreBackend::Create(sc);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::make_unique<HookedBackend>(std::move(b).value());
    if (durable_backend_) backend_->PretendDurable();
    cfg.listen = env_.kind_is_verbs() ? env_.addr : "";
    cfg_ = cfg;
    server_ = std::make_unique<server::Server>(cfg, env_.server, *backend_);
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    thread_ = std::thread([this] { (void)server_->Run(); });
    good_ = Connect(PutMode::kSend);
    ASSERT_TRUE(good_);
    ASSERT_TRUE(good_->Put("precious", "value that must survive").ok());
  }
  void StopServer() {
    good_.reset();
    if (!server_) return;
    server_->RequestStop();
    thread_.join();
    server_.reset();
  }
  std::unique_ptr<Client> Connect(PutMode mode, int op_timeout_ms = 10000) {
    ClientOptions o;
    o.host = env_.addr;
    o.port = server_->port();
    o.put_mode = mode;
    o.op_timeout_ms = op_timeout_ms;
    auto c = ClientFactory::ConnectWith(env_.client, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  void ExpectStoreIntactAndServing() {
    std::string got;
    ASSERT_TRUE(good_->Get("precious", &got).ok());
    EXPECT_EQ(got, "value that must survive");
    ASSERT_TRUE(good_->Put("still", "serving").ok());
    ASSERT_TRUE(good_->Get("still", &got).ok());
    EXPECT_EQ(got, "serving");
  }
  // The value of key in the store (server side), or "<none>".
  std::string Stored(std::string_view key) {
    std::string v;
    Status st = backend_->store().Get(key, &v);
    return st.ok() ? v : "<none>";
  }
  uint64_t Stat(const std::string& name) { return StatOf(*good_, name); }
  // Holds the worker that applies a PUT of "gate" (sent here on its own
  // connection) inside the store until Open(): messages sent meanwhile wait
  // in its completion queue, as behind any slow request.
  class Gate {
   public:
    explicit Gate(HostileClientTest& t) : t_(t) {
      t_.backend_->HookOnce("gate", [this] {
        std::unique_lock<std::mutex> l(mu_);
        entered_ = true;
        cv_.notify_all();
        cv_.wait_for(l, std::chrono::seconds(20), [this] { return open_; });
        left_ = true;  // the last use of this Gate by the worker
        cv_.notify_all();
      });
      EXPECT_TRUE(conn_.Connect(t_.env_, t_.server_->port()).ok());
      EXPECT_TRUE(conn_.Send(WholePut("gate", "g", 1)).ok());
      std::unique_lock<std::mutex> l(mu_);
      EXPECT_TRUE(cv_.wait_for(l, std::chrono::seconds(10), [this] { return entered_; })) << "the gate PUT never ran";
    }
    // Opens, then waits until the worker has left the hook: it still reads
    // this Gate's members after it is woken.
    ~Gate() {
      Open();
      std::unique_lock<std::mutex> l(mu_);
      if (entered_) cv_.wait(l, [this] { return left_; });
    }
    void Open() {
      {
        std::lock_guard<std::mutex> g(mu_);
        open_ = true;
      }
      cv_.notify_all();
    }

   private:
    HostileClientTest& t_;
    RogueClient conn_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool entered_ = false, open_ = false, left_ = false;
  };
  bool StatBecomes(const std::string& name, uint64_t want, int timeout_ms) {
    return testing::StatBecomes(*good_, name, want, timeout_ms);
  }

  TransportEnv env_;
  server::ServerConfig cfg_;
  std::unique_ptr<HookedBackend> backend_;
  bool durable_backend_ = false;  // StartServer: backend_->PretendDurable()
  std::unique_ptr<server::Server> server_;
  std::thread thread_;
  std::unique_ptr<Client> good_;
};

RequestHeader Fragment(uint8_t flags, uint32_t value_len, uint32_t offset, uint64_t id = 7) {
  RequestHeader h;
  h.flags = flags;
  h.value_len = value_len;
  h.frag_offset = offset;
  h.request_id = id;
  return h;
}

// Finding 1: a later fragment was checked against its own value_len, never
// the FIRST's, which sized the buffer: FIRST (16 bytes) + LAST (value_len
// 3016, offset 16, 3000 bytes) wrote 3000 bytes past a 16-byte buffer.
TEST_P(HostileClientTest, FragmentsMustExtendTheAssemblyTheirFirstStarted) {
  StartServer();
  for (PutPath path : {PutPath::kSend, PutPath::kWriteImm}) {
    RogueClient r;
    ASSERT_TRUE(r.Connect(env_, server_->port(), path).ok());
    auto send = [&](const std::vector<uint8_t>& m) {
      Status st = path == PutPath::kSend ? r.Send(m) : r.WriteImm(m, 0);
      ASSERT_TRUE(st.ok()) << st.ToString();
    };
    const std::string k = "frag-key";
    struct Case {
      const char* what;
      uint32_t first_value_len;  // the FIRST carries 16 bytes of it
      RequestHeader later;
      size_t later_bytes;
    };
    auto with = [](RequestHeader h, auto change) {
      change(h);
      return h;
    };
    const Case cases[] = {
        {"a longer total length (the overflow)", 16, Fragment(kFlagLast, 3016, 16), 3000},
        {"a shorter total length", 32, Fragment(kFlagLast, 20, 16), 4},
        {"another request id", 32, Fragment(kFlagLast, 32, 16, 8), 16},
        {"another key length", 32, with(Fragment(kFlagLast, 32, 16), [](auto& h) { h.key_len = 3; }), 16},
        {"another lock token", 32, with(Fragment(kFlagLast, 32, 16), [](auto& h) { h.lock_token = 99; }), 16},
        {"a gap", 64, Fragment(0, 64, 20), 8},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.what) + (path == PutPath::kSend ? " (send)" : " (write-imm)"));
      RequestHeader first = Fragment(kFlagFirst, c.first_value_len, 0);
      first.key_len = static_cast<uint16_t>(k.size());
      send(RequestMsg(first, k, std::string(16, 'a')));
      RawReply a = r.Reply();
      ASSERT_EQ(a.code, Status::Code::kOk) << a.body;
      EXPECT_EQ(a.flags, kReplyFragmentAck);
      RequestHeader later = c.later;
      if (later.key_len == 0) later.key_len = static_cast<uint16_t>(k.size());
      send(RequestMsg(later, k, std::string(c.later_bytes, 'B')));
      RawReply b = r.Reply();
      EXPECT_EQ(b.code, Status::Code::kInvalidArgument) << b.body;
      EXPECT_EQ(Stored(k), "<none>");
    }
    // The connection still works, and so does a well-formed fragmented PUT.
    RequestHeader f = Fragment(kFlagFirst, 24, 0, 11);
    f.key_len = static_cast<uint16_t>(k.size());
    send(RequestMsg(f, k, std::string(16, 'x')));
    EXPECT_EQ(r.Reply().code, Status::Code::kOk);
    RequestHeader l = Fragment(kFlagLast, 24, 16, 11);
    l.key_len = static_cast<uint16_t>(k.size());
    send(RequestMsg(l, k, std::string(8, 'y')));
    EXPECT_EQ(r.Reply().code, Status::Code::kOk);
    EXPECT_EQ(Stored(k), std::string(16, 'x') + std::string(8, 'y'));
    ASSERT_TRUE(good_->Delete(k).ok());
  }
  ExpectStoreIntactAndServing();
}

// Finding 2: the worker read key and value straight out of the ring (which
// the client can still write) several times: lock check with one key, store
// under another. Here the client rewrites its ring (an RDMA WRITE on its own
// QP) after the server received the request and before the store applied
// it; the server must apply what it received, once copied.
TEST_P(HostileClientTest, RingRewrittenDuringApplyChangesNothing) {
  StartServer();
  auto holder = Connect(PutMode::kSend);
  ASSERT_TRUE(holder);
  ASSERT_TRUE(holder->Put("lock-key", "guarded by a lock").ok());
  ASSERT_TRUE(holder->Lock("lock-key", std::chrono::milliseconds(60000)).ok());
  RogueClient r;
  ASSERT_TRUE(r.Connect(env_, server_->port(), PutPath::kWriteImm).ok());
  auto msg = WholePut("open-key", "v1");
  std::atomic<bool> rewritten{false};
  Status rewrite_status = Status::Internal("hook not run");
  backend_->HookOnce("open-key", [&] {
    // Same length, another key (and another value): locked, and not asked for.
    auto evil = WholePut("lock-key", "v2");
    rewrite_status = r.WriteRing(evil, 0);
    rewritten.store(true);
  });
  // Unsignaled: the hook's WRITE is the one whose completion is awaited.
  ASSERT_TRUE(r.WriteImm(msg, 0, ~0u, /*wait=*/false).ok());
  for (int i = 0; i < 1000 && !rewritten.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(rewritten.load()) << "the store never saw the request";
  ASSERT_TRUE(rewrite_status.ok()) << rewrite_status.ToString();
  RawReply rep = r.Reply();
  EXPECT_EQ(rep.code, Status::Code::kOk) << rep.body;
  EXPECT_EQ(Stored("open-key"), "v1");
  EXPECT_EQ(Stored("lock-key"), "guarded by a lock");
  // The index agrees with the log: the client's GET path finds both.
  std::string got;
  ASSERT_TRUE(good_->Get("open-key", &got).ok());
  EXPECT_EQ(got, "v1");
  ASSERT_TRUE(good_->Get("lock-key", &got).ok());
  EXPECT_EQ(got, "guarded by a lock");
  ExpectStoreIntactAndServing();
}

// Finding 4: replies waited for one of the worker's shared reply buffers and
// polled re-entrantly meanwhile. Connections that post no receives, each
// with 4 STATS in flight (within their credits), held them all: the worker
// stalled until the reply timeout closed them, and an innocent client's
// replies came out of order. Now each connection answers from its own
// buffers: the innocent client is served at once, in order, while the
// hostile connections are still there.
// PUT latencies (us) of n PUTs by c, sorted.
std::vector<double> TimedPuts(Client& c, const std::string& prefix, int n) {
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    std::string k = prefix + std::to_string(i);
    auto t0 = std::chrono::steady_clock::now();
    Status st = c.Put(k, "v" + std::to_string(i));
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_TRUE(st.ok()) << k << ": " << st.ToString();
    if (!st.ok()) break;
  }
  std::sort(us.begin(), us.end());
  return us;
}
double Pct(const std::vector<double>& v, double p) {
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

TEST_P(HostileClientTest, ConnectionsThatTakeNoRepliesCannotStallOthers) {
  server::ServerConfig cfg = TestServer::Defaults();
  // The hostile connections must stand while the innocent client is
  // measured, however slow the machine: no reply timeout during the test
  // (other tests show the watchdog closes such connections).
  cfg.reply_timeout_ms = 0;
  StartServer(cfg);
  constexpr int kPuts = 300;
  auto innocent = Connect(PutMode::kSend);
  ASSERT_TRUE(innocent);
  const std::vector<double> base = TimedPuts(*innocent, "base-", kPuts);
  // 32 connections (16 per worker) that post no receives, each with 4 STATS
  // in flight: half by SEND, half in their rings, which a thread keeps
  // rewriting meanwhile.
  constexpr int kHostile = 32;
  std::vector<std::unique_ptr<RogueClient>> rogues;
  for (int i = 0; i < kHostile; ++i) {
    const PutPath path = i % 2 == 0 ? PutPath::kSend : PutPath::kWriteImm;
    rogues.push_back(std::make_unique<RogueClient>());
    RogueClient& r = *rogues.back();
    ASSERT_TRUE(r.Connect(env_, server_->port(), path, /*receives=*/0).ok()) << i;
    for (uint32_t k = 0; k < 4; ++k) {
      Status st = path == PutPath::kSend ? r.Send(StatsMsg(k + 1)) : r.WriteImm(StatsMsg(k + 1), k);
      ASSERT_TRUE(st.ok()) << i << ": " << st.ToString();
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rewrites{0};
  std::thread rewriter([&] {
    auto junk = WholePut("precious", "rewritten by a hostile ring");
    while (!stop.load()) {
      for (int i = 1; i < kHostile && !stop.load(); i += 2) {
        if (rogues[i]->WriteRing(junk, (rewrites.load() % 4) * rogues[i]->desc().message_bytes).ok()) ++rewrites;
      }
    }
  });
  std::vector<double> attacked;
  const auto t0 = std::chrono::steady_clock::now();
  auto innocent_imm = Connect(PutMode::kWriteImm);
  ASSERT_TRUE(innocent_imm);
  for (PutMode mode : {PutMode::kSend, PutMode::kWriteImm}) {
    Client* c = mode == PutMode::kSend ? innocent.get() : innocent_imm.get();
    auto us = TimedPuts(*c, mode == PutMode::kSend ? "send-" : "imm-", kPuts);
    attacked.insert(attacked.end(), us.begin(), us.end());
    auto s = c->Stats();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  // Served while the hostile connections still stand (not because the
  // reply timeout removed them).
  const uint64_t standing = Stat("connections");
  stop.store(true);
  rewriter.join();
  std::sort(attacked.begin(), attacked.end());
  std::printf("well-behaved client, %d PUTs alone: p50 %.0f us, p99 %.0f us; %zu PUTs beside %d connections holding "
              "their replies (%llu ring rewrites): p50 %.0f us, p99 %.0f us, %lld ms in all, 0 errors\n",
              kPuts, Pct(base, 0.5), Pct(base, 0.99), attacked.size(), kHostile,
              static_cast<unsigned long long>(rewrites.load()), Pct(attacked, 0.5), Pct(attacked, 0.99),
              static_cast<long long>(ms.count()));
  EXPECT_EQ(attacked.size(), 2u * kPuts);
  EXPECT_EQ(standing, uint64_t{kHostile} + 3);
  rogues.clear();
  EXPECT_TRUE(StatBecomes("connections", 3, 30000)) << Stat("connections");
  ExpectStoreIntactAndServing();
}

// Finding 4, the other half: connections that flood STATS and are closed
// holding replies that never complete must give back everything (nothing
// leaks into what the next connections get).
TEST_P(HostileClientTest, ClosedFloodersDoNotLeakReplyResources) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.reply_timeout_ms = 500;
  StartServer(cfg);
  // 40 flooders, in waves of 8. A flooder does not wait for its sends'
  // completions (each message staged in a place of its own): a SEND posted
  // after the server closed the connection does not complete (the closed QP
  // acknowledges nothing) until the wait's 5 s timeout, which made this test
  // take 60-100 s on Soft-RoCE.
  const int flooders = 40, wave = 8;
  for (int i = 0; i < flooders; i += wave) {
    std::vector<RogueClient> rs(wave);
    for (int j = 0; j < wave; ++j) {
      ASSERT_TRUE(rs[j].Connect(env_, server_->port(), PutPath::kSend, /*receives=*/0).ok()) << "flooder " << i + j;
    }
    for (int j = 0; j < wave; ++j) {
      for (uint32_t k = 0; k < 3 * cfg.credits; ++k) {
        // Each in a place of its own: the transport may still read the last.
        const std::vector<uint8_t> m = StatsMsg(k + 1);
        if (!rs[j].Send(m, /*wait=*/false, size_t{k} * 256).ok()) break;  // may be cut short
      }
    }
    for (int j = 0; j < wave; ++j) EXPECT_TRUE(rs[j].WaitClosed(10000)) << "flooder " << i + j;
  }
  EXPECT_TRUE(StatBecomes("connections", 1, 10000)) << Stat("connections");
  for (int i = 0; i < 4; ++i) {
    auto c = Connect(PutMode::kSend);
    ASSERT_TRUE(c);
    auto st = c->Stats();
    ASSERT_TRUE(st.ok()) << st.status().ToString();
  }
  ExpectStoreIntactAndServing();
}

// Issue 25, the fairness benchmark's "hold": a connection that sends as many
// PUTs as its credits (all it may have in flight) and posts no receive holds
// replies that can never be delivered. The replies are inline, and only one
// in 16 inline replies was signaled while the watchdog follows only
// signaled ones: with 8 credits the connection was never closed. Now one in
// min(16, credits) is signaled, so a connection that holds all its credits'
// replies holds one the watchdog follows: closed and counted within the
// reply timeout.
TEST_P(HostileClientTest, AConnectionThatHoldsAllItsCreditsInlineRepliesIsClosedAndCounted) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.reply_timeout_ms = 300;
  StartServer(cfg);
  const uint64_t closed_before = Stat("closed_flow_control");
  RogueClient holder;
  ASSERT_TRUE(holder.Connect(env_, server_->port(), PutPath::kSend, /*receives=*/0).ok());
  for (uint32_t k = 0; k < cfg.credits; ++k) {
    ASSERT_TRUE(holder.Send(WholePut("held-" + std::to_string(k), "v", k + 1)).ok()) << k;
  }
  EXPECT_TRUE(holder.WaitClosed(10000)) << "a connection holding its replies was not closed";
  EXPECT_TRUE(StatBecomes("closed_flow_control", closed_before + 1, 10000)) << Stat("closed_flow_control");
  // Every PUT was applied (the replies, not the requests, were held).
  for (uint32_t k = 0; k < cfg.credits; ++k) EXPECT_EQ(Stored("held-" + std::to_string(k)), "v") << k;
  ExpectStoreIntactAndServing();
}

// Finding 7: a FIRST fragment pinned up to max_value_bytes per connection,
// indefinitely. Now assemblies share a server-wide budget, charged for the
// bytes that arrived; their bytes come back when the connection closes or the
// assembly times out.
TEST_P(HostileClientTest, AssemblyMemoryIsBoundedAndReleasedOnCloseAndTimeout) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.assembly_bytes = 2 * cfg.max_value_bytes;
  // Long enough that no pause of a loaded Soft-RoCE guest between two of
  // fill's ~260 fragments expires an assembly (1000 ms did once in CI).
  cfg.assembly_timeout_ms = 3000;
  StartServer(cfg);
  const std::string key = "big";
  auto first = [&](uint64_t id) {
    RequestHeader h = Fragment(kFlagFirst, cfg.max_value_bytes, 0, id);
    return RequestMsg(h, key, std::string(1000, 'f'));
  };
  // Sends a FIRST and then fragments up to one byte short of the value: the
  // assembly holds a whole value's bytes (the budget's share of one
  // connection at most) and never completes.
  auto fill = [&](RogueClient& r) {
    ASSERT_TRUE(r.Send(first(1)).ok());
    ASSERT_EQ(r.Reply().code, Status::Code::kOk);
    const uint32_t chunk = 4000;  // fits a 4096-byte message buffer with the header and key
    for (uint32_t off = 1000; off < cfg.max_value_bytes - 1;) {
      const uint32_t n = std::min(chunk, cfg.max_value_bytes - 1 - off);
      ASSERT_TRUE(r.Send(RequestMsg(Fragment(0, cfg.max_value_bytes, off, 1), key, std::string(n, 'g'))).ok());
      ASSERT_EQ(r.Reply().code, Status::Code::kOk) << "fragment at " << off;
      off += n;
    }
  };
  auto a = std::make_unique<RogueClient>();
  RogueClient b, c;
  ASSERT_TRUE(a->Connect(env_, server_->port()).ok());
  ASSERT_TRUE(b.Connect(env_, server_->port()).ok());
  ASSERT_TRUE(c.Connect(env_, server_->port()).ok());
  fill(*a);
  fill(b);
  EXPECT_EQ(Stat("assembly_bytes"), 2 * uint64_t{cfg.max_value_bytes});
  // The budget is spent: a third is refused (retry later), not pinned.
  ASSERT_TRUE(c.Send(first(1)).ok());
  RawReply refused = c.Reply();
  EXPECT_EQ(refused.code, Status::Code::kNoResource) << refused.body;
  // a closes: its bytes come back, and c's FIRST is taken.
  a.reset();
  bool taken = false;
  for (uint64_t id = 2; id < 500 && !taken; ++id) {
    ASSERT_TRUE(c.Send(first(id)).ok());
    taken = c.Reply().code == Status::Code::kOk;
    if (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(taken) << "the closed connection's assembly was not released";
  // b and c never send the rest: after the timeout their bytes come back.
  EXPECT_TRUE(StatBecomes("assembly_bytes", 0, 10000)) << Stat("assembly_bytes");
  // A fragmented PUT through the client library still works.
  auto good = Connect(PutMode::kWriteImm);
  ASSERT_TRUE(good);
  std::string big(cfg.max_value_bytes, 'v');
  ASSERT_TRUE(good->Put(key, big).ok());
  EXPECT_EQ(Stored(key), big);
  ExpectStoreIntactAndServing();
}

// Issue 25, item 5: a FIRST announcing the largest value reserved all of it
// from the budget while carrying one byte, and a new FIRST restarted the
// clock: a few connections kept every other client's large PUT answered
// NoResource. Now the announced length reserves nothing: a connection holds
// what it sent.
TEST_P(HostileClientTest, AbusersAnnouncingLargeValuesCannotStarveALargePut) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.assembly_bytes = 2 * cfg.max_value_bytes;
  StartServer(cfg);
  std::vector<std::unique_ptr<RogueClient>> abusers;
  uint64_t id = 1;
  auto hold = [&](RogueClient& r) {  // a fresh FIRST: announces 1 MiB, carries 1 byte
    ASSERT_TRUE(r.Send(RequestMsg(Fragment(kFlagFirst, cfg.max_value_bytes, 0, ++id), "hog", "x")).ok());
    RawReply rep = r.Reply();
    ASSERT_EQ(rep.code, Status::Code::kOk) << rep.body;
  };
  for (int i = 0; i < 6; ++i) {
    abusers.push_back(std::make_unique<RogueClient>());
    ASSERT_TRUE(abusers.back()->Connect(env_, server_->port()).ok());
    hold(*abusers.back());
  }
  EXPECT_LE(Stat("assembly_bytes"), 6u) << "the announced lengths were reserved";
  for (PutMode mode : {PutMode::kSend, PutMode::kWriteImm}) {
    auto honest = Connect(mode);
    ASSERT_TRUE(honest);
    for (int round = 0; round < 3; ++round) {
      for (auto& a : abusers) hold(*a);  // renewed while the honest client works
      std::string big(cfg.max_value_bytes, static_cast<char>('a' + round));
      Status st = honest->Put("large", big);
      ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.ToString();
      EXPECT_EQ(Stored("large"), big);
    }
  }
  ExpectStoreIntactAndServing();
}

// Issue 25, item 5: the assembly timeout counted from the FIRST, although
// SECURITY.md promises "for its next fragment": a slow honest PUT whose
// fragments keep coming was dropped. Now it counts from the last fragment.
TEST_P(HostileClientTest, AssemblyTimeoutCountsFromTheLastFragment) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.assembly_timeout_ms = 300;
  StartServer(cfg);
  const uint32_t len = 40 * 100;
  RogueClient slow;
  ASSERT_TRUE(slow.Connect(env_, server_->port()).ok());
  ASSERT_TRUE(slow.Send(RequestMsg(Fragment(kFlagFirst, len, 0, 3), "slow", std::string(100, 's'))).ok());
  ASSERT_EQ(slow.Reply().code, Status::Code::kOk);
  // A fragment every 100 ms for 1.2 s: four timeouts after the FIRST, never
  // one after the previous fragment.
  uint32_t off = 100;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= 12; ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(100 * i));
    ASSERT_TRUE(slow.Send(RequestMsg(Fragment(0, len, off, 3), "slow", std::string(100, 's'))).ok());
    RawReply r = slow.Reply();
    ASSERT_EQ(r.code, Status::Code::kOk) << "fragment " << i << " (" << 100 * i << " ms after the FIRST): " << r.body;
    off += 100;
  }
  ASSERT_TRUE(slow.Send(RequestMsg(Fragment(kFlagLast, len, off, 3), "slow", std::string(len - off, 'e'))).ok());
  RawReply done = slow.Reply();
  ASSERT_EQ(done.code, Status::Code::kOk) << done.body;
  EXPECT_EQ(Stored("slow"), std::string(off, 's') + std::string(len - off, 'e'));
  // One that stops sending is dropped: its next fragment finds no assembly.
  ASSERT_TRUE(slow.Send(RequestMsg(Fragment(kFlagFirst, len, 0, 4), "slow", std::string(100, 's'))).ok());
  ASSERT_EQ(slow.Reply().code, Status::Code::kOk);
  EXPECT_TRUE(StatBecomes("assembly_bytes", 0, 5000)) << Stat("assembly_bytes");
  ASSERT_TRUE(slow.Send(RequestMsg(Fragment(0, len, 100, 4), "slow", std::string(100, 's'))).ok());
  RawReply late = slow.Reply();
  EXPECT_EQ(late.code, Status::Code::kInvalidArgument) << late.body;
}

// Issue 25, item 5: abandoned assemblies were looked for only when the
// worker found its completion queue empty, so traffic that kept it busy let
// a stalled assembly hold its budget forever. Six connections keep eight
// slow PUTs each in flight on the only worker (it never finds its queue
// empty); a stalled assembly must still be dropped.
TEST_P(HostileClientTest, StalledAssemblyExpiresWhileTheWorkerIsBusy) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 1;
  cfg.assembly_timeout_ms = 300;
  StartServer(cfg);
  backend_->SlowPutsOf("busy", std::chrono::microseconds(3000));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> served{0};
  std::vector<std::thread> flood;
  for (int t = 0; t < 6; ++t) {
    flood.emplace_back([&, t] {
      RogueClient r;
      if (!r.Connect(env_, server_->port(), PutPath::kSend, cfg.credits).ok()) {
        ADD_FAILURE() << "flood connection " << t << " refused";
        return;
      }
      const auto put = WholePut("busy" + std::to_string(t), "v", 1);
      uint32_t in_flight = 0;
      while (!stop.load()) {
        while (in_flight < cfg.credits) {  // within its credits: it breaks no rule
          if (!r.Send(put).ok()) {
            ADD_FAILURE() << "flood send failed";
            return;
          }
          ++in_flight;
        }
        if (RawReply rep = r.Reply(5000); rep.code != Status::Code::kOk) {
          ADD_FAILURE() << "flood reply: " << static_cast<int>(rep.code) << " " << rep.body;
          return;
        }
        --in_flight;
        served.fetch_add(1);
      }
      while (in_flight > 0 && r.Reply(5000).code == Status::Code::kOk) --in_flight;
    });
  }
  while (served.load() < 100) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  RogueClient staller;
  ASSERT_TRUE(staller.Connect(env_, server_->port()).ok());
  ASSERT_TRUE(staller.Send(RequestMsg(Fragment(kFlagFirst, 4000, 0, 3), "stall", std::string(100, 's'))).ok());
  ASSERT_EQ(staller.Reply().code, Status::Code::kOk);
  const uint64_t before = served.load();
  const auto t_stall = std::chrono::steady_clock::now();
  const bool dropped = StatBecomes("assembly_bytes", 0, 5000);
  const auto waited = std::chrono::steady_clock::now() - t_stall;
  std::printf("the stalled assembly was dropped %lld ms after its last fragment (timeout %u ms)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()),
              cfg.assembly_timeout_ms);
  const uint64_t during = served.load() - before;
  const uint64_t held = dropped ? 0 : Stat("assembly_bytes");  // while the flood still runs
  stop.store(true);
  for (auto& t : flood) t.join();
  EXPECT_TRUE(dropped) << "a stalled assembly still holds " << held
                       << " bytes more than 5 s after its last fragment (timeout 300 ms)";
  EXPECT_GE(during, 20u) << "the flood did not keep the worker busy";  // 3 ms each: <= 1 per 3 ms
  ExpectStoreIntactAndServing();
}

// A stop (SIGTERM) under a load that never leaves the worker idle: six
// connections keep eight slow PUTs each in flight on the only worker, and
// send the next as soon as one is answered. The worker's drain after the
// stop is bounded (kStopDrainMs, 200 ms); until stop 46 it lasted until the
// load paused: here until the flood gave up, 20 s later (`tests/putback/run
// 26.stop`); on Soft-RoCE, StopUnderLoadTest's four synchronous clients held
// a stop for 0.1 to 32 s, by luck.
TEST_P(HostileClientTest, AStopEndsWhileClientsKeepTheWorkerBusy) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 1;
  StartServer(cfg);
  backend_->SlowPutsOf("busy", std::chrono::microseconds(3000));
  std::atomic<uint64_t> served{0};
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<std::thread> flood;
  for (int t = 0; t < 6; ++t) {
    flood.emplace_back([&, t] {
      RogueClient r;
      if (!r.Connect(env_, server_->port(), PutPath::kSend, cfg.credits).ok()) {
        ADD_FAILURE() << "flood connection " << t << " refused";
        return;
      }
      const auto put = WholePut("busy" + std::to_string(t), "v", 1);
      uint32_t in_flight = 0;
      while (std::chrono::steady_clock::now() < give_up) {
        while (in_flight < cfg.credits) {  // within its credits: it breaks no rule
          if (!r.Send(put).ok()) return;   // the server is gone
          ++in_flight;
        }
        if (r.Reply(5000).code != Status::Code::kOk) return;  // left unanswered by the stop, or disconnected
        --in_flight;
        served.fetch_add(1);
      }
    });
  }
  const auto loaded_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (served.load() < 100 && std::chrono::steady_clock::now() < loaded_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(served.load(), 100u) << "the flood did not get going";
  const auto t0 = std::chrono::steady_clock::now();
  StopServer();  // what SIGTERM does: stop accepting, drain, disconnect
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  const bool flooding = std::chrono::steady_clock::now() < give_up;
  for (auto& t : flood) t.join();
  std::printf("a stop while six connections keep the worker busy took %lld ms\n",
              static_cast<long long>(took.count()));
  EXPECT_LT(took.count(), 5000) << "the worker's drain went on while clients kept sending";
  EXPECT_TRUE(flooding) << "the flood gave up before the stop returned";
}

// Finding 8: the lock token was checked before the store reserved log space,
// which can block (full_wait + grace); an old holder's PUT could land after
// the next holder's. The hook blocks the old holder's PUT just before the
// store, as ReserveSpace would; the check now runs at the commit point.
TEST_P(HostileClientTest, LockIsCheckedAtTheCommitPoint) {
  StartServer();
  auto old_holder = Connect(PutMode::kSend);  // worker 1 (connections alternate)
  auto new_holder = Connect(PutMode::kSend);  // worker 0
  ASSERT_TRUE(old_holder && new_holder);
  ASSERT_TRUE(old_holder->Lock("fenced", std::chrono::milliseconds(200)).ok());
  std::mutex mu;
  std::condition_variable cv;
  bool blocked = false, release = false;
  backend_->HookOnce("fenced", [&] {
    std::unique_lock<std::mutex> l(mu);
    blocked = true;
    cv.notify_all();
    cv.wait_for(l, std::chrono::seconds(20), [&] { return release; });
  });
  Status old_put;
  std::thread t([&] { old_put = old_holder->Put("fenced", "old holder"); });
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return blocked; }));
  }
  // The old lease ends while its PUT waits; the new holder takes the lock
  // and writes.
  Status taken = Status::Locked("not tried");
  for (int i = 0; i < 500 && !taken.ok(); ++i) {
    taken = new_holder->TryLock("fenced", std::chrono::milliseconds(10000));
    if (!taken.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(taken.ok()) << taken.ToString();
  ASSERT_TRUE(new_holder->Put("fenced", "new holder").ok());
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  t.join();
  EXPECT_EQ(old_put.code(), Status::Code::kLocked) << old_put.ToString();
  EXPECT_EQ(Stored("fenced"), "new holder");
  ExpectStoreIntactAndServing();
}

// Lock words are readable by every client (they must be: TryLock READs and
// CASes them), so a holder's token is no secret. A request is allowed past a
// held lock only when the word's owner is the connection it came on: a
// token another client read from the table is refused.
TEST_P(HostileClientTest, AStolenLockTokenIsRefused) {
  StartServer();
  auto holder = Connect(PutMode::kSend);
  ASSERT_TRUE(holder);
  ASSERT_TRUE(holder->Put("guarded", "the holder's value").ok());
  ASSERT_TRUE(holder->Lock("guarded", std::chrono::milliseconds(60000)).ok());
  const server::LockView locks = server_->lock_view();
  const uint64_t word = __atomic_load_n(&locks.words[LockPlaceOf("guarded", locks.seed, locks.lock_words).index],
                                        __ATOMIC_ACQUIRE);
  ASSERT_NE(word, 0u) << "the lock word is not set";
  RogueClient thief;
  ASSERT_TRUE(thief.Connect(env_, server_->port()).ok());
  ASSERT_TRUE(thief.Send(WholePut("guarded", "stolen", 11, word)).ok());
  RawReply rep = thief.Reply();
  EXPECT_EQ(rep.code, Status::Code::kLocked) << rep.body;
  EXPECT_EQ(rep.request_id, 11u);
  EXPECT_EQ(Stored("guarded"), "the holder's value");
  // The holder's own token still works.
  ASSERT_TRUE(holder->Put("guarded", "the holder again").ok());
  EXPECT_EQ(Stored("guarded"), "the holder again");
  ExpectStoreIntactAndServing();
}

// Issue 25, item 3: credits were not enforced. A connection kept any number
// of messages at the server (the SRQ absorbed them) and the worker served
// them in completion order. Now the message that finds `credits` messages of
// its connection received and unanswered closes that connection (counted in
// closed_flow_control); a connection at exactly its credits is served.
TEST_P(HostileClientTest, AConnectionPastItsCreditsIsClosedAndCounted) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 1;  // every connection on the same worker
  StartServer(cfg);
  const uint64_t closed_before = Stat("closed_flow_control");
  RogueClient honest, flooder;
  ASSERT_TRUE(honest.Connect(env_, server_->port(), PutPath::kSend, cfg.credits).ok());
  ASSERT_TRUE(flooder.Connect(env_, server_->port(), PutPath::kSend, RogueClient::kMaxReceives).ok());
  {
    Gate gate(*this);
    // While the worker is busy: the honest connection sends all its
    // credits, the flooder one message more than its credits.
    for (uint32_t k = 0; k < cfg.credits; ++k) {
      ASSERT_TRUE(honest.Send(WholePut("honest-" + std::to_string(k), "v", k + 1)).ok());
    }
    for (uint32_t k = 0; k <= cfg.credits; ++k) ASSERT_TRUE(flooder.Send(StatsMsg(k + 1)).ok());
  }
  for (uint32_t k = 0; k < cfg.credits; ++k) {
    RawReply r = honest.Reply();
    EXPECT_EQ(r.code, Status::Code::kOk) << k << ": " << r.body;
    EXPECT_EQ(r.request_id, k + 1);
    EXPECT_EQ(Stored("honest-" + std::to_string(k)), "v");
  }
  EXPECT_TRUE(flooder.WaitClosed(5000)) << "a connection past its credits was not closed";
  EXPECT_TRUE(StatBecomes("closed_flow_control", closed_before + 1, 5000)) << Stat("closed_flow_control");
  // The honest connection is still served.
  ASSERT_TRUE(honest.Send(StatsMsg(100)).ok());
  RawReply r = honest.Reply();
  EXPECT_EQ(r.code, Status::Code::kOk) << r.body;
  EXPECT_EQ(r.request_id, 100u);
  ExpectStoreIntactAndServing();
}

// Issue 25, fairness (bench/fairness, "flood"): a connection past its credits
// is closed at once, so its client reconnected at once: 1,139 connects in a
// 10 s round, each a QP, a memory window and registrations that every client
// of the machine paid for (the honest client's PUT p99 11x, STATS p99 40x).
// Now a connection closed for breaking flow control has its address refused
// new connections for --flow-control-backoff-ms, doubled with each further
// such close, before anything is allocated for them, with the reason in the
// client's Status and a count, the refusal sent when the back-off ends (at
// most kRefusalDelayMaxMs after the request); connections open already are served on; the
// address connects again once its back-off has passed. Loopback tells
// addresses apart by device, so a client of another one connects meanwhile;
// over verbs every client here has one address, so a new honest connection
// from it is refused too (the trade-off docs/SECURITY.md states).
TEST_P(HostileClientTest, AnAddressWhoseConnectionsBreakFlowControlIsRefusedForItsBackoff) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 1;  // the Gate holds every connection's worker
  cfg.flow_control_backoff_ms = 1000;
  StartServer(cfg);  // good_ connects before any close
  TransportEnv from = env_;  // the flooder's address
  if (!env_.kind_is_verbs()) from.client = env_.fabric->CreateDevice("loop-flooder");
  const std::string addr = env_.kind_is_verbs() ? env_.addr : "loop-flooder";
  using Clock = std::chrono::steady_clock;

  // One connection from the flooder's address sends one message more than
  // its credits and is closed for it.
  auto flood_once = [&] {
    const uint64_t closed = Stat("closed_flow_control");
    RogueClient f;
    ASSERT_TRUE(f.Connect(from, server_->port(), PutPath::kSend, RogueClient::kMaxReceives).ok());
    {
      Gate gate(*this);
      for (uint32_t k = 0; k <= cfg.credits; ++k) ASSERT_TRUE(f.Send(StatsMsg(k + 1)).ok());
    }
    ASSERT_TRUE(f.WaitClosed(5000)) << "a connection past its credits was not closed";
    ASSERT_TRUE(StatBecomes("closed_flow_control", closed + 1, 5000)) << Stat("closed_flow_control");
  };
  auto connect = [&](const std::shared_ptr<Device>& dev) {
    ClientOptions o;
    o.host = env_.addr;
    o.port = server_->port();
    o.connect_timeout_ms = 5000;
    return ClientFactory::ConnectWith(dev, o);
  };
  // A refusal for the back-off: the ms it says are left (-1: another refusal).
  auto backoff_left = [&](const Status& st, uint32_t closes) -> int64_t {
    EXPECT_EQ(st.code(), Status::Code::kUnavailable) << st.ToString();
    const std::string want = "refused the connection: " + std::to_string(closes) + " connections from " + addr +
                             " broke flow control: refused for ";
    const size_t at = st.message().find(want);
    EXPECT_NE(at, std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find(" ms (kvserver --flow-control-backoff-ms)"), std::string::npos) << st.ToString();
    return at == std::string::npos ? -1 : std::stoll(st.message().substr(at + want.size()));
  };

  ASSERT_NO_FATAL_FAILURE(flood_once());
  const auto refused_at = Clock::now();
  // Open connections are served; a new one from another address connects
  // (over verbs every client has the flooder's address: the refusal below).
  ASSERT_TRUE(good_->Put("during the back-off", "served").ok());
  EXPECT_EQ(Stored("during the back-off"), "served");
  if (!env_.kind_is_verbs()) {
    auto other = connect(env_.client);
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    ASSERT_TRUE((*other)->Put("another address", "served").ok());
  }
  const auto asked_at = Clock::now();
  auto again = connect(from.client);
  const auto answered_at = Clock::now();
  ASSERT_FALSE(again.ok()) << "the flooder's address connected again at once";
  const int64_t left = backoff_left(again.status(), 1);
  EXPECT_GT(left, 0);
  EXPECT_LE(left, 1000);
  uint64_t refusals = 1;
  EXPECT_EQ(Stat("rejected_flow_control_backoff"), refusals);
  // The refusal waited for the back-off to end (a delayed refusal: a client
  // that reconnects at once when refused knocks a few times a second, not
  // hundreds; kRefusalDelayMaxMs).
  EXPECT_GE(std::chrono::duration_cast<std::chrono::milliseconds>(answered_at - asked_at).count() + 5,
            std::min<int64_t>(left, server::kRefusalDelayMaxMs))
      << "the refusal came before the back-off it names had passed";

  // Once its back-off has passed (not before), the address connects again.
  Result<std::unique_ptr<Client>> back = Status::Unavailable("not tried");
  for (int i = 0; i < 100 && !back.ok(); ++i) {
    back = connect(from.client);
    if (!back.ok()) {
      (void)backoff_left(back.status(), 1);
      ++refusals;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  const auto connected_at = Clock::now();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_GE(std::chrono::duration_cast<std::chrono::milliseconds>(connected_at - refused_at).count() + 1, left)
      << "the address connected before the back-off it was told of had passed";
  ASSERT_TRUE((*back)->Put("after the back-off", "served").ok());
  EXPECT_EQ(Stat("rejected_flow_control_backoff"), refusals);

  // A second close from the address doubles its back-off.
  ASSERT_NO_FATAL_FAILURE(flood_once());
  auto twice = connect(from.client);
  ASSERT_FALSE(twice.ok()) << "the flooder's address connected again at once after its second close";
  const int64_t left2 = backoff_left(twice.status(), 2);
  EXPECT_GT(left2, 1000) << "the second back-off is not longer than the first";
  EXPECT_LE(left2, 2000);
  EXPECT_EQ(Stat("rejected_flow_control_backoff"), refusals + 1);
  ExpectStoreIntactAndServing();
}

// Issue 25, item 3: the worker served completions in CQ order, so a request
// waited behind every message the other connections had queued (7 x 15
// PUTs waiting for a full log delayed a STATS by 10.5 s). Now it serves its
// connections round robin: a message waits for at most one message of each
// other connection per round. Asserted on the order the store applied the
// PUTs, not on time.
TEST_P(HostileClientTest, ARequestWaitsForAtMostOneMessageOfEachFloodingConnection) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 1;
  StartServer(cfg);
  constexpr int kFlooders = 6;
  std::vector<std::unique_ptr<RogueClient>> flooders;
  RogueClient honest;
  for (int i = 0; i < kFlooders; ++i) {
    flooders.push_back(std::make_unique<RogueClient>());
    ASSERT_TRUE(flooders.back()->Connect(env_, server_->port(), PutPath::kSend, cfg.credits).ok());
  }
  ASSERT_TRUE(honest.Connect(env_, server_->port()).ok());
  {
    Gate gate(*this);
    // Each flooder keeps all its credits in flight (allowed); the honest
    // connection's one PUT arrives after all of them.
    for (int i = 0; i < kFlooders; ++i) {
      for (uint32_t k = 0; k < cfg.credits; ++k) {
        ASSERT_TRUE(flooders[i]->Send(WholePut("flood-" + std::to_string(i) + "-" + std::to_string(k), "v", k + 1)).ok());
      }
    }
    ASSERT_TRUE(honest.Send(WholePut("honest", "h", 1)).ok());
  }
  RawReply r = honest.Reply();
  EXPECT_EQ(r.code, Status::Code::kOk) << r.body;
  for (auto& f : flooders) {
    for (uint32_t k = 0; k < cfg.credits; ++k) ASSERT_EQ(f->Reply(5000).code, Status::Code::kOk) << k;
  }
  const std::vector<std::string> applied = backend_->Applied();
  auto honest_at = std::find(applied.begin(), applied.end(), "honest");
  ASSERT_NE(honest_at, applied.end());
  const auto flood_before = std::count_if(applied.begin(), honest_at, [](const std::string& k) {
    return k.starts_with("flood-");
  });
  std::printf("%lld of %u flooding PUTs applied before the honest one\n", static_cast<long long>(flood_before),
              kFlooders * cfg.credits);
  EXPECT_LE(flood_before, kFlooders) << "the honest PUT waited for more than one round";
  EXPECT_EQ(Stat("closed_flow_control"), 0u);
  ExpectStoreIntactAndServing();
}

// Issue 24: a durable store answers a write only after a Commit (with
// --fsync always a flush: milliseconds on a disk), and a worker committed
// after every round, i.e. after one message of each connection: a client
// with all its credits in flight paid one flush per PUT (1.8 writes per
// flush at 2 threads x 16 in flight, bench/durable/fsync_modes). Now the
// worker serves the messages it has queued, up to kReplyBatch rounds, and
// one Commit makes them all durable. Counted on the Commits that answer 8
// queued PUTs of one connection.
TEST_P(HostileClientTest, ADurableWorkerCommitsTheWritesQueuedTogether) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 1;
  durable_backend_ = true;
  StartServer(cfg);
  RogueClient c;
  ASSERT_TRUE(c.Connect(env_, server_->port(), PutPath::kSend, cfg.credits).ok());
  uint64_t before = 0;
  {
    Gate gate(*this);
    before = backend_->commits();  // the gate's PUT is not committed yet
    for (uint32_t k = 0; k < cfg.credits; ++k) {
      ASSERT_TRUE(c.Send(WholePut("batch-" + std::to_string(k), "v", k + 1)).ok());
    }
    // Let every message reach the worker's completion queue (over RDMA they
    // land asynchronously) before it is released.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (uint32_t k = 0; k < cfg.credits; ++k) ASSERT_EQ(c.Reply(5000).code, Status::Code::kOk) << k;
  const uint64_t commits = backend_->commits() - before;
  std::printf("%llu Commits answered the gate's PUT and %u queued PUTs\n", static_cast<unsigned long long>(commits),
              cfg.credits);
  // The gate's own round, then one for the 8 PUTs (before: 1 + 8).
  EXPECT_LE(commits, 2u);
  ExpectStoreIntactAndServing();
}

// Issue 25, item 4: the reply watchdog started a reply's clock when it was
// queued, and replies leave at the end of a batch: slow requests of other
// connections queued behind an honest client's request got that client
// closed (with the default 5 s timeout, ~17 PUTs waiting for a full log).
// Now the clock starts when the reply is posted, and the watchdog counts only
// up to the worker's last complete poll of its CQ. Scaled down: a 300 ms
// timeout and 10 requests of 60 ms after the honest one.
TEST_P(HostileClientTest, SlowRequestsAfterAnHonestOneDoNotGetItsClientClosed) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 1;
  cfg.reply_timeout_ms = 300;
  StartServer(cfg);
  constexpr int kSlow = 10;
  constexpr int kSlowMs = 60;
  backend_->SlowKeys("slow-", kSlowMs);
  RogueClient honest;
  std::vector<std::unique_ptr<RogueClient>> slow;
  ASSERT_TRUE(honest.Connect(env_, server_->port()).ok());
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<RogueClient>());
    ASSERT_TRUE(slow.back()->Connect(env_, server_->port()).ok());
  }
  {
    Gate gate(*this);
    // A STATS: its large reply is signaled, so the watchdog follows it.
    ASSERT_TRUE(honest.Send(StatsMsg(1)).ok());
    for (int i = 0; i < kSlow; ++i) ASSERT_TRUE(slow[i]->Send(WholePut("slow-" + std::to_string(i), "v", 1)).ok());
  }
  RawReply r = honest.Reply();
  EXPECT_EQ(r.code, Status::Code::kOk) << r.body;
  EXPECT_EQ(r.request_id, 1u);
  for (auto& c : slow) EXPECT_EQ(c->Reply().code, Status::Code::kOk);
  // The honest connection is open and served; nobody was closed.
  ASSERT_TRUE(honest.Send(StatsMsg(2)).ok());
  EXPECT_EQ(honest.Reply().code, Status::Code::kOk);
  EXPECT_EQ(Stat("closed_flow_control"), 0u);
  ExpectStoreIntactAndServing();
}

// Issue 25, item 3, the store-full wait: a PUT that finds the log full waited
// up to full_wait + grace in the store, on the worker, so every PUT queued
// by a flood held all the worker's other connections that long. Now a worker
// waits for log space only when no other connection has a message waiting
// for it; otherwise the PUT is answered ServerFull at once and the worker
// goes on. Here full_wait is 2 s: 6 flooders with a PUT each ahead of a STATS
// held it >= 12 s with the wait (on main, 48 PUTs: ~100 s); now it is
// answered at once (asserted: within one full_wait).
TEST_P(HostileClientTest, AFullLogDoesNotHoldOtherConnectionsRequests) {
  server::ServerConfig cfg = TestServer::Defaults();
  cfg.workers = 1;
  cfg.max_value_bytes = 100000;  // entries must fit the 1 MiB segments
  constexpr auto kFullWait = std::chrono::milliseconds(2000);
  StartServer(cfg, [&](StoreConfig& sc) {
    sc.segment_bytes = 1 << 20;
    sc.log_bytes = 6 << 20;
    sc.full_wait = kFullWait;
  });
  // Fill the log with live values (nothing for the cleaner to free).
  const std::string value(60000, 'x');
  int stored = 0;
  for (; stored < 1000; ++stored) {
    Status st = good_->Put("fill-" + std::to_string(stored), value);
    if (st.code() == Status::Code::kServerFull) break;
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  ASSERT_LT(stored, 1000) << "the log never filled";
  // Then the segment tails, with values of the flooders' size.
  const std::string small(3000, 's');
  for (stored = 0; stored < 1000; ++stored) {
    Status st = good_->Put("fill-small-" + std::to_string(stored), small);
    if (st.code() == Status::Code::kServerFull) break;
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  ASSERT_LT(stored, 1000) << "the log never filled";
  constexpr int kFlooders = 6;
  std::vector<std::unique_ptr<RogueClient>> flooders;
  RogueClient honest;
  for (int i = 0; i < kFlooders; ++i) {
    flooders.push_back(std::make_unique<RogueClient>());
    ASSERT_TRUE(flooders.back()->Connect(env_, server_->port(), PutPath::kSend, cfg.credits).ok());
  }
  ASSERT_TRUE(honest.Connect(env_, server_->port()).ok());
  std::chrono::steady_clock::time_point sent;
  {
    Gate gate(*this);
    for (int i = 0; i < kFlooders; ++i) {
      for (uint32_t k = 0; k < cfg.credits; ++k) {
        ASSERT_TRUE(
            flooders[i]->Send(WholePut("more-" + std::to_string(i) + "-" + std::to_string(k), small, k + 1))
                .ok());
      }
    }
    ASSERT_TRUE(honest.Send(StatsMsg(1)).ok());
    sent = std::chrono::steady_clock::now();
  }
  RawReply r = honest.Reply(30000);
  const auto waited = std::chrono::steady_clock::now() - sent;
  EXPECT_EQ(r.code, Status::Code::kOk) << r.body;
  std::printf("STATS behind %d x %u PUTs into a full log: answered after %lld ms\n", kFlooders, cfg.credits,
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
  EXPECT_LT(waited, kFullWait) << "the STATS waited behind PUTs waiting for log space";
  for (auto& f : flooders) {
    for (uint32_t k = 0; k < cfg.credits; ++k) {
      RawReply p = f->Reply(30000);
      EXPECT_EQ(p.code, Status::Code::kServerFull) << p.body;
    }
  }
  EXPECT_EQ(Stat("closed_flow_control"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Loopback, HostileClientTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, HostileClientTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
