// The client library. One QP per Client; GET is one-sided (two bucket READs
// in one doorbell, then one entry READ, validated with the shared read path),
// PUT/DELETE/STATS are request messages answered by the server's workers.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "client/client_internal.h"
#include "common/format/read_path.h"
#include "common/protocol/handshake.h"
#include "common/protocol/messages.h"
#include "common/transport/verbs_transport.h"

namespace kvrdma {
namespace {

using Clock = std::chrono::steady_clock;

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

constexpr uint64_t kReadTag = 1ull << 62;  // wr_id of READs
constexpr int kMaxGetRounds = 100000;      // with the deadline: a GET never spins forever

}  // namespace

class Client::Impl {
 public:
  Impl(const ClientOptions& o, std::shared_ptr<Device> dev) : opts_(o), dev_(std::move(dev)) {}
  Status Connect();
  Status Get(std::string_view key, std::string* value);
  Status Mutate(Opcode op, std::string_view key, std::string_view value);
  Result<std::vector<std::pair<std::string, uint64_t>>> Stats();

  ClientOptions opts_;
  std::shared_ptr<Device> dev_;
  ServerDescriptor desc_;
  IndexParams params_;
  ClientStats stats_;
  uint64_t last_version_ = 0;

 private:
  Status CheckKey(std::string_view key) const;
  // One READ of [offset, offset+len) of the region `r` into local `off`; waits.
  Status ReadOne(const RemoteRegion& r, uint64_t offset, uint32_t len, size_t local_off, Clock::time_point dl);
  Status WaitRead(uint64_t wr_id, Clock::time_point deadline);
  // Sends one request message already built in staging slot `slot`.
  Status SendMessage(uint32_t slot, uint32_t len);
  // Waits for the next reply; *out gets it.
  Status WaitReply(ParsedReply* out, std::vector<uint8_t>* body, Clock::time_point deadline);
  Status Lost(std::string_view what) {
    conn_->MarkBroken();
    return Status::ConnectionLost(what);
  }
  Clock::time_point Deadline() const { return Clock::now() + std::chrono::milliseconds(opts_.op_timeout_ms); }

  // Local memory: [2 buckets][entry buffer][staging slots][reply buffers].
  size_t bucket_off_ = 0, entry_off_ = 0, entry_cap_ = 0, stage_off_ = 0, reply_off_ = 0;
  std::unique_ptr<uint8_t, FreeDeleter> mem_;
  std::unique_ptr<MemoryRegion> mr_;
  std::unique_ptr<Connection> conn_;  // destroyed before mr_ (declared after)
  uint64_t next_request_ = 1;
  uint64_t next_read_ = 1;
  uint64_t seq_ = 0;          // messages sent: slot = seq % credits
  uint32_t in_flight_ = 0;    // messages awaiting a reply

  uint8_t* Mem(size_t off) { return mem_.get() + off; }
};

Status Client::Impl::Connect() {
  ConnectRequestMsg m;
  m.put_path = opts_.put_mode == PutMode::kWriteImm ? PutPath::kWriteImm : PutPath::kSend;
  uint8_t req[kMaxRequestData];
  size_t n = EncodeConnectRequest(m, req);
  ConnectOptions co;
  co.host = opts_.host;
  co.port = opts_.port;
  co.timeout_ms = opts_.connect_timeout_ms;
  QpConfig qc;
  qc.max_send_wr = 512;  // READs + request messages (credits <= 256)
  qc.max_recv_wr = 256;  // one reply buffer per credit
  qc.max_inline = 256;
  std::vector<uint8_t> reject;
  auto c = dev_->Connect(co, qc, {req, n}, &reject);
  if (!c.ok()) {
    auto why = DecodeReject(reject);
    if (why.ok()) {
      return Status(why->code, "server " + opts_.host + ":" + std::to_string(opts_.port) +
                                   " refused the connection: " + why->reason);
    }
    return c.status();
  }
  conn_ = std::move(c).value();
  auto d = DecodeServerDescriptor(conn_->peer_private_data());
  if (!d.ok()) return d.status();
  desc_ = *d;
  params_.bucket_count = desc_.bucket_count;
  params_.seed = desc_.hash_seed;
  params_.log_bytes = desc_.log.length;
  KVRDMA_RETURN_IF_ERROR(ValidateIndexParams(params_));
  if (desc_.credits > 256) return Status::Protocol("server offers more credits than this client supports");

  entry_cap_ = std::max(EntryBytes(desc_.max_key_bytes, desc_.max_value_bytes), kMaxHintedEntryBytes);
  bucket_off_ = 0;
  entry_off_ = kCandidateBuckets * kBucketBytes;
  stage_off_ = (entry_off_ + entry_cap_ + 63) & ~size_t{63};
  reply_off_ = stage_off_ + size_t{desc_.credits} * desc_.slot_size;
  size_t total = (reply_off_ + size_t{desc_.credits} * kMaxReplySize + 4095) & ~size_t{4095};
  mem_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, total)));
  if (!mem_) return Status::NoResource("out of memory for client buffers");
  auto mr = dev_->RegisterMemory(mem_.get(), total, kAccessLocalWrite);
  if (!mr.ok()) return mr.status();
  mr_ = std::move(mr).value();
  std::vector<RecvWr> r;
  for (uint32_t i = 0; i < desc_.credits; ++i) {
    r.push_back(RecvWr{i, mr_->Slice(reply_off_ + size_t{i} * kMaxReplySize, kMaxReplySize)});
  }
  return conn_->PostRecv(r);
}

