// kvserver: the kvrdma daemon.
#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <thread>
#include <utility>

#include "common/version.h"
#include "common/log.h"
#include "common/protocol/handshake.h"
#include "common/transport/verbs_transport.h"
#include "server/metrics/http_endpoint.h"
#include "server/metrics/server_metrics.h"
#include "server/server.h"
#include "server/store_backend.h"
#include "server/data_dir.h"

namespace {


uint64_t FloorPow2(uint64_t x) {
  uint64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  using kvrdma::server::ServerConfig;
  ServerConfig cfg;
  std::string mode = "store", huge = "auto", level = "info";
  uint64_t segment_mb = 8;

  CLI::App app{
      "kvserver: the kvrdma key-value store daemon.\n"
      "Registers a hash index and a value log with the RDMA NIC; clients GET with one-sided\n"
      "RDMA READs and send PUT/DELETE to worker threads through a shared receive queue."};
  app.set_config("--config", "", "Read options from a TOML or INI file (same names as the options)");
  app.set_version_flag("--version", kvrdma::VersionLine("kvserver"));
  app.add_option("--listen", cfg.listen, "Address to listen on (an IP of the RDMA interface; 0.0.0.0 = all)")
      ->capture_default_str();
  app.add_option("--port", cfg.port, "rdma_cm port")->capture_default_str();
  app.add_option("--device", cfg.device, "RDMA device name, e.g. mlx5_0 or rxe0 (default: the first)");
  app.add_option("--index-mb", cfg.index_mb,
                 "Hash index size in MiB (8-byte words; rounded down to a power of two; a key sits within 128 words of its home, the index fills to ~95 %)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--log-mb", cfg.log_mb, "Value log size in MiB (keys, values and entry headers)")
      ->capture_default_str()->check(CLI::Range(2, 1 << 24));
  app.add_option("--segment-mb", segment_mb, "Log segment size in MiB (the unit of cleaning; larger than the largest entry)")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--workers", cfg.workers, "Worker threads that apply PUT/DELETE")
      ->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("--mode", mode,
                 "store: a full index or log answers ServerFull and loses nothing;\n"
                 "cache: the oldest entries are evicted to make room")
      ->capture_default_str()->check(CLI::IsMember({"store", "cache"}));
  app.add_option("--max-value-bytes", cfg.max_value_bytes, "Largest value accepted")
      ->capture_default_str()->check(CLI::Range(0u, static_cast<unsigned>(kvrdma::kMaxValueBytes)));
  app.add_option("--max-key-bytes", cfg.max_key_bytes, "Longest key accepted")
      ->capture_default_str()->check(CLI::Range(1u, static_cast<unsigned>(kvrdma::kMaxKeyBytes)));
  app.add_option("--huge-pages", huge,
                 "Back index and log with huge pages: auto (MAP_HUGETLB, then transparent huge pages,\n"
                 "then normal pages), on (MAP_HUGETLB or fail), off. MAP_HUGETLB takes pages reserved\n"
                 "beforehand (sysctl vm.nr_hugepages): with --data-dir they let a restart read a large\n"
                 "log at the disk's speed (the log line at start says how many)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--credits", cfg.credits, "Requests in flight per connection")
      ->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("--message-bytes", cfg.message_bytes,
                 "Bytes per request message (the size of each message buffer: receive buffers and ring); larger values go in fragments")
      ->capture_default_str()->check(CLI::Range(256, 1 << 24));
  app.add_option("--srq-depth", cfg.srq_depth, "Receive buffers in the shared receive queue")
      ->capture_default_str()->check(CLI::Range(16, 1 << 20));
  app.add_option("--max-connections", cfg.max_connections,
                 "Client connections held at once; one more is refused at connect with the reason (each\n"
                 "pins --credits x --message-bytes of ring plus 24 reply buffers of 1 KiB at the default\n"
                 "8 credits: 56 KiB of registered memory, a QP and a memory window)")
      ->capture_default_str()->check(CLI::Range(1u, 1u << 20));
  app.add_option("--max-connections-per-peer", cfg.max_connections_per_peer,
                 "Client connections one source address may hold at once (0 = no per-address limit)")
      ->capture_default_str()->check(CLI::Range(0u, 1u << 20));
  app.add_option("--flow-control-backoff-ms", cfg.flow_control_backoff_ms,
                 "After a connection is closed for breaking flow control (more requests in flight than its "
                 "credits, replies it does not take), refuse new connections from its address for this long, "
                 "doubled with each further such close up to 64 times it, before anything is allocated for "
                 "them (the client is told why, when the back-off ends or 2 s after it asked: a client that "
                 "reconnects at once when refused knocks a few times a second, not hundreds); an address is "
                 "forgotten 64 times it after its refusals end. Clients sharing "
                 "the address (NAT, one host) are refused too. 0 = never")
      ->capture_default_str()->check(CLI::Range(0u, 60u * 60 * 1000));
  app.add_option("--lock-words", cfg.lock_words,
                 "Lock words in the lock table (two keys hashing to the same word cannot be locked at the same "
                 "time); 0: no locks (Lock/TryLock answer Unavailable, no write is refused for a lock), for "
                 "clients you do not trust with locks")
      ->capture_default_str()->check(CLI::Range(0, 1 << 26));
  app.add_option("--grace-ms", cfg.grace_period_ms,
                 "A freed log segment is reused only after this long; clients must finish a GET in half")
      ->capture_default_str()->check(CLI::Range(2, 60000));
  app.add_option("--reply-timeout-ms", cfg.reply_timeout_ms,
                 "Close a connection whose replies stay unacknowledged this long (a client sending more\n"
                 "requests than its credits, or not posting receive buffers); 0 = never")
      ->capture_default_str()->check(CLI::Range(0u, 3600000u));
  uint64_t assembly_mb = cfg.assembly_bytes >> 20;
  app.add_option("--assembly-mb", assembly_mb,
                 "Memory all fragmented PUTs being reassembled may hold together, in MiB, charged for the\n"
                 "bytes received (not the length announced); a fragment that would pass it is answered\n"
                 "NoResource (must hold one --max-value-bytes value)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--assembly-timeout-ms", cfg.assembly_timeout_ms,
                 "Drop a fragmented PUT when no fragment of it has arrived for this long (counted from its\n"
                 "last fragment)")
      ->capture_default_str()->check(CLI::Range(10u, 3600000u));
  app.add_option("--busy-poll-us", cfg.busy_poll_us,
                 "After a request, a worker polls at least this long (microseconds) before it sleeps\n"
                 "until the next one (0 = sleep at once): longer saves wake-ups when every worker has a\n"
                 "CPU of its own; keep it short when workers share CPUs with clients or Soft-RoCE")
      ->capture_default_str()->check(CLI::Range(0u, 1000000u));
  app.add_option("--busy-poll-max-us", cfg.busy_poll_max_us,
                 "While requests keep arriving just after a worker's poll ended, the poll doubles, up to\n"
                 "this long (microseconds); it falls back to --busy-poll-us when they stop, or come\n"
                 "further apart than this. At or below --busy-poll-us: the poll never grows (set it\n"
                 "to --busy-poll-us when workers must not spin longer than that; docs/PERFORMANCE.md,\n"
                 "\"The workers' poll window grows by default\")")
      ->capture_default_str()->check(CLI::Range(0u, 1000000u));
  std::string token_file;
  app.add_option("--auth-token", cfg.auth_token,
                 "Shared secret (<= 32 bytes) clients must present when they connect; without it they\n"
                 "are refused before they learn any rkey (prefer --auth-token-file: argv is visible)");
  app.add_option("--auth-token-file", token_file,
                 "Read the shared secret from this file (trailing newline dropped; an empty secret is refused)")
      ->check(CLI::ExistingFile)->excludes("--auth-token");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve Prometheus metrics over HTTP at ADDR:PORT/metrics (e.g. 127.0.0.1:9471;\n"
                 "[::1]:9471 for IPv6). Off by default. Plain HTTP, no authentication: it shows\n"
                 "counts and sizes, never keys or values; bind it to a loopback or management\n"
                 "address (docs/SECURITY.md, \"The metrics port\")")
      ->type_name("ADDR:PORT");
  // Old names, kept for one release (issue 23): hidden from --help, same
  // effect, and a warning that names the new flag.
  const std::pair<const char*, const char*> renamed[] = {{"--slot-bytes", "--message-bytes"},
                                                         {"--lock-slots", "--lock-words"}};
  CLI::Option* old_message_bytes = app.add_option("--slot-bytes", cfg.message_bytes)
                                       ->check(CLI::Range(256, 1 << 24))->group("");
  CLI::Option* old_lock_words = app.add_option("--lock-slots", cfg.lock_words)
                                    ->check(CLI::Range(0, 1 << 26))->group("");
  std::string data_dir, fsync = "everysec";
  bool verify = false;
  app.add_option("--data-dir", data_dir,
                 "Keep the store in this directory and recover it at start: every log segment is\n"
                 "written to a file as it fills, and a restart serves every acknowledged write again\n"
                 "(store mode only; cache mode and no --data-dir keep memory only: a restart loses\n"
                 "everything). An empty or new directory is made a data dir; --segment-mb must match\n"
                 "the one it was made with")
      ->type_name("DIR");
  app.add_option("--fsync", fsync,
                 "With --data-dir, when a PUT/DELETE is answered:\n"
                 "always: once on stable storage (the writes a worker applied together share one\n"
                 "  flush: group commit; segment files are written whole with zeros ahead, one spare\n"
                 "  file at most); survives kill -9 and a power cut\n"
                 "everysec: once in the kernel, flushed at least once a second; survives kill -9, a\n"
                 "  power cut may lose about the last second\n"
                 "no: once in the kernel, flushed when the kernel decides; survives kill -9 only")
      ->capture_default_str()->check(CLI::IsMember({"always", "everysec", "no"}));
  app.add_flag("--verify", verify,
               "Check the --data-dir offline (meta file, every segment file's header and every entry's\n"
               "checksum), print what is wrong (file, offset, what was expected) and exit: 0 if it can\n"
               "be served, 1 if it is damaged. Does not change the directory; needs no RDMA device")
      ->needs("--data-dir");
  app.add_option("--log-level", level, "debug, info, warn or error")
      ->capture_default_str()->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help/--version: 0; a usage error: 2 (message printed)
  }

