// kvrdma_abuser: connections that break kvserver's rules on purpose, for the
// fairness benchmark (bench/fairness, issue 25). Each of --connections slots
// runs on its own thread over the verbs transport and the raw wire protocol
// (no client library: the library keeps the rules), and reconnects when the
// server closes it, until --seconds have passed:
//   flood  PUTs in batches of 4x its credits, one doorbell each, never waiting
//          for a reply: far past its credits.
//   hold   `credits` PUTs with no receive posted for the replies, then waits:
//          its replies can never be delivered.
//   hog    a FIRST fragment announcing the largest value, then one more
//          fragment every --trickle-ms: a PUT that holds assembly budget.
//   stats  the honest control, not an abuser: one STATS at a time, every reply
//          taken, --interval-ms apart; prints the latency of each percentile.
// At the end it prints one line `RESULT key=value ...` for scripts.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/protocol/handshake.h"
#include "common/protocol/messages.h"
#include "common/transport/transport.h"
#include "common/transport/verbs_transport.h"
#include "common/version.h"

namespace {

using namespace kvrdma;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string server = "127.0.0.1";
  uint16_t port = 7471;
  std::string device;
  std::string source;  // local address to connect from (empty: the route's)
  uint32_t connections = 32;
  std::string mode = "flood";
  double seconds = 10;
  uint32_t trickle_ms = 500;
  uint32_t interval_ms = 5;
  uint32_t reconnect_ms = 50;
  uint32_t refused_ms = 100;
};

struct Totals {
  std::atomic<uint64_t> opened{0}, refused{0}, closed_by_server{0}, messages{0}, errors{0};
  std::atomic<uint64_t> hog_refusals{0};  // hog: fragments the server answered with an error
};

// One raw connection: a send buffer at 0, reply receive buffers after it.
class RawConn {
 public:
  Status Connect(Device& dev, const Options& o, uint32_t receives, std::string* reject_reason) {
    uint8_t req[kMaxRequestData];
    const size_t n = EncodeConnectRequest(ConnectRequestMsg{}, req);
    ConnectOptions co;
    co.host = o.server;
    co.port = o.port;
    co.source = o.source;
    std::vector<uint8_t> reject;
    auto c = dev.Connect(co, QpConfig{}, {req, n}, &reject);
    if (!c.ok()) {
      auto r = DecodeReject(reject);
      if (r.ok()) *reject_reason = r->reason;
      return c.status();
    }
    conn_ = std::move(c).value();
    auto d = DecodeServerDescriptor(conn_->peer_private_data());
    if (!d.ok()) return d.status();
    desc_ = *d;
    receives_ = std::max<uint32_t>(receives, 1);
    mem_.assign(desc_.message_bytes + size_t{receives_} * kMaxReplySize, 0);
    auto mr = dev.RegisterMemory(mem_.data(), mem_.size(), kAccessLocalWrite);
    if (!mr.ok()) return mr.status();
    mr_ = std::move(mr).value();
    for (uint32_t i = 0; i < receives; ++i) KVRDMA_RETURN_IF_ERROR(PostReceive(i));
    return Status::OK();
  }
  // SENDs one message and waits for its send completion.
  Status Send(const std::vector<uint8_t>& msg) { return SendBatch(msg, 1); }
  // SENDs `n` copies of msg with one doorbell (only the last signaled: they
  // arrive back to back) and waits for the last one's send completion.
  Status SendBatch(const std::vector<uint8_t>& msg, uint32_t n) {
    std::memcpy(mem_.data(), msg.data(), msg.size());
    std::vector<SendWr> wrs(n);
    for (SendWr& w : wrs) {
      w.opcode = WrOpcode::kSend;
      w.local = mr_->Slice(0, static_cast<uint32_t>(msg.size()));
      w.signaled = false;
    }
    wrs.back().signaled = true;
    KVRDMA_RETURN_IF_ERROR(conn_->PostSend(wrs));
    Completion c[1];
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < deadline) {
      if (conn_->PollSend(c) > 0) return CompletionStatus(c[0]);
      if (Closed()) return Status::ConnectionLost("closed by the server");
      (void)conn_->send_cq().Wait(20);
    }
    return Status::Timeout("no send completion");
  }
  uint32_t max_send_wr() const { return conn_->max_send_wr(); }
  // The next reply's status (its receive posted again); Timeout if none came.
  Status::Code Reply(int timeout_ms) {
    Completion c[1];
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      if (conn_->recv_cq().Poll(c) > 0) {
        if (c[0].status != WcStatus::kSuccess) return Status::Code::kConnectionLost;
        const uint32_t i = static_cast<uint32_t>(c[0].wr_id);
        auto p = ParseReply({ReplyBuffer(i), c[0].byte_len});
        (void)PostReceive(i);
        return p.ok() ? p->header.status : Status::Code::kProtocol;
      }
      (void)conn_->recv_cq().Wait(20);
    }
    return Status::Code::kTimeout;
  }
  // True once the server closed the connection (a failed completion or a
  // disconnect event).
  bool Closed() {
    conn_->PollCmEvents();
    return conn_->broken();
  }
  void Disconnect() { conn_->Disconnect(); }
  const ServerDescriptor& desc() const { return desc_; }

 private:
  uint8_t* ReplyBuffer(uint32_t i) { return mem_.data() + desc_.message_bytes + size_t{i % receives_} * kMaxReplySize; }
  Status PostReceive(uint32_t i) {
    RecvWr r{i, mr_->Slice(desc_.message_bytes + size_t{i % receives_} * kMaxReplySize, kMaxReplySize)};
    return conn_->PostRecv({&r, 1});
  }
  std::unique_ptr<Connection> conn_;
  ServerDescriptor desc_;
  uint32_t receives_ = 1;
  std::vector<uint8_t> mem_;
  std::unique_ptr<MemoryRegion> mr_;
};

