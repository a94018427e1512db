// The client library: connecting, and the public calls (the synchronous ones
// run one operation of the engine in client_ops.cc to completion).
#include <cstring>

#include "client/client_impl.h"
#include "common/log.h"
#include "common/transport/verbs_transport.h"

namespace kvrdma {

Status Client::Impl::Connect() {
  ConnectRequestMsg m;
  m.put_path = opts_.put_mode == PutMode::kWriteImm ? PutPath::kWriteImm : PutPath::kSend;
  if (opts_.auth_token.size() > kMaxAuthToken) {
    return Status::InvalidArgument("auth token longer than " + std::to_string(kMaxAuthToken) + " bytes");
  }
  m.auth_len = static_cast<uint8_t>(opts_.auth_token.size());
  std::memcpy(m.auth.data(), opts_.auth_token.data(), opts_.auth_token.size());
  uint8_t req[kMaxRequestData];
  size_t n = EncodeConnectRequest(m, req);
  ConnectOptions co;
  co.host = opts_.host;
  co.port = opts_.port;
  co.timeout_ms = opts_.connect_timeout_ms;
  // Rendezvous PUTs bind and invalidate windows; a device without type-2
  // windows sends every PUT in fragments (ClientStats::rendezvous_puts stays 0).
  const bool rendezvous = opts_.rendezvous_bytes > 0 && dev_->info().memory_windows;
  if (opts_.rendezvous_bytes > 0 && !rendezvous) {
    KVRDMA_LOG_DEBUG("rendezvous PUTs off: %s has no type-2 memory windows", dev_->info().name.c_str());
  }
  QpConfig qc = ClientQpConfig(max_in_flight_, rendezvous);
  // One CQ for both directions: a waiting client sleeps on one channel.
  cq_.reset();
  auto cq = dev_->CreateCompletionQueue(qc.max_send_wr + qc.max_recv_wr);
  if (!cq.ok()) return cq.status();
  cq_ = std::move(cq).value();
  qc.send_cq = cq_.get();
  qc.recv_cq = cq_.get();
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
  params_.home_count = desc_.index_homes;
  params_.window_words = desc_.index_window;
  params_.seed = desc_.hash_seed;
  params_.log_bytes = desc_.log.length;
  KVRDMA_RETURN_IF_ERROR(ValidateIndexParams(params_));
  if (desc_.credits > 256) return Status::Protocol("server offers more credits than this client supports");

  auto align = [](size_t x) { return (x + 63) & ~size_t{63}; };
  stage_off_ = 0;
  reply_off_ = align(size_t{desc_.credits} * desc_.message_bytes);
  large_off_ = align(reply_off_ + size_t{desc_.credits} * kMaxReplySize);
  // One READ of the largest entry the server accepts: its size class's bytes.
  large_cap_ = SizeClassBytes(SizeClassFor(EntryBytes(desc_.max_key_bytes, desc_.max_value_bytes)));
  scratch_off_ = align(large_off_ + large_cap_);
  op_buffers_off_ = scratch_off_ + 64;
  size_t total = (op_buffers_off_ + size_t{max_in_flight_} * OpBufferBytes() + 4095) & ~size_t{4095};
  mem_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, total)));
  if (!mem_) return Status::NoResource("out of memory for client buffers");
  auto mr = dev_->RegisterMemory(mem_.get(), total, kAccessLocalWrite);
  if (!mr.ok()) return mr.status();
  mr_ = std::move(mr).value();
  std::vector<RecvWr> r;
  for (uint32_t i = 0; i < desc_.credits; ++i) {
    r.push_back(RecvWr{MakeWrId(WrKind::kReply, i), mr_->Slice(reply_off_ + size_t{i} * kMaxReplySize, kMaxReplySize)});
  }
  ResetEngine();
  if (done_.size() < kMaxInFlight) done_.resize(kMaxInFlight);  // never shrunk: a reconnect keeps what is undelivered
  if (rendezvous) {  // every server of this major takes them (handshake.h, 11)
    for (RendezvousWindow& w : rdv_) {
      auto mw = dev_->CreateMemoryWindow();
      if (!mw.ok()) {  // none: the PUTs go in fragments, as to an older server; fewer: fewer at once
        KVRDMA_LOG_WARN("%s: %s", rdv_windows_ == 0 ? "rendezvous PUTs off" : "fewer rendezvous PUTs at once",
                        mw.status().ToString().c_str());
        break;
      }
      w.mw = std::move(mw).value();
      ++rdv_windows_;
    }
    // The windows' copy buffers (ClientOptions::rendezvous_copy_bytes). None
    // (not enough memory, or it cannot be pinned): each value is registered
    // for its PUT, as with copies off.
    const size_t copy = opts_.rendezvous_copy_bytes;
    if (rdv_windows_ > 0 && copy >= RendezvousMinBytes(/*others_in_flight=*/true)) {
      if (!rdv_copy_mem_) {
        rdv_copy_mem_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, (copy * kRendezvousWindows + 4095) & ~size_t{4095})));
      }
      for (uint32_t i = 0; i < rdv_windows_ && rdv_copy_mem_; ++i) {
        auto mr = dev_->RegisterMemory(rdv_copy_mem_.get() + i * copy, copy, kAccessMwBind);
        if (!mr.ok()) {
          KVRDMA_LOG_WARN("rendezvous values are registered for each PUT, not copied: %s", mr.status().ToString().c_str());
          for (RendezvousWindow& w : rdv_) w.copy_mr.reset();
          break;
        }
        rdv_[i].copy_mr = std::move(mr).value();
      }
    }
  }
  return conn_->PostRecv(r);
}

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

