// Status and Result<T>: how kvrdma reports errors on every data path. Public:
// the client API returns them.
//
// Shaped after LevelDB's Status: a code plus a message, named factories, ok().
// An OK status carries no message and costs no allocation, so returning
// Status::OK() on a hot path is free. No exceptions are thrown anywhere on
// the server or client data paths.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kvrdma {

class Status {
 public:
  // Stable numeric values: they travel on the wire in server replies.
  enum class Code : uint8_t {
    kOk = 0,
    kNotFound = 1,         // the key is not stored
    kInvalidArgument = 2,  // the caller's input is malformed
    kTooLarge = 3,         // a key or value over the configured limit
    kServerFull = 4,       // index or log full in store mode; nothing lost
    kNoResource = 5,       // temporarily out of credits/buffers: retry later
    kRemoteAccess = 6,     // the remote side refused an RDMA access (rkey, bounds, rights)
    kConnectionLost = 7,   // the connection broke; operations in flight are lost
    kCorruption = 8,       // bytes failed validation (checksum, magic, key)
    kTimeout = 9,          // no answer within the deadline
    kLocked = 10,          // the key is locked by another client
    kIOError = 11,         // a system call or verbs call failed
    kProtocol = 12,        // the peer speaks another protocol version or sent garbage
    kRetry = 13,           // a read raced a writer; reading again will succeed
    kInternal = 14,        // a bug: an invariant did not hold
    kUnavailable = 15,     // no such device / server not reachable
    kVersionMismatch = 16, // a conditional write's key is not at the version it required
  };

  Status() noexcept = default;
  Status(Code code, std::string_view msg)
      : code_(code), msg_(msg.empty() ? nullptr : std::make_unique<const std::string>(msg)) {}
  Status(const Status& o) : code_(o.code_), msg_(o.msg_ ? std::make_unique<const std::string>(*o.msg_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) *this = Status(o);
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() noexcept { return Status(); }
  static Status NotFound(std::string_view m = {}) { return {Code::kNotFound, m}; }
  static Status InvalidArgument(std::string_view m) { return {Code::kInvalidArgument, m}; }
  static Status TooLarge(std::string_view m) { return {Code::kTooLarge, m}; }
  static Status ServerFull(std::string_view m) { return {Code::kServerFull, m}; }
  static Status NoResource(std::string_view m) { return {Code::kNoResource, m}; }
  static Status RemoteAccess(std::string_view m) { return {Code::kRemoteAccess, m}; }
  static Status ConnectionLost(std::string_view m) { return {Code::kConnectionLost, m}; }
  static Status Corruption(std::string_view m) { return {Code::kCorruption, m}; }
  static Status Timeout(std::string_view m) { return {Code::kTimeout, m}; }
  static Status Locked(std::string_view m) { return {Code::kLocked, m}; }
  static Status IOError(std::string_view m) { return {Code::kIOError, m}; }
  // An IOError for a failed call that set errno (or returned an errno value).
  static Status FromErrno(std::string_view what, int err);
  static Status Protocol(std::string_view m) { return {Code::kProtocol, m}; }
  static Status Retry(std::string_view m) { return {Code::kRetry, m}; }
  static Status Internal(std::string_view m) { return {Code::kInternal, m}; }
  static Status Unavailable(std::string_view m) { return {Code::kUnavailable, m}; }
  static Status VersionMismatch(std::string_view m) { return {Code::kVersionMismatch, m}; }
  // The highest code (decoders refuse larger ones).
  static constexpr Code kLastCode = Code::kVersionMismatch;

  bool ok() const noexcept { return code_ == Code::kOk; }
  Code code() const noexcept { return code_; }
  // The message ("" if there is none).
  const std::string& message() const noexcept { return msg_ ? *msg_ : NoMessage(); }
  bool IsNotFound() const noexcept { return code_ == Code::kNotFound; }
  bool IsConnectionLost() const noexcept { return code_ == Code::kConnectionLost; }
  bool IsRemoteAccess() const noexcept { return code_ == Code::kRemoteAccess; }
  bool IsTimeout() const noexcept { return code_ == Code::kTimeout; }
  bool IsVersionMismatch() const noexcept { return code_ == Code::kVersionMismatch; }

  // "NotFound: message" / "OK".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) noexcept { return a.code_ == b.code_; }

 private:
  static const std::string& NoMessage() noexcept;

  Code code_ = Code::kOk;
  // The message, on the heap only if there is one: a status without one (OK
  // above all) is a code and a null pointer, built, moved and dropped in a
  // few instructions on the data paths (a std::string here cost ~20 per
  // move and ~80 per GET in callgrind).
  std::unique_ptr<const std::string> msg_;
};

// The name of a code ("NotFound"), for messages and logs.
std::string_view CodeName(Status::Code code) noexcept;

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}    // NOLINT: implicit by design

  bool ok() const noexcept { return value_.has_value(); }
  const Status& status() const noexcept { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;  // OK exactly when value_ is set
};

}  // namespace kvrdma

// Return early from a function returning Status or Result<T>.
#define KVRDMA_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::kvrdma::Status _kv_st = (expr);         \
    if (!_kv_st.ok()) return _kv_st;          \
  } while (0)
