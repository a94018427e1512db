#include "server/metrics/server_metrics.h"

#include <cctype>

#include "common/version.h"
#include "server/metrics/exposition.h"
#include "server/store/segment_file.h"

namespace kvrdma::server::metrics {
namespace {

uint64_t Load(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }

void Counter(Exposition& e, std::string_view name, std::string_view help, uint64_t v) {
  e.Family(name, "counter", help);
  e.Sample(name, {}, v);
}

void Gauge(Exposition& e, std::string_view name, std::string_view help, double v) {
  e.Family(name, "gauge", help);
  e.Sample(name, {}, v);
}

void RenderRequests(Exposition& e, const MetricsSources& s) {
  const ServerCounters& c = *s.counters;
  Counter(e, "kvrdma_puts_total", "PUT requests applied to the store", Load(c.puts));
  Counter(e, "kvrdma_deletes_total", "DELETE requests that removed a key", Load(c.deletes));
  Counter(e, "kvrdma_batched_messages_total",
          "Request messages that carried more than one PUT/DELETE (protocol 10)", Load(c.batched_messages));
  Counter(e, "kvrdma_batched_requests_total", "PUT/DELETE requests carried by messages of more than one",
          Load(c.batched_requests));
  Counter(e, "kvrdma_errors_total",
          "Requests and connections the server counted as errors (malformed or refused requests, "
          "failed authentication, flow-control violations)",
          Load(c.errors));
  e.Family("kvrdma_request_failures_total", "counter",
           "Requests answered with a status other than OK, by status (not_found and locked are normal "
           "outcomes, not errors)");
  for (uint8_t code = 1; code < RequestMetrics::kStatusCodes; ++code) {
    auto sc = static_cast<Status::Code>(code);
    std::string label = SnakeCase(CodeName(sc));
    e.Sample("kvrdma_request_failures_total", {{"status", label}}, c.request_metrics.failures(sc));
  }

  e.Family("kvrdma_worker_service_seconds", "histogram",
           "Time a worker spent on one request message, from parsing to posting its reply");
  uint64_t cumulative[ServiceTimeHistogram::kBuckets] = {};
  uint64_t sum_ns = 0;
  for (uint32_t w = 0; w < s.config->workers && w < RequestMetrics::kMaxWorkers; ++w) {
    const ServiceTimeHistogram& h = c.request_metrics.service_time(w);
    for (size_t b = 0; b < ServiceTimeHistogram::kBuckets; ++b) cumulative[b] += h.bucket(b);
    sum_ns += h.sum_ns();
  }
  uint64_t running = 0;
  for (size_t b = 0; b < ServiceTimeHistogram::kBuckets; ++b) {
    running += cumulative[b];
    std::string le = b < kServiceBoundsNs.size() ? Exposition::FormatDouble(kServiceBoundsNs[b] * 1e-9) : "+Inf";
    e.Sample("kvrdma_worker_service_seconds_bucket", {{"le", le}}, running);
  }
  e.Sample("kvrdma_worker_service_seconds_sum", {}, static_cast<double>(sum_ns) * 1e-9);
  e.Sample("kvrdma_worker_service_seconds_count", {}, running);
}

void RenderConnections(Exposition& e, const MetricsSources& s) {
  const ServerCounters& c = *s.counters;
  Gauge(e, "kvrdma_connections", "Client connections open now", static_cast<double>(Load(c.connections)));
  Counter(e, "kvrdma_connections_accepted_total", "Client connections accepted", Load(c.connections_total));
  using Why = RequestMetrics::RejectReason;
  e.Family("kvrdma_connections_rejected_total", "counter",
           "Connect requests refused, by reason: auth (missing or wrong auth token), max_connections "
           "(kvserver --max-connections reached), max_per_peer (--max-connections-per-peer reached for "
           "the client's address), flow_control_backoff (a connection from the client's address was "
           "closed for breaking flow control lately: kvserver --flow-control-backoff-ms), other "
           "(malformed request, out of memory or connection ids)");
  e.Sample("kvrdma_connections_rejected_total", {{"reason", "auth"}}, c.request_metrics.rejected(Why::kAuth));
  e.Sample("kvrdma_connections_rejected_total", {{"reason", "max_connections"}},
           c.request_metrics.rejected(Why::kMaxConnections));
  e.Sample("kvrdma_connections_rejected_total", {{"reason", "max_per_peer"}},
           c.request_metrics.rejected(Why::kMaxPerPeer));
  e.Sample("kvrdma_connections_rejected_total", {{"reason", "flow_control_backoff"}},
           c.request_metrics.rejected(Why::kFlowControlBackoff));
  e.Sample("kvrdma_connections_rejected_total", {{"reason", "other"}}, c.request_metrics.rejected(Why::kOther));
  e.Family("kvrdma_connections_closed_total", "counter",
           "Client connections that ended, by reason: client (it disconnected), qp_failed (its queue "
           "pair failed, the server closed it), flow_control (it broke flow control, the server closed it)");
  e.Sample("kvrdma_connections_closed_total", {{"reason", "client"}}, Load(c.request_metrics.closed_by_client));
  e.Sample("kvrdma_connections_closed_total", {{"reason", "qp_failed"}}, Load(c.closed_failed));
  e.Sample("kvrdma_connections_closed_total", {{"reason", "flow_control"}}, Load(c.closed_flow_control));
  Counter(e, "kvrdma_flow_control_violations_total",
          "Connections that sent more requests than their credits or did not take their replies "
          "(each was closed)",
          Load(c.closed_flow_control));
  Gauge(e, "kvrdma_connection_credits", "Requests a connection may have in flight (kvserver --credits)",
        s.config->credits);
  Gauge(e, "kvrdma_workers", "Worker threads applying requests", s.config->workers);
}

void RenderDisk(Exposition& e, const StoreStats& st, double seg);

void RenderStore(Exposition& e, const Store& store) {
  const StoreStats st = store.Stats();
  const double seg = static_cast<double>(store.config().segment_bytes);
  Gauge(e, "kvrdma_items", "Keys with a value", static_cast<double>(st.items));
  Gauge(e, "kvrdma_tombstones", "Deleted keys whose tombstone still holds an index word",
        static_cast<double>(st.tombstones));
  Gauge(e, "kvrdma_index_homes", "Homes of the hash index (a key lives in the window of words from its home)", static_cast<double>(st.index_homes));
  Gauge(e, "kvrdma_index_words_used", "Index words holding an item or a tombstone",
        static_cast<double>(st.index_words_used));
  Gauge(e, "kvrdma_index_load_ratio", "Index words used / homes",
        st.index_homes == 0 ? 0.0 : static_cast<double>(st.index_words_used) / static_cast<double>(st.index_homes));
  Gauge(e, "kvrdma_log_size_bytes", "Size of the value log", static_cast<double>(st.log_bytes));
  Gauge(e, "kvrdma_log_live_bytes", "Bytes of log entries the index points to", static_cast<double>(st.log_bytes_live));
  Gauge(e, "kvrdma_log_used_bytes", "Bytes of log segments in use (open, sealed or being cleaned)",
        static_cast<double>(st.segments_used) * seg);
  Gauge(e, "kvrdma_log_free_bytes", "Bytes of free log segments (including retired ones in their grace period)",
        static_cast<double>(st.segments_free) * seg);
  e.Family("kvrdma_log_segments", "gauge",
           "Log segments by state: free, open (appended to), sealed, cleaning (being compacted or evicted), "
           "retired (waiting for the grace period before reuse)");
  e.Sample("kvrdma_log_segments", {{"state", "free"}}, st.segments_free - st.segments_retired);
  e.Sample("kvrdma_log_segments", {{"state", "open"}}, st.segments_open);
  e.Sample("kvrdma_log_segments", {{"state", "sealed"}}, st.segments_sealed);
  e.Sample("kvrdma_log_segments", {{"state", "cleaning"}}, st.segments_busy);
  e.Sample("kvrdma_log_segments", {{"state", "retired"}}, st.segments_retired);
  Gauge(e, "kvrdma_grace_queue_segments",
        "Retired segments waiting for the grace period before they may be reused",
        static_cast<double>(st.segments_retired));
  Counter(e, "kvrdma_cleaner_passes_total", "Cleaner passes that reclaimed something", st.cleaner_runs);
  Counter(e, "kvrdma_cleaner_relocations_total", "Live entries the cleaner moved", st.relocations);
  Counter(e, "kvrdma_cleaner_segments_retired_total", "Segments compacted or evicted and retired",
          st.segments_cleaned);
  Counter(e, "kvrdma_evictions_total", "Entries evicted to make room (cache mode)", st.evictions);
  Counter(e, "kvrdma_index_moves_total", "Entry refs hopped to another word of their window to make room", st.index_moves);
  Gauge(e, "kvrdma_index_move_tags", "Index words whose move tag has not expired (readers of a matching key take another round)",
        static_cast<double>(st.index_tags));
  if (st.durable) RenderDisk(e, st, seg);
}

// The durable store (--data-dir): its files, flushes and last recovery.
void RenderDisk(Exposition& e, const StoreStats& st, double seg) {
  const DurableStats& d = st.disk;
  Gauge(e, "kvrdma_disk_segments", "Segment files in the data dir", static_cast<double>(d.segments_on_disk));
  Gauge(e, "kvrdma_disk_bytes",
        "Bytes the segment files take (each allocated whole, with its header), and the spare file (--fsync always)",
        static_cast<double>(d.segments_on_disk + d.spares_on_disk) * (seg + static_cast<double>(kSegmentHeaderBytes)));
  Counter(e, "kvrdma_disk_spares_taken_total",
          "Segment files that were the spare file made ahead with zeros (--fsync always); the others were allocated "
          "when their segment opened",
          d.segments_from_spares);
  Counter(e, "kvrdma_disk_written_bytes_total", "Log bytes written to segment files", d.bytes_written);
  Counter(e, "kvrdma_disk_marks_total", "Superseded writes marked in their segment files", d.marks_written);
  Counter(e, "kvrdma_disk_errors_total", "Failed file writes, flushes and creations", d.io_errors);
  Counter(e, "kvrdma_disk_commits_flushed_total",
          "Worker commits a flush made durable (--fsync always; commits over flushes: writes batches per flush)",
          d.commits_flushed);
  e.Family("kvrdma_disk_flush_seconds", "histogram",
           "Flush rounds (fdatasync of every segment file written since the last round)");
  uint64_t running = 0;
  for (size_t b = 0; b < DurableStats::kFlushBuckets; ++b) {
    running += d.flush_buckets[b];
    e.Sample("kvrdma_disk_flush_seconds_bucket",
             {{"le", Exposition::FormatDouble(static_cast<double>(DurableStats::kFlushBucketsNs[b]) * 1e-9)}}, running);
  }
  e.Sample("kvrdma_disk_flush_seconds_bucket", {{"le", "+Inf"}}, d.flushes);
  e.Sample("kvrdma_disk_flush_seconds_sum", {}, static_cast<double>(d.flush_ns_total) * 1e-9);
  e.Sample("kvrdma_disk_flush_seconds_count", {}, d.flushes);
  Gauge(e, "kvrdma_recovery_seconds", "Wall time of the recovery at start (rebuilding the index from the files)",
        static_cast<double>(st.recovery_ms) * 1e-3);
  Gauge(e, "kvrdma_recovery_writes", "Valid writes read from the segment files at start",
        static_cast<double>(st.recovered_writes));
  Gauge(e, "kvrdma_recovery_keys", "Keys with a value after the recovery at start",
        static_cast<double>(st.recovered_keys));
  Gauge(e, "kvrdma_recovery_bytes", "Bytes of valid writes read at start", static_cast<double>(st.recovered_bytes));
  // Where the recovery's time went (DurableLog::LoadTimes): the reading
  // thread reads the files while the starting thread installs the ones
  // already read; either walks a file (check), so the phases overlap.
  const DurableLog::LoadTimes& t = st.recovery_times;
  e.Family("kvrdma_recovery_phase_seconds", "gauge",
           "Wall time of each phase of the recovery at start: read (the reading thread reading the files), check "
           "(walking them and checking every entry, on either thread), install (into the index), wait (the installing "
           "thread waiting for reads); the threads' phases overlap");
  e.Sample("kvrdma_recovery_phase_seconds", {{"phase", "read"}}, static_cast<double>(t.read_ns) * 1e-9);
  e.Sample("kvrdma_recovery_phase_seconds", {{"phase", "check"}}, static_cast<double>(t.check_ns) * 1e-9);
  e.Sample("kvrdma_recovery_phase_seconds", {{"phase", "install"}}, static_cast<double>(t.install_ns) * 1e-9);
  e.Sample("kvrdma_recovery_phase_seconds", {{"phase", "wait"}}, static_cast<double>(t.wait_ns) * 1e-9);
  e.Family("kvrdma_recovery_cpu_seconds", "gauge",
           "CPU time (user and system) of the recovery's threads at start: reader (reading the files, and checking them "
           "when it is ahead) and installer (installing them, and checking the ones the reader did not)");
  e.Sample("kvrdma_recovery_cpu_seconds", {{"thread", "reader"}}, static_cast<double>(t.reader_cpu_ns) * 1e-9);
  e.Sample("kvrdma_recovery_cpu_seconds", {{"thread", "installer"}}, static_cast<double>(t.install_cpu_ns) * 1e-9);
}

// The lock table: clients take and release locks with RDMA atomics the
// server does not see, so takeovers are not counted; what the table shows
// now is (held, expired-but-not-released = what a takeover would claim).
void RenderLocks(Exposition& e, const LockView& l) {
  const uint64_t now = l.clock->NowMs();
  uint64_t held = 0, expired = 0;
  for (uint32_t i = 1; i <= l.lock_words; ++i) {
    const uint64_t w = __atomic_load_n(&l.words[i], __ATOMIC_RELAXED);
    if (w == 0) continue;
    if (LockExpiry(w) > now) {
      ++held;
    } else {
      ++expired;
    }
  }
  Gauge(e, "kvrdma_lock_words", "Lock words in the lock table", l.lock_words);
  e.Family("kvrdma_locks", "gauge",
           "Lock words by state: held (lease running) or expired (lease ended, not released: a client "
           "died or is late; another client may take it over). Takeovers themselves are RDMA atomics "
           "the server does not observe");
  e.Sample("kvrdma_locks", {{"state", "held"}}, held);
  e.Sample("kvrdma_locks", {{"state", "expired"}}, expired);
}

}  // namespace

std::string SnakeCase(std::string_view camel) {
  auto upper = [&](size_t i) { return i < camel.size() && std::isupper(static_cast<unsigned char>(camel[i])); };
  auto lower = [&](size_t i) { return i < camel.size() && std::islower(static_cast<unsigned char>(camel[i])); };
  std::string out;
  for (size_t i = 0; i < camel.size(); ++i) {
    // A word starts at an upper-case letter after a lower-case one, or at
    // the last upper-case letter of a run followed by lower case ("IOError").
    if (i > 0 && upper(i) && (lower(i - 1) || (upper(i - 1) && lower(i + 1)))) out += '_';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(camel[i])));
  }
  return out;
}

std::string RenderMetrics(const MetricsSources& s) {
  Exposition e;
  e.Family("kvrdma_build_info", "gauge", "Always 1; the version label is kvserver's version");
  e.Sample("kvrdma_build_info", {{"version", KVRDMA_VERSION_STRING}}, uint64_t{1});
  RenderRequests(e, s);
  RenderConnections(e, s);
  if (s.store != nullptr) RenderStore(e, *s.store);
  if (s.locks.words != nullptr) RenderLocks(e, s.locks);
  return e.Take();
}

}  // namespace kvrdma::server::metrics
