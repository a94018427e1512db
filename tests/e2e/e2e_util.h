// An in-process kvserver (real Server + Store) on a transport, and clients.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "client/client_internal.h"
#include "common/protocol/handshake.h"
#include "server/server.h"
#include "server/store_backend.h"
#include "tests/common/transport_test_util.h"

namespace kvrdma::testing {

// READs of a GET from the location cache: the index word that named the
// entry, then the entry, posted together (one round trip).
inline constexpr uint64_t kCachedGetReads = 2;

struct E2eParam {
  Kind kind;
  PutMode put_mode;
};

inline std::string E2eName(const ::testing::TestParamInfo<E2eParam>& i) {
  return std::string(i.param.kind == Kind::kLoopback ? "loopback" : "verbs") +
         (i.param.put_mode == PutMode::kSend ? "_send" : "_writeimm");
}

inline void PrintTo(const E2eParam& p, std::ostream* os) { *os << E2eName({p, 0}); }

class TestServer {
 public:
  TestServer(TransportEnv& env, server::ServerConfig cfg = Defaults(),
             const std::function<void(StoreConfig&)>& tweak = {})
      : env_(env), cfg_(cfg) {
    StoreConfig sc;
    sc.index_homes = 1 << 15;
    sc.segment_bytes = 4 << 20;  // > the largest entry (1 MiB value)
    sc.log_bytes = 64 << 20;
    sc.workers = cfg_.workers;
    sc.max_key_bytes = cfg_.max_key_bytes;
    sc.max_value_bytes = cfg_.max_value_bytes;
    sc.huge_pages = HugePages::kOff;
    sc.grace_period = std::chrono::milliseconds(cfg_.grace_period_ms);
    if (tweak) tweak(sc);
    auto b = server::StoreBackend::Create(sc);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(b).value();
    cfg_.listen = env.kind_is_verbs() ? env.addr : "";  // cfg.port 0: any free port
    server_ = std::make_unique<server::Server>(cfg_, env.server, *backend_);
    Status st = server_->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
    thread_ = std::thread([this] { (void)server_->Run(); });
  }
  ~TestServer() { Stop(); }
  void Stop() {
    if (!server_) return;
    server_->RequestStop();
    thread_.join();
    server_.reset();
  }
  static server::ServerConfig Defaults() {
    server::ServerConfig c;
    c.port = 0;  // any free port
    c.workers = 2;
    c.credits = 8;
    c.message_bytes = 4096;
    c.srq_depth = 256;
    c.lock_words = 1024;
    c.max_value_bytes = 1 << 20;
    c.max_key_bytes = 1023;
    // Every loopback client of a test is one address ("loop-client"): a test
    // that has one connection closed for breaking flow control and then
    // connects again would be refused. The tests of the back-off set it.
    c.flow_control_backoff_ms = 0;
    return c;
  }
  uint16_t port() const { return server_->port(); }
  const server::ServerConfig& config() const { return cfg_; }
  server::StoreBackend& backend() { return *backend_; }
  server::Server& server() { return *server_; }
  const server::Server& server() const { return *server_; }

  // rendezvous_bytes: ClientOptions::rendezvous_bytes (0 here unless given:
  // large PUTs in fragments; kLibraryDefault: the library's default).
  // dev: the client's device (null: the environment's).
  static constexpr int64_t kLibraryDefault = -1;
  Result<std::unique_ptr<Client>> Connect(PutMode mode, int64_t rendezvous_bytes = 0,
                                          std::shared_ptr<Device> dev = nullptr) {
    return ClientFactory::ConnectWith(dev != nullptr ? std::move(dev) : env_.client, Options(mode, rendezvous_bytes));
  }
  // The options Connect uses.
  ClientOptions Options(PutMode mode, int64_t rendezvous_bytes = 0) const {
    ClientOptions o;
    o.host = env_.addr;
    o.port = port();
    o.put_mode = mode;
    if (rendezvous_bytes != kLibraryDefault) o.rendezvous_bytes = static_cast<uint32_t>(rendezvous_bytes);
    o.op_timeout_ms = 10000;
    return o;
  }

 private:
  TransportEnv& env_;
  server::ServerConfig cfg_;
  std::unique_ptr<server::StoreBackend> backend_;
  std::unique_ptr<server::Server> server_;
  std::thread thread_;
};

// The server's counter `name`, read through c (STATS); ~0 and a test failure
// when it cannot be read.
inline uint64_t StatOf(Client& c, const std::string& name) {
  auto s = c.Stats();
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return ~uint64_t{0};
  for (auto& [n, v] : *s) {
    if (n == name) return v;
  }
  ADD_FAILURE() << "no stat " << name;
  return ~uint64_t{0};
}

// Waits (at most timeout_ms) until the server's counter `name` is `want`:
// the server applies what a client did on its own threads, after the client
// has seen its part done.
inline bool StatBecomes(Client& c, const std::string& name, uint64_t want, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  do {
    if (StatOf(c, name) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

// A TestServer with default settings per E2eParam, and clients of its put mode.
class E2eServerTest : public ::testing::TestWithParam<E2eParam> {
 protected:
  void SetUp() override;
  void TearDown() override { server_.reset(); }
  std::unique_ptr<Client> NewClient(int64_t rendezvous_bytes = 0);
  TransportEnv env_;
  std::unique_ptr<TestServer> server_;
};
inline void E2eServerTest::SetUp() {
  env_ = TransportEnv::Make(GetParam().kind);
  if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
  server_ = std::make_unique<TestServer>(env_);
}
inline std::unique_ptr<Client> E2eServerTest::NewClient(int64_t rendezvous_bytes) {
  auto c = server_->Connect(GetParam().put_mode, rendezvous_bytes);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

}  // namespace kvrdma::testing
