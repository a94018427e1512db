#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace kvrdma {
namespace {

std::atomic<int> g_level{-1};
std::atomic<const char*> g_name{nullptr};

int LevelFromEnv() {
  const char* e = std::getenv("KVRDMA_LOG");
  if (e == nullptr) return static_cast<int>(LogLevel::kInfo);
  if (std::strcmp(e, "debug") == 0) return 0;
  if (std::strcmp(e, "info") == 0) return 1;
  if (std::strcmp(e, "warn") == 0) return 2;
  if (std::strcmp(e, "error") == 0) return 3;
  if (std::strcmp(e, "off") == 0) return 4;
  return static_cast<int>(LogLevel::kInfo);
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel GetLogLevel() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    l = LevelFromEnv();
    g_level.store(l);
  }
  return static_cast<LogLevel>(l);
}

void SetLogName(const char* name) { g_name.store(name); }

void Log(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < static_cast<int>(GetLogLevel())) return;
  static constexpr char kLetters[] = "DIWE";
  char line[1024];
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm tm{};
  gmtime_r(&ts.tv_sec, &tm);
  const char* name = g_name.load();
  int n = std::snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c %s: ",
                        tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                        tm.tm_sec, ts.tv_nsec / 1000000, kLetters[static_cast<int>(level)],
                        name != nullptr ? name : program_invocation_short_name);
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t w = ::write(STDERR_FILENO, line, len);
  (void)w;
}

}  // namespace kvrdma
