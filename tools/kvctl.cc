// kvctl: the kvrdma command-line client.
//
//   kvctl --server HOST[:PORT] get KEY        prints the value; exit 1 if absent
//   kvctl --server HOST[:PORT] put KEY VALUE  (VALUE "-" reads it from stdin)
//         [--if-version N | --if-absent] [--print-version]
//                                             a conditional write: exit 3 and the key's
//                                             current version on stdout if it is not at N
//                                             (0: no value); --print-version prints the
//                                             write's version
//   kvctl --server HOST[:PORT] del KEY [--if-version N] [--print-version]
//                                             exit 1 if absent (unconditional), 3 as put
//   kvctl --server HOST[:PORT] stats          the server's counters, one per line
//   kvctl --server HOST[:PORT] stats --json   the same as one JSON object {"name": value, ...}
//   kvctl --server HOST[:PORT] lock KEY [--lease-ms N] [--hold-ms M]
//                                             waits for the lock, prints "locked", holds it
//                                             M ms (-1: until killed), unlocks
//   kvctl --server HOST[:PORT] trylock KEY    exit 0 if the lock was free (taken and
//                                             released again), 1 if another client holds it
//
// Exit codes: 0 found / done, 1 not found, 2 error (message on stderr), 3
// a conditional write refused (VersionMismatch).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "common/version.h"
#include "kvrdma/client.h"
#include "kvrdma/sharded_client.h"

namespace {

constexpr int kExitOk = 0, kExitNotFound = 1, kExitError = 2, kExitVersionMismatch = 3;

// A JSON string literal: the server chooses the names, so every byte that
// JSON does not allow raw is escaped (bytes >= 0x80 as \u00XX: the output
// stays ASCII whatever the server sends).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int Fail(const std::string& what, const kvrdma::Status& st) {
  std::fprintf(stderr, "kvctl: %s: %s\n", what.c_str(), st.ToString().c_str());
  return kExitError;
}