namespace {
// One operation through the engine, to completion (the synchronous API).
Status RunOne(Client::Impl& impl, Op::Type type, std::string_view key, std::string_view value,
              std::string* result, uint64_t if_version = kAnyVersion) {
  Op op;
  op.type = type;
  op.key = key;
  op.value = value;
  op.result = result;
  op.if_version = if_version;
  impl.RunSync(&op);
  return op.status;
}
}  // namespace

Status Client::Get(std::string_view key, std::string* value) {
  return RunOne(*impl_, Op::Type::kGet, key, {}, value);
}
Status Client::Get(std::string_view key, std::span<std::byte> buffer, size_t* value_bytes) {
  Op op;
  op.type = Op::Type::kGet;
  op.key = key;
  op.buffer = buffer;
  impl_->RunSync(&op);
  *value_bytes = op.status.ok() || op.status.code() == Status::Code::kTooLarge ? op.value_bytes : 0;
  return op.status;
}
Status Client::RegisterMemory(std::span<std::byte> memory) { return impl_->RegisterMemory(memory); }
Status Client::UnregisterMemory(std::span<std::byte> memory) { return impl_->UnregisterMemory(memory); }

Status Client::Impl::RegisterMemory(std::span<std::byte> memory) {
  if (memory.empty()) return Status::InvalidArgument("RegisterMemory: empty memory");
  const uint64_t a = reinterpret_cast<uint64_t>(memory.data());
  for (const auto& r : registered_) {
    if (a < r->base() + r->length() && r->base() < a + memory.size()) {
      return Status::InvalidArgument("RegisterMemory: overlaps memory registered already");
    }
  }
  auto mr = dev_->RegisterMemory(memory.data(), memory.size(), kAccessLocalWrite);
  if (!mr.ok()) return mr.status();
  registered_.push_back(std::move(mr).value());
  return Status::OK();
}

Status Client::Impl::UnregisterMemory(std::span<std::byte> memory) {
  for (auto it = registered_.begin(); it != registered_.end(); ++it) {
    const MemoryRegion* r = it->get();
    if (r->addr() != memory.data() || r->length() != memory.size()) continue;
    for (const OpState& s : op_states_) {
      if (s.step != Step::kFree && s.registered == r) {
        return Status::InvalidArgument("UnregisterMemory: an operation in flight has its buffer there");
      }
    }
    for (const ValueRegistration& v : value_regs_) {
      if (v.within == r && WindowBoundOver(v.mr.get())) {
        return Status::InvalidArgument("UnregisterMemory: a rendezvous PUT in flight has its value there");
      }
    }
    std::erase_if(value_regs_, [r](const ValueRegistration& v) { return v.within == r; });
    registered_.erase(it);
    return Status::OK();
  }
  return Status::NotFound("UnregisterMemory: no registration of exactly that memory");
}

