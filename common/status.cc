#include "kvrdma/status.h"

#include <cstring>

namespace kvrdma {

std::string_view CodeName(Status::Code code) noexcept {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kNotFound: return "NotFound";
    case Status::Code::kInvalidArgument: return "InvalidArgument";
    case Status::Code::kTooLarge: return "TooLarge";
    case Status::Code::kServerFull: return "ServerFull";
    case Status::Code::kNoResource: return "NoResource";
    case Status::Code::kRemoteAccess: return "RemoteAccess";
    case Status::Code::kConnectionLost: return "ConnectionLost";
    case Status::Code::kCorruption: return "Corruption";
    case Status::Code::kTimeout: return "Timeout";
    case Status::Code::kLocked: return "Locked";
    case Status::Code::kIOError: return "IOError";
    case Status::Code::kProtocol: return "Protocol";
    case Status::Code::kRetry: return "Retry";
    case Status::Code::kInternal: return "Internal";
    case Status::Code::kUnavailable: return "Unavailable";
    case Status::Code::kVersionMismatch: return "VersionMismatch";
  }
  return "Unknown";
}

Status Status::FromErrno(std::string_view what, int err) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  return Status(Code::kIOError, m);
}

const std::string& Status::NoMessage() noexcept {
  static const std::string none;
  return none;
}

std::string Status::ToString() const {
  std::string s(CodeName(code_));
  if (msg_) {
    s += ": ";
    s += *msg_;
  }
  return s;
}

}  // namespace kvrdma