// A write's outcome: its version on stdout when asked; for a refused
// conditional write, the key's current version on stdout and exit 3.
int WriteResult(const char* what, const kvrdma::Status& st, const kvrdma::Client& c, bool print_version) {
  if (st.IsVersionMismatch()) {
    std::printf("%llu\n", static_cast<unsigned long long>(c.last_version()));
    std::fprintf(stderr, "kvctl: %s: %s (current version %llu)\n", what, st.ToString().c_str(),
                 static_cast<unsigned long long>(c.last_version()));
    return kExitVersionMismatch;
  }
  if (!st.ok()) return Fail(what, st);
  if (print_version) std::printf("%llu\n", static_cast<unsigned long long>(c.last_version()));
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvctl: command-line client for kvrdma.\nExit codes: 0 found/done, 1 not found (or lock held), 2 error,\n"
               "3 a conditional write refused (the key's current version on stdout)."};
  app.set_version_flag("--version", kvrdma::VersionLine("kvctl"));
  app.require_subcommand(1);
  std::string server = "127.0.0.1", device, put_mode = "send";
  int timeout_ms = 5000;
  bool raw = false;
  app.add_option("-s,--server", server, "kvserver address, HOST[:PORT] (default port 7471)")->capture_default_str();
  app.add_option("--device", device, "Local RDMA device (default: the first)");
  app.add_option("--put-mode", put_mode, "How writes travel: send or write-imm")
      ->capture_default_str()->check(CLI::IsMember({"send", "write-imm"}));
  app.add_option("--timeout-ms", timeout_ms, "Connect and per-operation timeout")->capture_default_str();
  std::string token, token_file;
  app.add_option("--auth-token", token, "The server's shared secret, if it requires one");
  app.add_option("--auth-token-file", token_file, "Read the shared secret from this file")
      ->check(CLI::ExistingFile)->excludes("--auth-token");
  std::string key, value;
  auto* get = app.add_subcommand("get", "Print the value of KEY (exit 1 if absent)");
  get->add_option("KEY", key, "The key")->required();
  get->add_flag("--raw", raw, "Print the value without a trailing newline");
  auto* put = app.add_subcommand("put", "Store VALUE under KEY (VALUE '-' reads stdin)");
  put->add_option("KEY", key, "The key")->required();
  put->add_option("VALUE", value, "The value, or - to read it from stdin")->required();
  uint64_t if_version = kvrdma::kAnyVersion;
  bool if_absent = false, print_version = false;
  auto* put_if = put->add_option("--if-version", if_version,
                                 "Only if KEY's current version is N (checked by the server; 0: only if it has no "
                                 "value); else exit 3 with the current version on stdout")
                     ->check(CLI::Range(uint64_t{0}, kvrdma::kAnyVersion - 1));
  put->add_flag("--if-absent", if_absent, "Only if KEY has no value (= --if-version 0)")->excludes(put_if);
  put->add_flag("--print-version", print_version, "Print the write's version (it grows with each write of KEY)");
  auto* del = app.add_subcommand("del", "Delete KEY (exit 1 if absent)");
  del->add_option("KEY", key, "The key")->required();
  del->add_option("--if-version", if_version,
                  "Only if KEY's current version is N (>= 1; checked by the server); else exit 3 with the "
                  "current version on stdout (0: no value)")
      ->check(CLI::Range(uint64_t{1}, kvrdma::kAnyVersion - 1));
  del->add_flag("--print-version", print_version, "Print the delete's version");
  auto* stats = app.add_subcommand("stats", "Print the server's counters");
  bool json = false;
  stats->add_flag("--json", json, "One JSON object {\"name\": value, ...} instead of 'name value' lines");
  int64_t lease_ms = 10000, hold_ms = 0;
  auto* lock = app.add_subcommand("lock", "Wait for KEY's lock, print 'locked', hold it, unlock");
  lock->add_option("KEY", key, "The key")->required();
  lock->add_option("--lease-ms", lease_ms, "Lease: the lock frees itself this long after it was taken")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  lock->add_option("--hold-ms", hold_ms, "How long to hold it before unlocking (-1: until killed)")
      ->capture_default_str();
  auto* trylock = app.add_subcommand("trylock", "Exit 0 if KEY's lock is free (taken and released), 1 if held");
  trylock->add_option("KEY", key, "The key")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitError;
  }

  kvrdma::ClientOptions o;
  // The parser ShardedClient and kvbench use.
  if (!kvrdma::ShardedClient::ParseServerAddress(server, &o.host, &o.port).ok()) {
    std::fprintf(stderr, "kvctl: bad --server '%s' (expected HOST[:PORT])\n", server.c_str());
    return kExitError;
  }
  o.device = device;
  o.put_mode = put_mode == "write-imm" ? kvrdma::PutMode::kWriteImm : kvrdma::PutMode::kSend;
  o.connect_timeout_ms = o.op_timeout_ms = timeout_ms;
  if (!token_file.empty()) {
    std::ifstream f(token_file, std::ios::binary);
    token.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  }
  o.auth_token = token;
  if (put->parsed() && value == "-") {
    value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  auto client = kvrdma::Client::Connect(o);
  if (!client.ok()) return Fail("connecting to " + server, client.status());
  kvrdma::Client& c = **client;

  if (get->parsed()) {
    std::string v;
    kvrdma::Status st = c.Get(key, &v);
    if (st.IsNotFound()) return kExitNotFound;
    if (!st.ok()) return Fail("get", st);
    std::fwrite(v.data(), 1, v.size(), stdout);
    if (!raw) std::fputc('\n', stdout);
    return kExitOk;
  }
  if (put->parsed()) {
    return WriteResult("put", c.Put(key, value, if_absent ? kvrdma::kIfAbsent : if_version), c, print_version);
  }
  if (del->parsed()) {
    kvrdma::Status st = c.Delete(key, if_version);
    if (st.IsNotFound()) return kExitNotFound;
    return WriteResult("del", st, c, print_version);
  }
  if (lock->parsed()) {
    kvrdma::Status st = c.Lock(key, std::chrono::milliseconds(lease_ms));
    if (!st.ok()) return Fail("lock", st);
    std::printf("locked\n");
    std::fflush(stdout);
    if (hold_ms < 0) {
      for (;;) pause();
    }
    if (hold_ms > 0) usleep(static_cast<useconds_t>(hold_ms) * 1000);
    st = c.Unlock(key);
    return st.ok() ? kExitOk : Fail("unlock", st);
  }
  if (trylock->parsed()) {
    kvrdma::Status st = c.TryLock(key, std::chrono::milliseconds(1000));
    if (st.code() == kvrdma::Status::Code::kLocked) return kExitNotFound;
    if (!st.ok()) return Fail("trylock", st);
    st = c.Unlock(key);
    return st.ok() ? kExitOk : Fail("unlock", st);
  }
  if (stats->parsed()) {
    auto s = c.Stats();
    if (!s.ok()) return Fail("stats", s.status());
    if (json) {
      std::string out = "{";
      for (const auto& [name, v] : *s) {
        if (out.size() > 1) out += ", ";
        out += JsonString(name) + ": " + std::to_string(v);
      }
      std::printf("%s}\n", out.c_str());
      return kExitOk;
    }
    for (const auto& [name, v] : *s) std::printf("%s %llu\n", name.c_str(), static_cast<unsigned long long>(v));
    return kExitOk;
  }
  return kExitError;
}
