// A raw TCP client for the metrics port tests: sends exactly the bytes a
// test gives (malformed, oversized, or trickled) and reads what comes back.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvrdma::testing {

class RawHttp {
 public:
  // from: the local address to connect from (any 127.0.0.x is this host's).
  explicit RawHttp(uint16_t port, uint32_t from = INADDR_LOOPBACK) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(from);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0 &&
                 connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawHttp() {
    if (fd_ >= 0) close(fd_);
  }
  RawHttp(const RawHttp&) = delete;
  RawHttp& operator=(const RawHttp&) = delete;

  bool connected() const { return connected_; }
  // False when the peer has closed (or reset) the connection.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Everything until the peer closes, or timeout_ms passes (then *closed is false).
  std::string ReadAll(int timeout_ms, bool* closed = nullptr) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[65536];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        if (closed != nullptr) *closed = true;
        return out;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    if (closed != nullptr) *closed = false;
    return out;
  }
  // The status code of the first response in `response` (0 if none).
  static int StatusOf(std::string_view response) {
    if (response.size() < 12 || response.substr(0, 5) != "HTTP/") return 0;
    size_t sp = response.find(' ');
    return std::atoi(std::string(response.substr(sp + 1, 3)).c_str());
  }
  // One request with "Connection: close"; returns the whole response.
  static std::string Request(uint16_t port, std::string_view method, std::string_view path,
                             std::string_view extra_headers = {}) {
    RawHttp h(port);
    if (!h.connected()) return {};
    std::string req = std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: localhost\r\n" +
                      std::string(extra_headers) + "Connection: close\r\n\r\n";
    if (!h.Send(req)) return {};
    return h.ReadAll(10000);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace kvrdma::testing
