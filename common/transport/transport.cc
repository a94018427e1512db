#include "common/transport/transport.h"

namespace kvrdma {

const char* WrOpcodeName(WrOpcode op) noexcept {
  switch (op) {
    case WrOpcode::kRead: return "READ";
    case WrOpcode::kWrite: return "WRITE";
    case WrOpcode::kWriteImm: return "WRITE_WITH_IMM";
    case WrOpcode::kSend: return "SEND";
    case WrOpcode::kCompareSwap: return "CMP_AND_SWP";
    case WrOpcode::kFetchAdd: return "FETCH_AND_ADD";
    case WrOpcode::kRecv: return "RECV";
    case WrOpcode::kRecvWriteImm: return "RECV_RDMA_WITH_IMM";
    case WrOpcode::kBindMw: return "BIND_MW";
    case WrOpcode::kLocalInv: return "LOCAL_INV";
  }
  return "?";
}

const char* WcStatusName(WcStatus s) noexcept {
  switch (s) {
    case WcStatus::kSuccess: return "success";
    case WcStatus::kRemoteAccessError: return "remote access error";
    case WcStatus::kRemoteInvalidRequest: return "remote invalid request";
    case WcStatus::kRemoteOperationError: return "remote operation error";
    case WcStatus::kLocalProtectionError: return "local protection error";
    case WcStatus::kLocalLengthError: return "local length error";
    case WcStatus::kFlushed: return "work request flushed";
    case WcStatus::kRetryExceeded: return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExceeded: return "RNR retry counter exceeded";
    case WcStatus::kMwBindError: return "memory window bind error";
    case WcStatus::kOther: return "other error";
  }
  return "?";
}

Status CompletionStatus(const Completion& c) {
  if (c.status == WcStatus::kSuccess) return Status::OK();
  std::string m = std::string(WrOpcodeName(c.opcode)) + " failed: " + WcStatusName(c.status);
  switch (c.status) {
    case WcStatus::kRemoteAccessError: return Status::RemoteAccess(m);
    case WcStatus::kFlushed:
    case WcStatus::kRetryExceeded:
    case WcStatus::kRnrRetryExceeded: return Status::ConnectionLost(m);
    case WcStatus::kRemoteInvalidRequest:
    case WcStatus::kLocalLengthError: return Status::InvalidArgument(m);
    default: return Status::IOError(m);
  }
}

int Connection::PollSend(std::span<Completion> out) {
  int n = send_cq_->Poll(out);
  for (int i = 0; i < n; ++i) {
    if (out[i].status != WcStatus::kSuccess) MarkBroken();
  }
  if (n < 0) MarkBroken();
  return n;
}

}  // namespace kvrdma