// A request message: header, the key when FIRST, then the fragment's bytes.
// Every fragment names the key's length (the server checks it against the
// FIRST's); only the FIRST carries the key.
std::vector<uint8_t> RequestMsg(RequestHeader h, const std::string& key, size_t frag_len) {
  h.key_len = static_cast<uint16_t>(key.size());
  h.frag_len = static_cast<uint32_t>(frag_len);
  std::vector<uint8_t> m(kRequestHeaderSize);
  EncodeRequestHeader(h, m.data());
  if (h.flags & kFlagFirst) m.insert(m.end(), key.begin(), key.end());
  m.insert(m.end(), frag_len, 'a');
  return m;
}

std::vector<uint8_t> SmallPut(const std::string& key, uint64_t id) {
  RequestHeader h;
  h.value_len = 16;
  h.request_id = id;
  return RequestMsg(h, key, 16);
}

bool Running(Clock::time_point end) { return Clock::now() < end; }

// How often a waiting connection looks for its closure: seldom, so that 32
// waiting threads take little of the CPU the server and honest client share.
constexpr auto kCheckEvery = std::chrono::milliseconds(100);

// Waits until the server closes `c` or the run ends: true if it was closed.
bool WaitClosed(RawConn& c, Clock::time_point end) {
  while (Running(end)) {
    if (c.Closed()) return true;
    std::this_thread::sleep_for(kCheckEvery);
  }
  return c.Closed();
}

// One abusive connection until the server closes it or the run ends; true
// if the server closed it.
bool Abuse(RawConn& c, const Options& o, uint32_t slot, Totals& t, Clock::time_point end) {
  const std::string key = "abuser-" + std::to_string(slot);
  const uint32_t credits = c.desc().credits;
  if (o.mode == "flood") {
    // Batches of 4x its credits, back to back; no reply is ever awaited.
    const uint32_t batch = std::min(4 * credits, c.max_send_wr());
    for (uint64_t id = 1; Running(end); ++id) {
      if (!c.SendBatch(SmallPut(key, id), batch).ok()) return WaitClosed(c, end);
      t.messages.fetch_add(batch);
    }
    return c.Closed();
  }
  if (o.mode == "hold") {
    for (uint32_t id = 1; id <= credits; ++id) {  // within its credits, no receive posted
      if (!c.Send(SmallPut(key, id)).ok()) return WaitClosed(c, end);
      t.messages.fetch_add(1);
    }
    return WaitClosed(c, end);
  }
  // hog: one PUT of the largest value, a full fragment every trickle_ms.
  const uint32_t value_len = c.desc().max_value_bytes;
  const size_t first_len = c.desc().message_bytes - kRequestHeaderSize - key.size();
  const size_t next_len = c.desc().message_bytes - kRequestHeaderSize;
  uint64_t id = 1;
  uint32_t offset = value_len;  // >= value_len: start a new PUT
  while (Running(end)) {
    RequestHeader h;
    h.value_len = value_len;
    h.request_id = id;
    size_t len;
    if (offset + next_len >= value_len) {  // (re)start, never completing the value
      h.flags = kFlagFirst;
      offset = 0;
      len = first_len;
    } else {
      h.flags = 0;
      len = next_len;
    }
    h.frag_offset = offset;
    if (!c.Send(RequestMsg(h, key, len)).ok()) return WaitClosed(c, end);
    t.messages.fetch_add(1);
    const Status::Code r = c.Reply(10000);
    if (r == Status::Code::kConnectionLost || r == Status::Code::kTimeout) return WaitClosed(c, end);
    if (r != Status::Code::kOk) {
      t.hog_refusals.fetch_add(1);
      offset = value_len;  // the assembly was dropped: start again
      ++id;
    } else {
      offset += static_cast<uint32_t>(len);
    }
    const auto next = Clock::now() + std::chrono::milliseconds(o.trickle_ms);
    while (Running(end) && Clock::now() < next) {
      if (c.Closed()) return true;
      std::this_thread::sleep_for(std::min<Clock::duration>(kCheckEvery, next - Clock::now()));
    }
  }
  return c.Closed();
}

