#include "server/metrics/http_endpoint.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>

#include "common/log.h"

namespace kvrdma::server::metrics {

struct HttpCallbacks {
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
    if (self->open_.load(std::memory_order_relaxed) > self->limits_.busy_connections) {
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

  static void OnConnection(void* cls, MHD_Connection* /*c*/, void** /*socket_state*/,
                           MHD_ConnectionNotificationCode toe) {
    auto* self = static_cast<HttpEndpoint*>(cls);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
      self->open_.fetch_add(1, std::memory_order_relaxed);
    } else {
      self->open_.fetch_sub(1, std::memory_order_relaxed);
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
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
  e->daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &HttpCallbacks::OnRequest, e.get(),  //
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&sa),          //
      MHD_OPTION_CONNECTION_LIMIT, limits.max_connections,             //
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.per_ip_connections,   //
      MHD_OPTION_CONNECTION_TIMEOUT, limits.idle_timeout_s,            //
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, limits.header_bytes,         //
      MHD_OPTION_NOTIFY_CONNECTION, &HttpCallbacks::OnConnection, e.get(),
      MHD_OPTION_EXTERNAL_LOGGER, &HttpCallbacks::Log, nullptr,          //
      MHD_OPTION_UNESCAPE_CALLBACK, &HttpCallbacks::KeepEscaped, nullptr,  //
      MHD_OPTION_END);
  if (e->daemon_ == nullptr) {
    return Status::Unavailable("cannot listen for metrics on " + std::string(listen) +
                               " (address in use, or not an address of this host)");
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(e->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  e->port_ = info != nullptr ? info->port : port;
  return e;
}

HttpEndpoint::~HttpEndpoint() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace kvrdma::server::metrics
