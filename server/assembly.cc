#include "server/assembly.h"

#include <cstring>
#include <new>
#include <string>

namespace kvrdma::server {

bool AssemblyBudget::Take(uint64_t n) noexcept {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (n > limit_ - used || used > limit_) return false;
  } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
  return true;
}

Status Assembly::Begin(const RequestHeader& h, std::span<const uint8_t> key, std::span<const uint8_t> frag,
                       AssemblyBudget& budget, int64_t now_ms) {
  Release(budget);
  if (key.size() > sizeof(key_) || key.size() != h.key_len || frag.size() > h.value_len) {
    return Status::InvalidArgument("first fragment does not match its header");
  }
  if (!budget.Take(h.value_len)) {
    return Status::NoResource("the server is reassembling too many large values (" +
                              std::to_string(budget.limit()) + " bytes at most): retry later");
  }
  value_.reset(new (std::nothrow) uint8_t[h.value_len == 0 ? 1 : h.value_len]);
  if (value_ == nullptr) {
    budget.Give(h.value_len);
    return Status::NoResource("server out of memory for a fragmented value");
  }
  request_id_ = h.request_id;
  token_ = h.lock_token;
  condition_flags_ = h.flags & kFlagIfVersion;
  if_version_ = h.if_version;
  value_len_ = h.value_len;
  key_len_ = h.key_len;
  started_ms_ = now_ms;
  std::memcpy(key_, key.data(), key.size());
  if (!frag.empty()) std::memcpy(value_.get(), frag.data(), frag.size());
  received_ = static_cast<uint32_t>(frag.size());
  return Status::OK();
}

Status Assembly::Extend(const RequestHeader& h, std::span<const uint8_t> frag, AssemblyBudget& budget) {
  const char* why = nullptr;
  if (!active()) {
    why = "value fragment without a first fragment";
  } else if (h.request_id != request_id_ || h.key_len != key_len_ || h.lock_token != token_) {
    why = "value fragment of another request (request id, key length or lock token differ from its first)";
  } else if ((h.flags & kFlagIfVersion) != condition_flags_ || h.if_version != if_version_) {
    why = "value fragment with another condition than its first";
  } else if (h.value_len != value_len_) {
    why = "value fragment claims another total length than its first";
  } else if (h.frag_offset != received_) {
    why = "value fragment out of order";
  } else if (frag.size() != h.frag_len || uint64_t{received_} + frag.size() > value_len_) {
    why = "value fragment past the value's end";
  }
  if (why != nullptr) {
    Release(budget);
    return Status::InvalidArgument(why);
  }
  if (!frag.empty()) std::memcpy(value_.get() + received_, frag.data(), frag.size());
  received_ += static_cast<uint32_t>(frag.size());
  return Status::OK();
}

void Assembly::Release(AssemblyBudget& budget) noexcept {
  if (!active()) return;
  value_.reset();
  budget.Give(value_len_);
  value_len_ = received_ = 0;
  key_len_ = 0;
}

}  // namespace kvrdma::server
