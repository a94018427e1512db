#include "server/metrics/http_endpoint.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>

#include "common/log.h"

namespace kvrdma::server::metrics {

using Clock = std::chrono::steady_clock;

struct HttpEndpoint::Conn {
  MHD_Connection* c = nullptr;
  int fd = -1;
  std::string address;           // the peer's IP address bytes (no port)
  Clock::time_point head_start;  // when its current request head could start
  bool reading_head = true;      // false from its request's head to the end of its response
  bool closing = false;          // shut down by us; MHD closes it on its next run
};

struct HttpCallbacks {
  static HttpEndpoint::Conn* ConnOf(MHD_Connection* c) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != nullptr ? static_cast<HttpEndpoint::Conn*>(info->socket_context) : nullptr;
  }

  static std::string AddressOf(MHD_Connection* c) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == nullptr || info->client_addr == nullptr) return {};
    const sockaddr* sa = info->client_addr;
    if (sa->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
      return std::string(reinterpret_cast<const char*>(&in->sin_addr), sizeof in->sin_addr);
    }
    if (sa->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
      return std::string(reinterpret_cast<const char*>(&in6->sin6_addr), sizeof in6->sin6_addr);
    }
    return {};
  }

  static MHD_Result Send(MHD_Connection* c, unsigned status, const std::string& body, const char* content_type,
                         const char* extra_header = nullptr, const char* extra_value = nullptr) {
    MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                      MHD_RESPMEM_MUST_COPY);
    if (r == nullptr) return MHD_NO;  // out of memory: MHD closes the connection
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (extra_header != nullptr) MHD_add_response_header(r, extra_header, extra_value);
    MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char* /*version*/, const char* /*upload*/, size_t* /*upload_size*/,
                              void** /*state*/) {
    auto* self = static_cast<HttpEndpoint*>(cls);
    if (HttpEndpoint::Conn* conn = ConnOf(c); conn != nullptr) conn->reading_head = false;
    constexpr const char* kText = "text/plain; charset=utf-8";
    const bool get = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    // Answered on the first call, right after the headers: a request body
    // is never read (MHD closes a connection whose body is left unread).
    if (!get && !head) {
      self->refused_.fetch_add(1, std::memory_order_relaxed);
      return Send(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n", kText, MHD_HTTP_HEADER_ALLOW,
                  "GET, HEAD");
    }
    if (std::strcmp(url, "/metrics") != 0) {
      self->refused_.fetch_add(1, std::memory_order_relaxed);
      return Send(c, MHD_HTTP_NOT_FOUND, "not found: kvserver serves /metrics only\n", kText);
    }
    // Responses being sent (this one included): connections that only hold
    // a socket while trickling a head do not count.
    const auto busy = std::count_if(self->conns_.begin(), self->conns_.end(),
                                    [](const auto& k) { return !k->reading_head && !k->closing; });
    if (static_cast<size_t>(busy) > self->limits_.busy_connections) {
      self->refused_.fetch_add(1, std::memory_order_relaxed);
      return Send(c, MHD_HTTP_SERVICE_UNAVAILABLE, "too many connections to the metrics port\n", kText,
                  MHD_HTTP_HEADER_RETRY_AFTER, "1");
    }
    std::string body;
    try {
      body = self->render_();
    } catch (const std::exception& e) {  // out of memory: never through libmicrohttpd's C frames
      self->refused_.fetch_add(1, std::memory_order_relaxed);
      return Send(c, MHD_HTTP_INTERNAL_SERVER_ERROR, std::string("rendering failed: ") + e.what() + "\n", kText);
    }
    self->served_.fetch_add(1, std::memory_order_relaxed);
    return Send(c, MHD_HTTP_OK, body, "text/plain; version=0.0.4; charset=utf-8");
  }

  // On the endpoint's thread, like every callback: conns_ needs no lock.
  static void OnConnection(void* cls, MHD_Connection* c, void** socket_context,
                           MHD_ConnectionNotificationCode toe) {
    auto* self = static_cast<HttpEndpoint*>(cls);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
      auto conn = std::make_unique<HttpEndpoint::Conn>();
      conn->c = c;
      const MHD_ConnectionInfo* fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      conn->fd = fd != nullptr ? fd->connect_fd : -1;
      conn->address = AddressOf(c);
      conn->head_start = Clock::now();
      *socket_context = conn.get();
      HttpEndpoint::Conn* newcomer = conn.get();
      self->conns_.push_back(std::move(conn));
      self->open_.fetch_add(1, std::memory_order_relaxed);
      self->MakeRoom(newcomer);
    } else {
      auto* conn = static_cast<HttpEndpoint::Conn*>(*socket_context);
      auto& v = self->conns_;
      v.erase(std::remove_if(v.begin(), v.end(), [conn](const auto& k) { return k.get() == conn; }), v.end());
      *socket_context = nullptr;  // a later callback on this connection finds no Conn (ConnOf)
      self->open_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  // A request has ended (answered, or its connection failed): a kept-alive
  // connection starts reading its next head, on a fresh deadline.
  static void OnCompleted(void* /*cls*/, MHD_Connection* c, void** /*state*/,
                          MHD_RequestTerminationCode /*toe*/) {
    if (HttpEndpoint::Conn* conn = ConnOf(c); conn != nullptr) {
      conn->reading_head = true;
      conn->head_start = Clock::now();
    }
  }

  // Paths are compared as sent: no percent-decoding ("/metrics%00" is not
  // "/metrics").
  static size_t KeepEscaped(void* /*cls*/, MHD_Connection* /*c*/, char* s) { return std::strlen(s); }

  static void Log(void* /*cls*/, const char* fmt, va_list ap) {
    char buf[512];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = std::strlen(buf);
    while (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
    KVRDMA_LOG_DEBUG("metrics port: %s", buf);
  }
};

Status ParseListenAddress(std::string_view s, std::string* host, uint16_t* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == s.size()) {
    return Status::InvalidArgument("metrics address '" + std::string(s) + "' is not ADDR:PORT");
  }
  std::string_view h = s.substr(0, colon), p = s.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string_view::npos) {
    return Status::InvalidArgument("metrics address '" + std::string(s) + "': write an IPv6 address as [ADDR]:PORT");
  }
  unsigned long v = 0;
  for (char c : p) {
    if (c < '0' || c > '9' || v > 65535) return Status::InvalidArgument("metrics port '" + std::string(p) + "'");
    v = v * 10 + static_cast<unsigned long>(c - '0');
  }
  if (h.empty() || v > 65535) return Status::InvalidArgument("metrics address '" + std::string(s) + "' is not ADDR:PORT");
  *host = std::string(h);
  *port = static_cast<uint16_t>(v);
  return Status::OK();
}

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(std::string_view listen, Render render,
                                                          HttpLimits limits) {
  std::string host;
  uint16_t port = 0;
  KVRDMA_RETURN_IF_ERROR(ParseListenAddress(listen, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* ai = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &ai); rc != 0 || ai == nullptr) {
    return Status::InvalidArgument("metrics address '" + host + "': " + gai_strerror(rc));
  }
  sockaddr_storage sa{};
  std::memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
  const bool v6 = ai->ai_family == AF_INET6;
  freeaddrinfo(ai);
  if (v6) {
    reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(&sa)->sin_port = htons(port);
  }

  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint(std::move(render), limits));
  // Our thread drives MHD's epoll set (MHD_run), so that between runs it can
  // close connections whose head is late: MHD has no deadline of its own
  // that does not restart with every byte.
  unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
  e->daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &HttpCallbacks::OnRequest, e.get(),  //
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&sa),          //
      // One over max_connections: the newcomer that makes room (MakeRoom).
      MHD_OPTION_CONNECTION_LIMIT, limits.max_connections + 1,         //
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.per_ip_connections,   //
      MHD_OPTION_CONNECTION_TIMEOUT, limits.idle_timeout_s,            //
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, limits.header_bytes,         //
      MHD_OPTION_NOTIFY_CONNECTION, &HttpCallbacks::OnConnection, e.get(),
      MHD_OPTION_NOTIFY_COMPLETED, &HttpCallbacks::OnCompleted, e.get(),
      MHD_OPTION_EXTERNAL_LOGGER, &HttpCallbacks::Log, nullptr,          //
      MHD_OPTION_UNESCAPE_CALLBACK, &HttpCallbacks::KeepEscaped, nullptr,  //
      MHD_OPTION_END);
  if (e->daemon_ == nullptr) {
    return Status::Unavailable("cannot listen for metrics on " + std::string(listen) +
                               " (address in use, or not an address of this host)");
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(e->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  e->port_ = info != nullptr ? info->port : port;
  const MHD_DaemonInfo* ep = MHD_get_daemon_info(e->daemon_, MHD_DAEMON_INFO_EPOLL_FD);
  e->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  e->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ep == nullptr || e->epoll_fd_ < 0 || e->wake_fd_ < 0) {
    return Status::Unavailable(std::string("metrics port: no epoll set: ") + std::strerror(errno));
  }
  for (int fd : {ep->epoll_fd, e->wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(e->epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return Status::Unavailable(std::string("metrics port: epoll_ctl: ") + std::strerror(errno));
    }
  }
  e->thread_ = std::thread([p = e.get()] { p->Loop(); });
  return e;
}

HttpEndpoint::HttpEndpoint(Render render, HttpLimits limits) : render_(std::move(render)), limits_(limits) {}

void HttpEndpoint::Loop() {
  for (;;) {
    MHD_run(daemon_);
    int ms = CloseLateHeads();
    MHD_UNSIGNED_LONG_LONG mhd_ms = 0;
    if (MHD_get_timeout(daemon_, &mhd_ms) == MHD_YES) {
      const int m = static_cast<int>(std::min<MHD_UNSIGNED_LONG_LONG>(mhd_ms, INT_MAX));
      ms = ms < 0 ? m : std::min(ms, m);
    }
    epoll_event ev[2];
    const int n = epoll_wait(epoll_fd_, ev, 2, ms);
    for (int i = 0; i < n; ++i) {
      if (ev[i].data.fd == wake_fd_) return;
    }
  }
}

int HttpEndpoint::CloseLateHeads() {
  const auto now = Clock::now();
  const auto limit = std::chrono::seconds(limits_.header_timeout_s);
  auto next = Clock::time_point::max();
  for (const auto& k : conns_) {
    if (!k->reading_head || k->closing) continue;
    const auto deadline = k->head_start + limit;
    if (deadline <= now) {
      // Counted first: a client that sees its connection end finds it counted
      // (counted after the shutdown, a test read 0 once).
      late_heads_.fetch_add(1, std::memory_order_relaxed);
      // shutdown, not close: the socket stays MHD's until its next run sees
      // the end of the stream and closes it (and calls OnConnection).
      ::shutdown(k->fd, SHUT_RDWR);
      k->closing = true;
    } else {
      next = std::min(next, deadline);
    }
  }
  if (next == Clock::time_point::max()) return -1;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

void HttpEndpoint::MakeRoom(Conn* newcomer) {
  const auto live = std::count_if(conns_.begin(), conns_.end(), [](const auto& k) { return !k->closing; });
  if (static_cast<size_t>(live) <= limits_.max_connections) return;
  auto from_address = [this](const std::string& a) {
    return std::count_if(conns_.begin(), conns_.end(),
                         [&a](const auto& k) { return !k->closing && k->address == a; });
  };
  // The oldest head-reader of the address holding the most connections.
  Conn* victim = nullptr;
  long victim_share = 0;
  for (const auto& k : conns_) {
    if (!k->reading_head || k->closing) continue;
    const long share = from_address(k->address);
    if (victim == nullptr || share > victim_share ||
        (share == victim_share && k->head_start < victim->head_start)) {
      victim = k.get();
      victim_share = share;
    }
  }
  if (victim == nullptr) victim = newcomer;  // every other one is past its head
  ::shutdown(victim->fd, SHUT_RDWR);
  victim->closing = true;
  evicted_.fetch_add(1, std::memory_order_relaxed);
}

HttpEndpoint::~HttpEndpoint() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (::write(wake_fd_, &one, sizeof one) != sizeof one) KVRDMA_LOG_WARN("metrics port: cannot wake its thread");
    thread_.join();
  }
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);  // calls OnConnection for each open one
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

}  // namespace kvrdma::server::metrics