const MemoryRegion* Client::Impl::RegisteredRegionOf(const void* p, size_t n) const {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  for (const auto& r : registered_) {
    if (n <= r->length() && a >= r->base() && a - r->base() <= r->length() - n) return r.get();
  }
  return nullptr;
}

Result<const MemoryRegion*> Client::Impl::ValueRegion(RendezvousWindow& w, std::string_view value,
                                                     const MemoryRegion* within) {
  const uint64_t a = reinterpret_cast<uint64_t>(value.data());
  if (within != nullptr) {
    for (ValueRegistration& v : value_regs_) {
      if (v.mr->base() == a && v.mr->length() == value.size()) {  // another window may be bound over it too
        v.last_use = stats_.rendezvous_puts;
        return v.mr.get();
      }
    }
  }
  auto mr = dev_->RegisterMemory(const_cast<char*>(value.data()), value.size(), kAccessMwBind);
  if (!mr.ok()) return mr.status();
  ++stats_.rendezvous_registrations;
  if (within == nullptr) {  // for this PUT alone: deregistered once its window is invalidated
    w.mr = std::move(mr).value();
    return w.mr.get();
  }
  ValueRegistration* slot = nullptr;
  if (value_regs_.size() < kValueRegistrations) {
    slot = &value_regs_.emplace_back();
  } else {  // full: the one used longest ago that no window is bound over (at most 4 are)
    for (ValueRegistration& v : value_regs_) {
      if (!WindowBoundOver(v.mr.get()) && (slot == nullptr || v.last_use < slot->last_use)) slot = &v;
    }
  }
  slot->within = within;
  slot->mr = std::move(mr).value();
  slot->last_use = stats_.rendezvous_puts;
  return slot->mr.get();
}

bool Client::Impl::WindowBoundOver(const MemoryRegion* mr) const {
  for (const RendezvousWindow& w : rdv_) {
    if (w.owner != -1 && w.bound == mr) return true;
  }
  return false;
}

Status Client::Put(std::string_view key, std::string_view value, uint64_t if_version) {
  return RunOne(*impl_, Op::Type::kPut, key, value, nullptr, if_version);
}
Status Client::Delete(std::string_view key, uint64_t if_version) {
  return RunOne(*impl_, Op::Type::kDelete, key, {}, nullptr, if_version);
}

Result<std::vector<std::pair<std::string, uint64_t>>> Client::Stats() { return impl_->Stats(); }
Status Client::Lock(std::string_view key, std::chrono::milliseconds lease) {
  return impl_->Lock(key, static_cast<uint64_t>(lease.count()), /*wait=*/true);
}
Status Client::TryLock(std::string_view key, std::chrono::milliseconds lease) {
  return impl_->Lock(key, static_cast<uint64_t>(lease.count()), /*wait=*/false);
}
Status Client::Unlock(std::string_view key) { return impl_->Unlock(key); }
size_t Client::Submit(std::span<Op* const> ops) { return impl_->Submit(ops); }
size_t Client::Poll(std::span<Op*> done) { return impl_->Poll(done); }
size_t Client::Wait(std::span<Op*> done, int timeout_ms) { return impl_->Wait(done, timeout_ms); }
size_t Client::in_flight() const { return impl_->in_flight(); }
size_t Client::max_in_flight() const { return impl_->max_in_flight(); }
uint64_t Client::last_version() const { return impl_->last_version_; }
const ClientStats& Client::stats() const { return impl_->stats_; }
uint32_t Client::max_value_bytes() const { return impl_->desc_.max_value_bytes; }
uint32_t Client::max_key_bytes() const { return impl_->desc_.max_key_bytes; }

}  // namespace kvrdma