Status Client::Impl::CheckKey(std::string_view key) const {
  if (key.empty()) return Status::InvalidArgument("empty key");
  if (key.size() > desc_.max_key_bytes) {
    return Status::TooLarge("key of " + std::to_string(key.size()) + " bytes (server limit " +
                            std::to_string(desc_.max_key_bytes) + ")");
  }
  return Status::OK();
}

Status Client::Impl::WaitRead(uint64_t wr_id, Clock::time_point deadline) {
  Completion wc[16];
  for (;;) {
    int n = conn_->PollSend(wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) return Lost(CompletionStatus(wc[i]).ToString());
      if (wc[i].wr_id == wr_id) return Status::OK();
    }
    if (n < 0) return Lost("completion queue failed");
    if (conn_->broken()) return Status::ConnectionLost("connection is broken");
    if (n == 0 && Clock::now() > deadline) return Lost("RDMA READ timed out");
  }
}

Status Client::Impl::ReadOne(const RemoteRegion& r, uint64_t offset, uint32_t len, size_t local_off,
                             Clock::time_point dl) {
  SendWr w;
  w.wr_id = kReadTag | next_read_++;
  w.opcode = WrOpcode::kRead;
  w.local = mr_->Slice(local_off, len);
  w.remote_addr = r.addr + offset;
  w.rkey = r.rkey;
  KVRDMA_RETURN_IF_ERROR(conn_->PostSend({&w, 1}));
  ++stats_.reads;
  return WaitRead(w.wr_id, dl);
}

Status Client::Impl::Get(std::string_view key, std::string* value) {
  KVRDMA_RETURN_IF_ERROR(CheckKey(key));
  if (conn_->broken()) return Status::ConnectionLost("connection is broken");
  ++stats_.gets;
  auto br = CandidateBucketReads(params_, key);
  if (!br.ok()) return br.status();
  const auto deadline = Deadline();
  const auto get_deadline = std::chrono::microseconds(desc_.get_deadline_us);
  MissCheck miss;
  auto round_start = Clock::now();
  for (int round = 0; round < kMaxGetRounds; ++round) {
    if (round > 0) ++stats_.get_retries;
    ++stats_.get_rounds;
    auto now = Clock::now();
    if (now > deadline) break;
    // A round must finish within the server's grace period, so that what it
    // READs cannot have been recycled under it; an old round starts over.
    if (now - round_start > get_deadline) miss.Reset();
    round_start = now;
    // Both candidate buckets in one doorbell; only the last READ signals.
    SendWr w[kCandidateBuckets];
    for (size_t b = 0; b < kCandidateBuckets; ++b) {
      w[b].wr_id = kReadTag | next_read_++;
      w[b].opcode = WrOpcode::kRead;
      w[b].signaled = b + 1 == kCandidateBuckets;
      w[b].local = mr_->Slice(bucket_off_ + b * kBucketBytes, kBucketBytes);
      w[b].remote_addr = desc_.index.addr + br->reads[b].offset;
      w[b].rkey = desc_.index.rkey;
    }
    KVRDMA_RETURN_IF_ERROR(conn_->PostSend(w));
    stats_.reads += kCandidateBuckets;
    KVRDMA_RETURN_IF_ERROR(WaitRead(w[kCandidateBuckets - 1].wr_id, deadline));
    ProbeResult probe;
    const auto* b0 = reinterpret_cast<const std::byte*>(Mem(bucket_off_));
    KVRDMA_RETURN_IF_ERROR(ProbeBuckets({b0, kBucketBytes}, {b0 + kBucketBytes, kBucketBytes}, br->hash,
                                        params_, &probe));
    bool retry = false;
    for (uint8_t i = 0; i < probe.count && !retry; ++i) {
      const SlotCandidate& cand = probe.candidates[i];
      uint32_t len = std::min<uint32_t>(cand.entry.length, static_cast<uint32_t>(entry_cap_));
      KVRDMA_RETURN_IF_ERROR(ReadOne(desc_.log, cand.entry.offset, len, entry_off_, deadline));
      const auto* e = reinterpret_cast<const std::byte*>(Mem(entry_off_));
      EntryView v = DecodeEntry({e, len}, key, cand.slot, params_.seed, /*require_current=*/false);
      if (v.verdict == EntryVerdict::kNeedMore) {
        if (v.total_bytes > entry_cap_ || cand.entry.offset + v.total_bytes > desc_.log.length) {
          retry = true;  // implausible length: a torn header
          break;
        }
        len = v.total_bytes;
        KVRDMA_RETURN_IF_ERROR(ReadOne(desc_.log, cand.entry.offset, len, entry_off_, deadline));
        v = DecodeEntry({e, len}, key, cand.slot, params_.seed, false);
      }
      switch (v.verdict) {
        case EntryVerdict::kValue:
          if (Clock::now() - round_start > get_deadline) {
            retry = true;  // too slow: the entry may have been recycled meanwhile
            break;
          }
          value->assign(reinterpret_cast<const char*>(v.value.data()), v.value.size());
          return Status::OK();
        case EntryVerdict::kTombstone:
          return Status::NotFound();
        case EntryVerdict::kWrongKey:
          continue;  // a fingerprint collision: try the next candidate
        default:
          retry = true;  // torn, malformed, superseded, need-more twice
          break;
      }
    }
    if (retry) {
      miss.Reset();
      continue;
    }
    // Nothing in either bucket: real only if a second round sees the same
    // bucket versions (no key was moved between the buckets meanwhile).
    if (miss.ConfirmMiss(probe)) return Status::NotFound();
  }
  return Status::Timeout("GET of a key that writers kept changing: no consistent read within " +
                         std::to_string(opts_.op_timeout_ms) + " ms");
}

