// Stateful fuzzer for the client's handling of replies: a hostile server (on
// the loopback transport) answers the real client's PUT/DELETE/STATS/CLOCK
// messages (a TryLock asks for the CLOCK, then CASes a lock word) as the
// input says: correctly, with another request id, status or flags, with
// garbage, twice, or not at all; a message of several writes (protocol 10)
// with its records, one of them with another id or status, one record
// missing, garbage, twice, or not at all. The client must never crash, hang
// past its operation timeout or trip a sanitizer; an operation either
// succeeds or fails with a Status. And once the server has broken the
// protocol in a way the client must notice (a second reply to one request,
// a reply to a request already answered, bytes that are no reply, or no reply
// at all), no operation started afterwards may succeed: the client fails the
// connection, and the server refuses its reconnects.
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "client/client_internal.h"
#include "common/format/window.h"
#include "common/log.h"
#include "common/protocol/handshake.h"
#include "common/protocol/messages.h"
#include "common/transport/loopback_transport.h"

namespace kvrdma::fuzz {
namespace {

constexpr uint32_t kMessageBytes = 512;
constexpr uint16_t kCredits = 4;

struct Fabric {
  std::shared_ptr<LoopbackFabric> fabric = LoopbackFabric::Create();
  std::shared_ptr<Device> server = fabric->CreateDevice("fuzz-server");
  std::shared_ptr<Device> client = fabric->CreateDevice("fuzz-client");
  // Regions the descriptor names (never read: the ops here send messages).
  std::vector<uint8_t> mem = std::vector<uint8_t>(1 << 16, 0);
  std::unique_ptr<MemoryRegion> mr;
  Fabric() {
    auto r = server->RegisterMemory(mem.data(), mem.size(),
                                    kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic);
    if (!r.ok()) std::abort();
    mr = std::move(r).value();
  }
};

Fabric& F() {
  static Fabric f;
  return f;
}

// How the server answers one message.
struct Answer {
  uint8_t kind;  // 0 correct, 1 other id, 2 other status, 3 other flags, 4 garbage, 5 twice, 6 none
  uint8_t status;
  uint8_t flags;
  uint64_t id;
  std::vector<uint8_t> bytes;
};

// Posts one SEND of `len` bytes at `send` and waits for its completion.
void SendReply(Connection& conn, size_t len) {
  Fabric& f = F();
  SendWr w;
  w.opcode = WrOpcode::kSend;
  w.local = f.mr->Slice(49152, static_cast<uint32_t>(len));
  w.signaled = true;
  if (!conn.PostSend({&w, 1}).ok()) return;
  Completion done[1];
  for (int t = 0; t < 100000 && conn.PollSend(done) == 0; ++t) std::this_thread::yield();
}

// Answers a message of several writes as `a` says (0 right, 1 one record with
// another id, 2 one with another status, 3 a record missing, 4 garbage, 5
// twice, 6 none). False: the client must take the protocol as broken (by the
// documented rule: n records with the requests' ids in order, or one error
// record to the first request's id; and exactly one reply per message).
bool AnswerWrites(Connection& conn, std::span<const ParsedRequest> reqs, const Answer& a, uint8_t* send) {
  const size_t n = reqs.size();
  size_t len = 0;
  for (size_t r = 0; r < (a.kind == 3 ? n - 1 : n); ++r) {
    ReplyHeader h;
    h.request_id = a.kind == 1 && r == a.id % n ? a.id : reqs[r].header.request_id;
    if (a.kind == 2 && r == a.id % n) h.status = static_cast<Status::Code>(a.status % 17);
    len += EncodeReply(h, a.kind == 2 ? std::span<const uint8_t>(a.bytes) : std::span<const uint8_t>{},
                       {send + len, kMaxReplySize - len});
  }
  if (a.kind == 4) {
    len = std::min<size_t>(a.bytes.size(), kMaxReplySize);
    if (len > 0) std::memcpy(send, a.bytes.data(), len);
  }
  for (int k = 0; k < (a.kind == 5 ? 2 : a.kind == 6 ? 0 : 1); ++k) SendReply(conn, len);
  if (a.kind == 5 || a.kind == 6) return false;
  std::array<ParsedReply, kMaxRequestsPerMessage> rec;
  auto got = ParseReplies({send, len}, rec);
  if (!got.ok()) return false;
  if (*got == 1 && rec[0].header.status != Status::Code::kOk && rec[0].header.request_id == reqs[0].header.request_id) {
    return true;  // the whole message refused
  }
  if (*got != n) return false;
  for (size_t r = 0; r < n; ++r) {
    if (rec[r].header.request_id != reqs[r].header.request_id) return false;
  }
  return true;
}

void Serve(Listener& l, const std::vector<Answer>& answers, std::atomic<bool>& stop, std::atomic<bool>& broken,
           std::atomic<bool>& ran_ahead) {
  Fabric& f = F();
  std::unique_ptr<Connection> conn;
  for (int i = 0; i < 50 && !conn && !stop.load(); ++i) {
    auto ev = l.NextEvent(20);
    if (!ev.ok() || ev->type != CmEvent::Type::kConnectRequest) continue;
    ServerDescriptor d;
    d.conn_id = 1;
    d.index = {f.mr->base(), 16 * kWordBytes, f.mr->rkey()};
    d.index_homes = 2;
    d.index_window = 8;
    d.log = {f.mr->base() + 4096, 4096, f.mr->rkey()};
    d.locks = {f.mr->base() + 8192, 9 * 8, f.mr->rkey()};
    d.ring = {f.mr->base() + 16384, kCredits * kMessageBytes, f.mr->rkey()};
    d.message_bytes = kMessageBytes;
    d.credits = kCredits;
    d.max_key_bytes = 64;
    d.max_value_bytes = 4096;
    d.round_limit_us = 50000;
    d.lock_words = 8;
    uint8_t buf[kMaxAcceptData];
    size_t n = EncodeServerDescriptor(d, buf);
    QpConfig qc;
    qc.max_inline = 256;
    auto c = ev->request->Accept(qc, {buf, n});
    if (c.ok()) conn = std::move(c).value();
  }
  if (!conn) return;
  uint8_t* recv = f.mem.data() + 32768;
  uint8_t* send = f.mem.data() + 49152;
  for (uint32_t i = 0; i < 8; ++i) {
    RecvWr r{i, f.mr->Slice(32768 + i * kMessageBytes, kMessageBytes)};
    (void)conn->PostRecv({&r, 1});
  }
  size_t next = 0;
  std::map<uint64_t, int64_t> balance;  // per request id: replies sent - messages received
  Completion wc[8];
  while (!stop.load()) {
    // One connection per input: the client's reconnects are refused at once
    // (left unanswered, each waited out the client's connect timeout).
    if (auto ev = l.NextEvent(0); ev.ok() && ev->type == CmEvent::Type::kConnectRequest) ev->request->Reject({});
    int got = conn->recv_cq().Poll(wc);
    if (got <= 0) {
      (void)conn->recv_cq().Wait(5);
      continue;
    }
    for (int i = 0; i < got; ++i) {
      const uint8_t* m = wc[i].opcode == WrOpcode::kRecvWriteImm
                             ? f.mem.data() + 16384 + size_t{wc[i].imm >> 24} % kCredits * kMessageBytes
                             : recv + wc[i].wr_id * kMessageBytes;
      uint64_t id = 0;
      for (int b = 0; b < 8; ++b) id |= uint64_t{m[8 + b]} << (8 * b);
      RecvWr r{wc[i].wr_id, f.mr->Slice(32768 + wc[i].wr_id * kMessageBytes, kMessageBytes)};
      (void)conn->PostRecv({&r, 1});
      const Answer a = answers.empty() ? Answer{0, 0, 0, 0, {}} : answers[next++ % answers.size()];
      if (wc[i].status != WcStatus::kSuccess) continue;
      const uint32_t m_len = wc[i].opcode == WrOpcode::kRecvWriteImm ? (wc[i].imm & 0xffffff) : wc[i].byte_len;
      std::array<ParsedRequest, kMaxRequestsPerMessage> reqs;
      auto writes = ParseMessage({m, std::min<uint32_t>(m_len, kMessageBytes)}, 64, 4096, reqs);
      if (writes.ok() && *writes > 1) {
        if (!AnswerWrites(*conn, {reqs.data(), *writes}, a, send)) broken.store(true);
        continue;
      }
      const bool last = (m[1] & kFlagLast) != 0;
      --balance[id];  // a message of request `id`: it is owed one reply
      ReplyHeader h;
      h.request_id = a.kind == 1 ? a.id : id;
      h.status = a.kind == 2 ? static_cast<Status::Code>(a.status % 16) : Status::Code::kOk;
      h.flags = a.kind == 3 ? a.flags : 0;
      size_t len = a.kind == 4 ? std::min<size_t>(a.bytes.size(), kMaxReplySize)
                               : EncodeReply(h, a.bytes, {send, kMaxReplySize});
      if (a.kind == 4 && len > 0) std::memcpy(send, a.bytes.data(), len);
      // Each SEND completes before the buffer is written again (the fabric
      // copies when it executes the SEND, not when it is posted: a reused
      // buffer would send the next reply twice and this one never).
      for (int k = 0; k < (a.kind == 5 ? 2 : a.kind == 6 ? 0 : 1); ++k) {
        SendWr w;
        w.opcode = WrOpcode::kSend;
        w.local = f.mr->Slice(49152, static_cast<uint32_t>(len));
        w.signaled = true;
        if (!conn->PostSend({&w, 1}).ok()) continue;
        Completion done[1];
        for (int t = 0; t < 100000 && conn->PollSend(done) == 0; ++t) std::this_thread::yield();
      }
      // What the client must take as a broken protocol: a reply to a request
      // already answered, bytes that are no reply, or, once the request's
      // last message is answered, more or fewer replies with its id than it
      // sent messages (the fragments of a request share its id, so a missing
      // reply and a second one to another fragment cancel out: the client
      // cannot tell, and neither does this). A reply with a later request's
      // id is counted for that request.
      uint64_t reply_id = a.kind == 1 ? a.id : id;
      bool breaks = false;
      if (a.kind == 4) {
        auto r = ParseReply({send, len});
        breaks = !r.ok();
        if (r.ok()) reply_id = r->header.request_id;
      }
      if (reply_id < id) breaks = true;
      if (a.kind != 6 && !breaks) balance[reply_id] += a.kind == 5 ? 2 : 1;
      if (last && balance[id] != 0) breaks = true;
      if (breaks) broken.store(true);
      // More replies with an id than messages of it received so far: the
      // client may take them as answers to messages this server has not
      // read yet, reuse their ring places, and this server then reads ids
      // the client wrote later. Nothing it concludes from ids after that is
      // sure, so the oracle stops judging this input (the client must still
      // not crash or hang).
      if (!breaks && a.kind != 6 && balance[reply_id] > 0) ran_ahead.store(true);
    }
  }
}

// Three writes submitted together (they share a message): OK if all
// succeeded, else the first failure.
Status SubmitWrites(Client& c) {
  Op ops[3];
  ops[0].type = Op::Type::kPut;
  ops[0].key = "key";
  ops[0].value = "small value";
  ops[1].type = Op::Type::kDelete;
  ops[1].key = "key2";
  ops[2].type = Op::Type::kPut;
  ops[2].key = "key3";
  ops[2].value = "v";
  ops[2].if_version = 5;
  Op* p[3] = {&ops[0], &ops[1], &ops[2]};
  size_t sent = c.Submit(p);
  std::array<Op*, 3> done;
  size_t n = 0;
  for (int t = 0; t < 200 && n < sent; ++t) n += c.Wait(done, 10);
  if (n < sent) {
    std::fprintf(stderr, "fuzz_client_replies: %zu of %zu writes did not complete\n", sent - n, sent);
    std::abort();
  }
  if (sent < 3) return Status::NoResource("not submitted");
  for (const Op& o : ops) {
    if (!o.status.ok()) return o.status;
  }
  return Status::OK();
}

}  // namespace
}  // namespace kvrdma::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kvrdma::SetLogLevel(kvrdma::LogLevel::kOff);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvrdma;
  using namespace kvrdma::fuzz;
  FuzzedDataProvider in(data, size);
  const bool write_imm = in.ConsumeBool();
  const int ops = in.ConsumeIntegralInRange<int>(1, 6);
  std::vector<int> op_kinds;
  for (int i = 0; i < ops; ++i) op_kinds.push_back(in.ConsumeIntegralInRange<int>(0, 5));
  std::vector<Answer> answers;
  while (in.remaining_bytes() > 0 && answers.size() < 32) {
    Answer a;
    a.kind = in.ConsumeIntegralInRange<uint8_t>(0, 6);
    a.status = in.ConsumeIntegral<uint8_t>();
    a.flags = in.ConsumeIntegral<uint8_t>();
    a.id = in.ConsumeIntegral<uint64_t>();
    a.bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 64));
    answers.push_back(std::move(a));
  }
  Fabric& f = F();
  auto l = f.server->Listen("", 0, 4);
  if (!l.ok()) return 0;
  std::atomic<bool> stop{false}, broken{false}, ran_ahead{false};
  std::thread srv([&] { Serve(**l, answers, stop, broken, ran_ahead); });
  {
    ClientOptions o;
    o.host = "loopback";
    o.port = (*l)->port();
    o.put_mode = write_imm ? PutMode::kWriteImm : PutMode::kSend;
    o.op_timeout_ms = 20;
    o.connect_timeout_ms = 1000;
    auto c = ClientFactory::ConnectWith(f.client, o);
    // The hostile part is the replies: the connect must succeed, or this
    // target tests nothing (from the clock region of protocol 2 until
    // protocol 6 its descriptor named no clock region, every connect was
    // refused, and no input ever reached a reply).
    if (!c.ok()) {
      std::fprintf(stderr, "fuzz_client_replies: connect failed: %s\n", c.status().ToString().c_str());
      std::abort();
    }
    for (int k : op_kinds) {
      const bool after_break = broken.load();
      Status st;
      switch (k) {
        case 0: st = (*c)->Put("key", "small value"); break;
        case 1: st = (*c)->Put("big", std::string(1500, 'v')); break;  // fragments
        case 2: st = (*c)->Delete("key"); break;
        case 3: st = (*c)->Stats().status(); break;
        case 4: st = (*c)->TryLock("key", std::chrono::milliseconds(1000)); break;
        case 5: st = SubmitWrites(**c); break;  // one message of three writes
      }
      if (after_break && st.ok() && !ran_ahead.load()) {
        std::fprintf(stderr, "fuzz_client_replies: operation %d succeeded after the server broke the protocol\n", k);
        std::abort();
      }
    }
  }
  stop.store(true);
  srv.join();
  return 0;
}