  kvrdma::SetLogName("kvserver");
  for (const auto& [opt, names] : {std::pair{old_message_bytes, renamed[0]}, std::pair{old_lock_words, renamed[1]}}) {
    if (opt->count() > 0 && app.count(names.second) > 0) {
      std::fprintf(stderr, "kvserver: %s is the old name of %s: give only %s\n", names.first, names.second,
                   names.second);
      return 2;
    }
    if (opt->count() > 0) {
      std::fprintf(stderr, "kvserver: warning: %s is renamed %s; the old name will be removed in the next release\n",
                   names.first, names.second);
    }
  }
  if (!token_file.empty()) {
    std::ifstream f(token_file, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "kvserver: cannot read --auth-token-file %s\n", token_file.c_str());
      return 2;
    }
    std::string t((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
    cfg.auth_token = t;
  }
  // An empty token would mean "no authentication" (Server treats an empty
  // auth_token as off): an empty or unreadable file, or --auth-token "", must
  // not open the server to every client. Checked before any device is opened.
  if ((!token_file.empty() || app.count("--auth-token") > 0) && cfg.auth_token.empty()) {
    if (!token_file.empty()) {
      std::fprintf(stderr,
                   "kvserver: --auth-token-file %s is empty: refusing to start without authentication "
                   "(put the shared secret in the file, or leave the option out to accept every client)\n",
                   token_file.c_str());
    } else {
      std::fprintf(stderr,
                   "kvserver: --auth-token is empty: refusing to start without authentication "
                   "(leave the option out to accept every client)\n");
    }
    return 2;
  }
  if (kvrdma::Status st = kvrdma::CheckMessageLimits(cfg.message_bytes, cfg.max_key_bytes); !st.ok()) {
    std::fprintf(stderr, "kvserver: %s\n", st.message().c_str());
    return 2;
  }
  cfg.assembly_bytes = assembly_mb << 20;
  if (cfg.assembly_bytes < cfg.max_value_bytes) {
    std::fprintf(stderr, "kvserver: --assembly-mb %llu cannot hold one value of --max-value-bytes %u\n",
                 static_cast<unsigned long long>(assembly_mb), cfg.max_value_bytes);
    return 2;
  }
  if (cfg.auth_token.size() > kvrdma::kMaxAuthToken) {
    std::fprintf(stderr, "kvserver: the auth token is longer than %zu bytes\n", kvrdma::kMaxAuthToken);
    return 2;
  }
  static const std::map<std::string, kvrdma::LogLevel> kLevels = {{"debug", kvrdma::LogLevel::kDebug},
                                                                 {"info", kvrdma::LogLevel::kInfo},
                                                                 {"warn", kvrdma::LogLevel::kWarn},
                                                                 {"error", kvrdma::LogLevel::kError}};
  kvrdma::SetLogLevel(kLevels.at(level));
  cfg.mode = mode == "cache" ? kvrdma::CapacityMode::kCache : kvrdma::CapacityMode::kStore;
  if (verify) return kvrdma::server::VerifyDataDir(data_dir);
  if (!data_dir.empty() && cfg.mode != kvrdma::CapacityMode::kStore) {
    std::fprintf(stderr, "kvserver: --data-dir needs --mode store (a cache keeps memory only)\n");
    return 2;
  }
  cfg.huge_pages = huge == "on" ? kvrdma::HugePages::kOn
                   : huge == "off" ? kvrdma::HugePages::kOff : kvrdma::HugePages::kAuto;

  // Block the stop signals in every thread; one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  kvrdma::StoreConfig sc;
  sc.index_homes = std::max<uint64_t>(2, FloorPow2(cfg.index_mb * (1 << 20) / kvrdma::kWordBytes));
  sc.segment_bytes = segment_mb << 20;
  sc.log_bytes = (cfg.log_mb << 20) / sc.segment_bytes * sc.segment_bytes;
  sc.workers = cfg.workers;
  sc.mode = cfg.mode;
  sc.huge_pages = cfg.huge_pages;
  sc.seed = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  sc.max_key_bytes = cfg.max_key_bytes;
  sc.max_value_bytes = cfg.max_value_bytes;
  sc.grace_period = std::chrono::milliseconds(cfg.grace_period_ms);
  // The cleaner sleeps this long when there is nothing to do; appends that
  // need space wake it at once. An idle server must stay idle.
  sc.cleaner_interval = std::chrono::milliseconds(20);
  sc.data_dir = data_dir;
  sc.fsync = fsync == "always" ? kvrdma::FsyncMode::kAlways
             : fsync == "no"   ? kvrdma::FsyncMode::kNo
                               : kvrdma::FsyncMode::kEverySec;
  auto device = kvrdma::OpenVerbsDevice(cfg.device);
  if (!device.ok()) {
    KVRDMA_LOG_ERROR("%s", device.status().ToString().c_str());
    return 1;
  }
  // The data dir's lock, before the store reads the dir, and after the
  // device is open: when kvserver dies, the kernel releases its files
  // newest first, so the lock is gone before the device's teardown (on
  // Soft-RoCE that takes up to minutes after a SIGKILL) and a new kvserver
  // can start on the dir at once.
  kvrdma::server::DataDirLock dir_lock;
  if (!data_dir.empty()) {
    if (kvrdma::Status st = dir_lock.Take(data_dir); !st.ok()) {
      KVRDMA_LOG_ERROR("%s", st.ToString().c_str());
      return 1;
    }
  }
  auto backend = kvrdma::server::StoreBackend::Create(sc);
  if (!backend.ok()) {
    KVRDMA_LOG_ERROR("creating the store: %s", backend.status().ToString().c_str());
    return 1;
  }
  kvrdma::server::Server server(cfg, device.value(), **backend);
  if (kvrdma::Status st = server.Start(); !st.ok()) {
    KVRDMA_LOG_ERROR("%s", st.ToString().c_str());
    return 1;
  }
  // The metrics port reads the server's counters, the store and the lock
  // table: it is stopped before the server releases them.
  std::unique_ptr<kvrdma::server::metrics::HttpEndpoint> metrics;
  if (!metrics_listen.empty()) {
    kvrdma::server::metrics::MetricsSources src{&server.config(), &server.counters(), &(*backend)->store(),
                                                server.lock_view()};
    auto m = kvrdma::server::metrics::HttpEndpoint::Start(
        metrics_listen, [src] { return kvrdma::server::metrics::RenderMetrics(src); });
    if (!m.ok()) {
      KVRDMA_LOG_ERROR("%s", m.status().ToString().c_str());
      return 1;
    }
    metrics = std::move(m).value();
    KVRDMA_LOG_INFO("metrics on http://%s/metrics (port %u)", metrics_listen.c_str(), metrics->port());
  }
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    KVRDMA_LOG_INFO("%s: stopping (finishing requests in flight, disconnecting clients)",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
    metrics.reset();  // before Run() releases what it reads
    server.RequestStop();
  });
  signals.detach();  // exits with the process
  kvrdma::Status st = server.Run();
  if (!st.ok()) {
    KVRDMA_LOG_ERROR("%s", st.ToString().c_str());
    return 1;
  }
  KVRDMA_LOG_INFO("stopped cleanly");
  return 0;
}
