// The metrics port: a small HTTP/1.1 server (GNU libmicrohttpd driven by
// one thread of ours on its epoll set) that answers GET /metrics with the body a
// render function returns. It shares nothing with the RDMA side but that
// function's reads: a slow, hostile or flooding HTTP client costs this one
// thread and its sockets, never a worker.
//
// Answers: 200 GET/HEAD /metrics; 404 any other path; 405 any other method
// (with Allow); 414 request line over the connection's memory; 431 request
// headers over it (Limits::header_bytes); 503 with Retry-After when more
// than Limits::busy_connections responses are being sent at once (the
// request is read, the render is skipped: it bounds the memory held by
// bodies that clients do not read).
//
// No client holds the port from another (issue 25, item 7):
// - a request head (request line and headers) must be complete within
//   header_timeout_s of the accept, or of the end of the previous response
//   on a kept-alive connection, however often bytes trickle in; the
//   connection is closed otherwise (idle_timeout_s alone restarts with
//   every byte, so a header line every 2 s kept it open for ever);
// - a connection over per_ip_connections from one address is closed at
//   accept;
// - when max_connections are open and another arrives, the oldest
//   connection still reading its request head, from the address holding
//   the most connections, is closed to make room (the newcomer is closed
//   instead when every open connection is past its head). A scraper sends
//   its head at once, so connections that trickle theirs are the ones that
//   go, and a fresh address is served while others hold the rest.
// Connections waiting beyond max_connections + 1 wait in the kernel's
// listen backlog (no memory or thread of ours). docs/SECURITY.md, "The
// metrics port", says what the port exposes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace kvrdma::server::metrics {

struct HttpLimits {
  unsigned max_connections = 64;     // open at once; a newcomer beyond closes a head-reader
  unsigned per_ip_connections = 16;  // from one address; 0 = no separate limit
  unsigned busy_connections = 32;    // above this many responses being sent, requests get 503
  unsigned idle_timeout_s = 5;       // a connection silent this long is closed
  unsigned header_timeout_s = 5;     // a request head not complete this long after it may start
  size_t header_bytes = 16384;       // request line + headers (the connection's memory)
};

class HttpEndpoint {
 public:
  using Render = std::function<std::string()>;
  // Listens on "ADDR:PORT" ("[v6]:PORT" for IPv6; a name resolves;
  // PORT 0 = any free port). InvalidArgument for a malformed address,
  // Unavailable when it cannot listen (in use, not a local address).
  static Result<std::unique_ptr<HttpEndpoint>> Start(std::string_view listen, Render render,
                                                    HttpLimits limits = {});
  ~HttpEndpoint();  // stops the thread and closes every connection
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  uint16_t port() const { return port_; }
  // Responses sent, by class (for tests and the endpoint's own metrics).
  uint64_t served() const { return served_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  unsigned open_connections() const { return open_.load(std::memory_order_relaxed); }
  // Connections closed for a late request head, or to make room for another.
  uint64_t late_heads() const { return late_heads_.load(std::memory_order_relaxed); }
  uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }

 private:
  HttpEndpoint(Render render, HttpLimits limits);  // (in the .cc, where Conn is complete)
  friend struct HttpCallbacks;  // libmicrohttpd's callbacks (http_endpoint.cc)

  Render render_;
  struct Conn;  // one open connection (http_endpoint.cc)
  void Loop();                // the endpoint's thread: MHD_run, then CloseLateHeads
  int CloseLateHeads();       // returns ms until the next head deadline (-1: none)
  void MakeRoom(Conn* newcomer);

  HttpLimits limits_;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  int epoll_fd_ = -1;  // MHD's epoll set and wake_fd_
  int wake_fd_ = -1;   // an eventfd the destructor writes to stop Loop
  std::thread thread_;
  // Touched only by the endpoint's thread (MHD's callbacks run there).
  std::vector<std::unique_ptr<Conn>> conns_;
  std::atomic<unsigned> open_{0};
  std::atomic<uint64_t> late_heads_{0};
  std::atomic<uint64_t> evicted_{0};
  std::atomic<uint64_t> served_{0};
  std::atomic<uint64_t> refused_{0};
};

// Splits "ADDR:PORT" / "[v6]:PORT". InvalidArgument if malformed.
Status ParseListenAddress(std::string_view s, std::string* host, uint16_t* port);

}  // namespace kvrdma::server::metrics