Status Client::Impl::SendMessage(uint32_t slot, uint32_t len) {
  SendWr w;
  w.wr_id = seq_;
  size_t off = stage_off_ + size_t{slot} * desc_.slot_size;
  w.local = mr_->Slice(off, len);
  // Buffers are reused only after the server's reply, which implies the
  // message was read; completions are needed only to free send-queue slots.
  w.signaled = seq_ % desc_.credits == desc_.credits - 1u;
  if (opts_.put_mode == PutMode::kWriteImm) {
    w.opcode = WrOpcode::kWriteImm;
    w.remote_addr = desc_.ring.addr + size_t{slot} * desc_.slot_size;
    w.rkey = desc_.ring.rkey;
    w.imm = (slot << 24) | len;
  } else {
    w.opcode = WrOpcode::kSend;
  }
  w.inline_data = len <= conn_->max_inline();
  KVRDMA_RETURN_IF_ERROR(conn_->PostSend({&w, 1}));
  ++seq_;
  ++in_flight_;
  ++stats_.messages;
  return Status::OK();
}

Status Client::Impl::WaitReply(ParsedReply* out, std::vector<uint8_t>* body, Clock::time_point deadline) {
  Completion wc[8];
  for (;;) {
    // Reap send completions (errors break the connection).
    Completion sc[16];
    int s = conn_->PollSend(sc);
    for (int i = 0; i < s; ++i) {
      if (sc[i].status != WcStatus::kSuccess) return Lost(CompletionStatus(sc[i]).ToString());
    }
    int n = conn_->recv_cq().Poll({wc, 1});
    if (n == 1) {
      if (wc[0].status != WcStatus::kSuccess) return Lost(CompletionStatus(wc[0]).ToString());
      uint64_t i = wc[0].wr_id;
      auto* buf = Mem(reply_off_ + i * kMaxReplySize);
      auto p = ParseReply({buf, wc[0].byte_len});
      Status st = p.ok() ? Status::OK() : p.status();
      if (p.ok()) {
        *out = *p;
        if (body != nullptr) body->assign(p->body.begin(), p->body.end());
        out->body = {};
      }
      RecvWr r{i, mr_->Slice(reply_off_ + i * kMaxReplySize, kMaxReplySize)};
      KVRDMA_RETURN_IF_ERROR(conn_->PostRecv({&r, 1}));
      --in_flight_;
      return st;
    }
    if (conn_->broken()) return Status::ConnectionLost("connection is broken");
    if (Clock::now() > deadline) return Lost("no reply from the server in time");
  }
}

