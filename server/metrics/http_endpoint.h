// The metrics port: a small HTTP/1.1 server (GNU libmicrohttpd, one
// internal thread with epoll) that answers GET /metrics with the body a
// render function returns. It shares nothing with the RDMA side but that
// function's reads: a slow, hostile or flooding HTTP client costs this one
// thread and its sockets, never a worker.
//
// Answers: 200 GET/HEAD /metrics; 404 any other path; 405 any other method
// (with Allow); 414 request line over the connection's memory; 431 request
// headers over it (Limits::header_bytes); 503 with Retry-After when more
// than Limits::busy_connections are open (the request is read, the render
// is skipped). While max_connections are open, the endpoint stops
// accepting: new connections wait in the kernel's listen backlog (no memory
// or thread of ours) until a connection closes; a connection over
// per_ip_connections from one address is closed at accept. A connection
// idle for idle_timeout_s (a slow client that stops sending half-way) is
// closed. docs/SECURITY.md, "The metrics port", says what the port exposes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace kvrdma::server::metrics {

struct HttpLimits {
  unsigned max_connections = 64;     // open at once; more wait in the listen backlog
  unsigned per_ip_connections = 16;  // from one address; 0 = no separate limit
  unsigned busy_connections = 32;    // above this many open, requests get 503
  unsigned idle_timeout_s = 5;       // a connection silent this long is closed
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

 private:
  HttpEndpoint(Render render, HttpLimits limits) : render_(std::move(render)), limits_(limits) {}
  friend struct HttpCallbacks;  // libmicrohttpd's callbacks (http_endpoint.cc)

  Render render_;
  HttpLimits limits_;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  std::atomic<unsigned> open_{0};
  std::atomic<uint64_t> served_{0};
  std::atomic<uint64_t> refused_{0};
};

// Splits "ADDR:PORT" / "[v6]:PORT". InvalidArgument if malformed.
Status ParseListenAddress(std::string_view s, std::string* host, uint16_t* port);

}  // namespace kvrdma::server::metrics