// The honest control: STATS one at a time; latencies in ns.
void Probe(RawConn& c, const Options& o, Totals& t, Clock::time_point end, std::vector<int64_t>& lat) {
  for (uint64_t id = 1; Running(end); ++id) {
    RequestHeader h;
    h.opcode = Opcode::kStats;
    h.request_id = id;
    const auto t0 = Clock::now();
    Status::Code r = Status::Code::kConnectionLost;
    if (c.Send(RequestMsg(h, "", 0)).ok()) r = c.Reply(10000);
    lat.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    t.messages.fetch_add(1);
    if (r != Status::Code::kOk) {
      t.errors.fetch_add(1);
      if (c.Closed()) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o.interval_ms));
  }
}

double PercentileUs(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))]) / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "kvrdma_abuser: connections that break kvserver's rules, for bench/fairness (issue 25).\n"
      "Each of --connections connections runs --mode on its own thread over raw verbs and\n"
      "reconnects when the server closes it, until --seconds have passed:\n"
      "  flood  PUTs in batches of 4x its credits, no reply awaited: far past the credits\n"
      "  hold   as many PUTs as its credits with no receive posted: replies cannot be delivered\n"
      "  hog    a FIRST fragment announcing the largest value, then a fragment every --trickle-ms\n"
      "  stats  the honest control (one connection is enough): STATS one at a time, every reply\n"
      "         taken, --interval-ms apart; prints its p50/p99 and errors\n"
      "Prints how many connections the server closed, and a line `RESULT key=value ...`."};
  app.set_version_flag("--version", kvrdma::VersionLine("kvrdma_abuser"));
  app.add_option("-s,--server", o.server, "kvserver address")->capture_default_str();
  app.add_option("-p,--port", o.port, "kvserver port")->capture_default_str();
  app.add_option("--device", o.device, "Local RDMA device (default: the first)");
  app.add_option("--source", o.source,
                 "Local address to connect from (default: the route's), so that kvserver's per-address "
                 "limits tell these connections from other clients on the same host");
  app.add_option("-c,--connections", o.connections, "Connections at a time")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("-m,--mode", o.mode, "flood, hold, hog or stats")->capture_default_str()
      ->check(CLI::IsMember({"flood", "hold", "hog", "stats"}));
  app.add_option("--seconds", o.seconds, "How long to run")->capture_default_str();
  app.add_option("--trickle-ms", o.trickle_ms, "hog: pause between fragments")->capture_default_str();
  app.add_option("--interval-ms", o.interval_ms, "stats: pause between probes")->capture_default_str();
  app.add_option("--reconnect-ms", o.reconnect_ms, "Pause before reconnecting a connection the server closed")
      ->capture_default_str();
  app.add_option("--refused-ms", o.refused_ms, "Pause before connecting again after a refused connect")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto dev = OpenVerbsDevice(o.device);
  if (!dev.ok()) {
    std::fprintf(stderr, "kvrdma_abuser: %s\n", dev.status().ToString().c_str());
    return 1;
  }
  Totals t;
  std::vector<std::vector<int64_t>> lat(o.connections);
  const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.seconds * 1000));
  std::vector<std::thread> threads;
  for (uint32_t slot = 0; slot < o.connections; ++slot) {
    threads.emplace_back([&, slot] {
      while (Running(end)) {
        RawConn c;
        std::string reason;
        const uint32_t receives = o.mode == "hold" ? 0 : 8;
        if (Status s = c.Connect(**dev, o, receives, &reason); !s.ok()) {
          t.refused.fetch_add(1);
          if (t.refused.load() <= 3)
            std::fprintf(stderr, "kvrdma_abuser: connect: %s %s\n", s.ToString().c_str(), reason.c_str());
          std::this_thread::sleep_for(std::chrono::milliseconds(o.refused_ms));
          continue;
        }
        t.opened.fetch_add(1);
        if (o.mode == "stats") {
          Probe(c, o, t, end, lat[slot]);
          if (c.Closed()) t.closed_by_server.fetch_add(1);
        } else if (Abuse(c, o, slot, t, end)) {
          t.closed_by_server.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(o.reconnect_ms));  // then reconnect
          continue;
        }
        c.Disconnect();
        return;
      }
    });
  }
  for (auto& th : threads) th.join();
  std::printf("%s: %u connections at a time for %.1f s: %" PRIu64 " opened, %" PRIu64
              " closed by the server, %" PRIu64 " connects refused, %" PRIu64 " messages sent\n",
              o.mode.c_str(), o.connections, o.seconds, t.opened.load(), t.closed_by_server.load(), t.refused.load(),
              t.messages.load());
  std::printf("RESULT mode=%s opened=%" PRIu64 " closed=%" PRIu64 " refused=%" PRIu64 " messages=%" PRIu64,
              o.mode.c_str(), t.opened.load(), t.closed_by_server.load(), t.refused.load(), t.messages.load());
  if (o.mode == "hog") std::printf(" hog_refusals=%" PRIu64, t.hog_refusals.load());
  if (o.mode == "stats") {
    std::vector<int64_t> all;
    for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
    std::printf(" n=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f errors=%" PRIu64, all.size(), PercentileUs(all, 0.5),
                PercentileUs(all, 0.99), PercentileUs(all, 1.0), t.errors.load());
  }
  std::printf("\n");
  return 0;
}
