// Minimal leveled logging to stderr: "2026-11-22T10:00:00.123Z W kvserver: msg".
//
// Never used per operation on a hot path; for control-plane events, errors
// and destroy failures. Thread-safe (one write(2) per line).
#pragma once

#include <cstdarg>

namespace kvrdma {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Lines below this level are dropped. Default kInfo; KVRDMA_LOG=debug|info|warn|error|off
// in the environment overrides it at first use.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// The name printed after the level (the program's name by default).
void SetLogName(const char* name);

void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace kvrdma

#define KVRDMA_LOG_DEBUG(...) ::kvrdma::Log(::kvrdma::LogLevel::kDebug, __VA_ARGS__)
#define KVRDMA_LOG_INFO(...) ::kvrdma::Log(::kvrdma::LogLevel::kInfo, __VA_ARGS__)
#define KVRDMA_LOG_WARN(...) ::kvrdma::Log(::kvrdma::LogLevel::kWarn, __VA_ARGS__)
#define KVRDMA_LOG_ERROR(...) ::kvrdma::Log(::kvrdma::LogLevel::kError, __VA_ARGS__)