Status Client::Impl::Mutate(Opcode op, std::string_view key, std::string_view value) {
  if (op != Opcode::kStats) KVRDMA_RETURN_IF_ERROR(CheckKey(key));
  if (value.size() > desc_.max_value_bytes) {
    return Status::TooLarge("value of " + std::to_string(value.size()) + " bytes (server limit " +
                            std::to_string(desc_.max_value_bytes) + ")");
  }
  if (conn_->broken()) return Status::ConnectionLost("connection is broken");
  const auto deadline = Deadline();
  RequestHeader h;
  h.opcode = op;
  h.request_id = next_request_++;
  h.key_len = static_cast<uint16_t>(key.size());
  h.value_len = static_cast<uint32_t>(value.size());
  size_t sent = 0;
  bool first = true;
  ParsedReply reply;
  std::vector<uint8_t> body;
  Status final = Status::Internal("no reply");
  do {
    if (in_flight_ == desc_.credits) {  // out of credits: wait for one reply
      KVRDMA_RETURN_IF_ERROR(WaitReply(&reply, &body, deadline));
      if (reply.header.status != Status::Code::kOk) {
        final = Status(reply.header.status, std::string(body.begin(), body.end()));
      }
    }
    size_t room = desc_.slot_size - kRequestHeaderSize - (first ? key.size() : 0);
    size_t chunk = std::min(room, value.size() - sent);
    h.flags = static_cast<uint8_t>((first ? kFlagFirst : 0) | (sent + chunk == value.size() ? kFlagLast : 0));
    h.frag_offset = static_cast<uint32_t>(sent);
    h.frag_len = static_cast<uint32_t>(chunk);
    uint32_t slot = static_cast<uint32_t>(seq_ % desc_.credits);
    uint8_t* m = Mem(stage_off_ + size_t{slot} * desc_.slot_size);
    EncodeRequestHeader(h, m);
    size_t len = kRequestHeaderSize;
    if (first) {
      std::memcpy(m + len, key.data(), key.size());
      len += key.size();
    }
    if (chunk != 0) std::memcpy(m + len, value.data() + sent, chunk);
    len += chunk;
    KVRDMA_RETURN_IF_ERROR(SendMessage(slot, static_cast<uint32_t>(len)));
    sent += chunk;
    first = false;
  } while (sent < value.size());
  // Collect the remaining replies; the last one (no FRAGMENT_ACK) is the answer.
  while (in_flight_ > 0) {
    KVRDMA_RETURN_IF_ERROR(WaitReply(&reply, &body, deadline));
    if (reply.header.status != Status::Code::kOk && final.code() == Status::Code::kInternal) {
      final = Status(reply.header.status, std::string(body.begin(), body.end()));
    } else if (!(reply.header.flags & kReplyFragmentAck) && final.code() == Status::Code::kInternal) {
      final = Status::OK();
      last_version_ = reply.header.version;
    }
  }
  return final;
}

Result<std::vector<std::pair<std::string, uint64_t>>> Client::Impl::Stats() {
  if (conn_->broken()) return Status::ConnectionLost("connection is broken");
  RequestHeader h;
  h.opcode = Opcode::kStats;
  h.request_id = next_request_++;
  uint32_t slot = static_cast<uint32_t>(seq_ % desc_.credits);
  EncodeRequestHeader(h, Mem(stage_off_ + size_t{slot} * desc_.slot_size));
  KVRDMA_RETURN_IF_ERROR(SendMessage(slot, kRequestHeaderSize));
  ParsedReply reply;
  std::vector<uint8_t> body;
  KVRDMA_RETURN_IF_ERROR(WaitReply(&reply, &body, Deadline()));
  if (reply.header.status != Status::Code::kOk) {
    return Status(reply.header.status, std::string(body.begin(), body.end()));
  }
  return DecodeStats(body);
}

// ------------------------------------------------------------------ Client

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> ClientFactory::ConnectWith(std::shared_ptr<Device> dev, const ClientOptions& o) {
  auto impl = std::make_unique<Client::Impl>(o, std::move(dev));
  KVRDMA_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& o) {
  auto dev = OpenVerbsDevice(o.device);
  if (!dev.ok()) return dev.status();
  return ClientFactory::ConnectWith(std::move(dev).value(), o);
}

Status Client::Get(std::string_view key, std::string* value) { return impl_->Get(key, value); }

Status Client::Put(std::string_view key, std::string_view value) {
  Status s = impl_->Mutate(Opcode::kPut, key, value);
  if (s.ok()) ++impl_->stats_.puts;
  return s;
}

Status Client::Delete(std::string_view key) {
  Status s = impl_->Mutate(Opcode::kDelete, key, {});
  if (s.ok()) ++impl_->stats_.deletes;
  return s;
}

Result<std::vector<std::pair<std::string, uint64_t>>> Client::Stats() { return impl_->Stats(); }
uint64_t Client::last_version() const { return impl_->last_version_; }
const ClientStats& Client::stats() const { return impl_->stats_; }
uint32_t Client::max_value_bytes() const { return impl_->desc_.max_value_bytes; }
uint32_t Client::max_key_bytes() const { return impl_->desc_.max_key_bytes; }

}  // namespace kvrdma
