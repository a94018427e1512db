#include "server/store/durable_log.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/format/entry.h"
#include "common/format/hash.h"
#include "common/log.h"
#include "common/memory/racy_copy.h"
#include "server/store/entry_leader.h"
#include "server/store/segment_file.h"

namespace kvrdma {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// This thread's CPU time (user and system): what a phase cost, whatever
// else the machine was running.
uint64_t ThreadCpuNs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_nsec);
}

std::string At(const std::string& path, uint64_t file_off) {
  char b[40];
  std::snprintf(b, sizeof(b), " at file offset %" PRIu64, file_off);
  return path + b;
}

// Whether [p, p + n) is all zeros.
// Eight bytes at a time (a segment's unwritten tail can be most of it).
bool AllZero(const std::byte* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    if (v != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != std::byte{0}) return false;
  }
  return true;
}

uint64_t Load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

Result<DataDirMeta> ReadMeta(FileSystem& fs, const std::string& path) {
  auto f = fs.Open(path, OpenMode::kReadOnly);
  if (!f.ok()) return f.status();
  std::byte buf[kMetaBytes];
  size_t got = 0;
  KVRDMA_RETURN_IF_ERROR((*f)->ReadAt(0, buf, &got));
  return DecodeMeta({buf, got}, path);
}

}  // namespace

const char* FsyncModeName(FsyncMode m) noexcept {
  switch (m) {
    case FsyncMode::kAlways: return "always";
    case FsyncMode::kEverySec: return "everysec";
    case FsyncMode::kNo: return "no";
  }
  return "?";
}

DurableLog::DurableLog(const DurableLogConfig& cfg)
    : cfg_(cfg), heads_(new Head[cfg.heads]), slots_(new SlotFile[cfg.segment_count]) {}

Result<std::unique_ptr<DurableLog>> DurableLog::Open(const DurableLogConfig& cfg, uint64_t* hash_seed) {
  FileSystem& fs = *cfg.fs;
  KVRDMA_RETURN_IF_ERROR(fs.CreateDir(cfg.dir));
  std::unique_ptr<DurableLog> d(new DurableLog(cfg));
  const std::string meta_path = cfg.dir + "/" + kMetaFileName;
  if (fs.Exists(meta_path)) {
    auto meta = ReadMeta(fs, meta_path);
    if (!meta.ok()) return meta.status();
    if (meta->segment_bytes != cfg.segment_bytes) {
      return Status::InvalidArgument(cfg.dir + " holds segments of " + std::to_string(meta->segment_bytes) +
                                     " bytes; this kvserver is configured for " +
                                     std::to_string(cfg.segment_bytes) + " (--segment-bytes must match the data dir)");
    }
    d->data_dir_id_ = meta->data_dir_id;
    *hash_seed = meta->hash_seed;
    d->hash_seed_ = meta->hash_seed;
  } else {
    // A new data dir: refuse one that holds anything else (a typo must not
    // scatter segment files over someone's directory).
    auto names = fs.List(cfg.dir);
    if (!names.ok()) return names.status();
    const bool only_lock = names->size() == 1 && (*names)[0] == kLockFileName;
    if (!names->empty() && !only_lock) {
      return Status::InvalidArgument(cfg.dir + " is not empty and has no " + kMetaFileName +
                                     ": not a kvrdma data dir (use an empty or new directory)");
    }
    std::random_device rd;
    d->data_dir_id_ = (uint64_t{rd()} << 32 | rd()) | 1;
    d->hash_seed_ = *hash_seed;
    std::byte buf[kMetaBytes];
    EncodeMeta({d->data_dir_id_, *hash_seed, cfg.segment_bytes}, std::span<std::byte, kMetaBytes>(buf));
    // Written under a temporary name, flushed, then renamed: a crash leaves
    // either no meta file or a whole one.
    const std::string tmp = meta_path + ".tmp";
    {
      auto f = fs.Open(tmp, OpenMode::kCreate);
      if (!f.ok()) return f.status();
      KVRDMA_RETURN_IF_ERROR((*f)->WriteAt(0, buf));
      KVRDMA_RETURN_IF_ERROR((*f)->Sync());
    }
    KVRDMA_RETURN_IF_ERROR(fs.Rename(tmp, meta_path));
    KVRDMA_RETURN_IF_ERROR(fs.SyncDir(cfg.dir));
  }
  // A spare left by a run that stopped: never more than zeros, perhaps not
  // whole. Removed before recovery lists the dir.
  const std::string spare = cfg.dir + "/" + kSpareFileName;
  if (fs.Exists(spare)) KVRDMA_RETURN_IF_ERROR(fs.Remove(spare));
  d->flusher_ = std::thread([p = d.get()] { p->FlusherLoop(); });
  if (cfg.fsync == FsyncMode::kAlways) d->spare_maker_ = std::thread([p = d.get()] { p->SpareLoop(); });
  return d;
}

DurableLog::~DurableLog() {
  if (spare_maker_.joinable()) {
    {
      std::lock_guard<std::mutex> l(spare_mu_);
      spare_stop_ = true;
    }
    spare_cv_.notify_all();
    spare_maker_.join();
    const std::string spare = cfg_.dir + "/" + kSpareFileName;
    if (cfg_.fs->Exists(spare)) (void)cfg_.fs->Remove(spare);  // best effort: the next start removes it too
  }
  if (cfg_.fsync != FsyncMode::kNo && flusher_.joinable()) {
    if (Status st = WaitForFlush(); !st.ok()) {
      KVRDMA_LOG_ERROR("durable log: last flush failed: %s", st.ToString().c_str());
    }
  }
  {
    std::lock_guard<std::mutex> l(flush_mu_);
    stop_ = true;
  }
  flush_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
}

std::string DurableLog::PathOf(uint64_t open_seq) const { return cfg_.dir + "/" + SegmentFileName(open_seq); }

std::shared_ptr<File> DurableLog::FileOf(uint32_t slot, uint64_t* open_seq) const {
  std::lock_guard<std::mutex> l(slots_mu_);
  if (open_seq != nullptr) *open_seq = slots_[slot].open_seq;
  return slots_[slot].file;
}

namespace {

// Walks a segment's writes (leader + entry, back to back) in `mem`, laid out
// for log offset `base`: calls write(entry_off, version) for each valid
// write with a version. Returns the bytes of valid writes; a torn tail
// (nothing but zeros after the write that fails) is cut (zeroed) and
// reported; so is a write that fails at or after the file's synced bound
// (segment_file.h; kSyncedBoundUnknown: none) with data after it, the tail a
// power cut left unsynced; anything else is damage: reported, and
// Corruption.
template <typename WriteFn>
Result<uint64_t> WalkSegment(std::byte* mem, uint64_t seg_bytes, uint64_t base, uint64_t hash_seed,
                             uint64_t synced_bound, const std::string& path, const WriteFn& write,
                             const DurableLog::Report& report) {
  uint64_t pos = 0;
  const char* bad = nullptr;
  uint64_t claimed = 0;  // bytes the write that failed claims (for the tail test)
  while (pos + kLeaderBytes + kEntryHeaderBytes <= seg_bytes) {
    const uint64_t leader = Load64(mem + pos);
    // The end of what was written: zeros to the end of the segment.
    if (leader == 0 && AllZero(mem + pos, seg_bytes - pos)) break;
    const uint64_t entry = pos + kLeaderBytes;
    uint32_t lengths;
    std::memcpy(&lengths, mem + entry + LengthsAt(base + entry), 4);
    claimed = kLeaderBytes + LengthsEntryBytes(lengths);
    if (LengthsKey(lengths) == 0 || (LengthsTombstone(lengths) && LengthsValue(lengths) != 0) ||
        pos + claimed > seg_bytes) {
      bad = LeaderValid(leader) ? "an entry header with impossible lengths" : "a leader that does not check";
      break;
    }
    const uint64_t guard = Load64(mem + entry + GuardAt(base + entry));
    const size_t kv = LengthsKey(lengths) + LengthsValue(lengths);
    if ((guard & kGuardChecksumMask) != EntryChecksum(lengths, mem + entry + kEntryKeyOffset, kv, hash_seed)) {
      bad = LeaderValid(leader) ? "an entry whose checksum does not match its bytes" : "a leader that does not check";
      break;
    }
    if (!LeaderValid(leader)) {
      // A whole entry behind a leader that does not check (zero included):
      // a mark (written over the leader of a superseded write, never over a
      // newest one) that a crash tore, or a damaged leader. The write is
      // taken as superseded, which a torn mark says it is.
      report(At(path, kSegmentHeaderBytes + pos) +
                 ": a leader that does not check before a valid entry (a mark torn by a crash, or damage); "
                 "the write is taken as superseded",
             false);
    } else if (LeaderVersion(leader) != 0) {
      write(base + entry, LeaderVersion(leader), lengths);
    }
    pos += claimed;
  }
  if (bad == nullptr) return pos;
  // A torn tail: nothing but zeros after the write that failed (what a crash
  // leaves in a file allocated whole). Anything else is damage.
  const uint64_t after = std::min<uint64_t>(seg_bytes, pos + std::max<uint64_t>(claimed, kLeaderBytes));
  if (AllZero(mem + after, seg_bytes - after)) {
    report(At(path, kSegmentHeaderBytes + pos) + ": " + bad + "; a torn tail (the write a crash interrupted), cut",
           false);
    std::memset(mem + pos, 0, seg_bytes - pos);
    return pos;
  }
  // Data follows. A sync covers whole writes, and every write before the
  // last sync that returned; the bytes it covered come back intact after a
  // power cut, and the synced bound is at most where they end. So a write
  // that fails at or after the bound may lie in the unsynced tail, which a
  // power cut can bring back in any order (a hole, then data): never
  // answered under --fsync always, cut. Before the bound it is damage.
  if (synced_bound != kSyncedBoundUnknown && pos >= synced_bound) {
    report(At(path, kSegmentHeaderBytes + pos) + " (in-segment offset " + std::to_string(pos) + "): " + bad +
               ", and data follows it, at or after the synced bound (in-segment offset " +
               std::to_string(synced_bound) + "): an unsynced tail a power cut left with a hole, cut",
           false);
    std::memset(mem + pos, 0, seg_bytes - pos);
    return pos;
  }
  const std::string what = At(path, kSegmentHeaderBytes + pos) + ": " + bad +
                           ", and data follows it" +
                           (synced_bound == kSyncedBoundUnknown
                                ? std::string(" (damage, not a torn tail; the file records no synced bound)")
                                : " before the synced bound (in-segment offset " + std::to_string(synced_bound) +
                                      "): damage, not a torn tail");
  report(what, true);
  return Status::Corruption(what + "; run kvserver --verify");
}

}  // namespace

// Reads segment file `path` into `mem`: false (and reported) if it is a
// file whose creation a crash interrupted (no whole header and no data: it
// was never written to), Corruption if its header does not decode or is not
// this dir's.
Result<bool> DurableLog::ReadSegmentFile(FileSystem& fs, const std::string& path, uint64_t seq, uint64_t dir_id,
                                         uint64_t seg_bytes, std::byte* mem, uint64_t* synced_bound,
                                         const Report& report) {
  *synced_bound = kSyncedBoundUnknown;
  auto f = fs.Open(path, OpenMode::kReadOnly);
  if (!f.ok()) return f.status();
  std::byte hdr[kSyncedBoundOffsets[1] + kSyncedBoundBytes];  // the header and both synced bound records
  size_t got = 0;
  KVRDMA_RETURN_IF_ERROR((*f)->ReadAt(0, hdr, &got));
  auto h = DecodeSegmentHeader({hdr, got}, path);
  size_t data = 0;
  KVRDMA_RETURN_IF_ERROR((*f)->ReadAt(kSegmentHeaderBytes, {mem, seg_bytes}, &data));
  if (data < seg_bytes) std::memset(mem + data, 0, seg_bytes - data);  // never written
  if (!h.ok()) {
    if (AllZero(mem, seg_bytes)) {
      report(path + ": a segment file without data or a whole header (its creation was interrupted)", false);
      return false;
    }
    return h.status();
  }
  if (h->data_dir_id != dir_id) {
    return Status::Corruption(path + ": belongs to another data dir (id " + std::to_string(h->data_dir_id) +
                              ", this dir's is " + std::to_string(dir_id) + ")");
  }
  if (h->open_seq != seq || h->segment_bytes != seg_bytes) {
    return Status::Corruption(path + ": header says open seq " + std::to_string(h->open_seq) + " and " +
                              std::to_string(h->segment_bytes) + "-byte segments; expected " + std::to_string(seq) +
                              " and " + std::to_string(seg_bytes));
  }
  *synced_bound = DecodeSyncedBound({hdr, got}, seq, seg_bytes);
  return true;
}

Result<std::vector<uint64_t>> DurableLog::ListSegments(FileSystem& fs, const std::string& dir, const Report& report) {
  auto names = fs.List(dir);
  if (!names.ok()) return names.status();
  std::vector<uint64_t> seqs;
  for (const std::string& n : *names) {
    uint64_t seq;
    if (ParseSegmentFileName(n, &seq)) {
      seqs.push_back(seq);
    } else if (n != kMetaFileName && n != kLockFileName && n != kSpareFileName) {
      report(dir + "/" + n + ": not a kvrdma file; ignored", false);
    }
  }
  std::sort(seqs.begin(), seqs.end());
  return seqs;
}

Result<std::vector<DurableLog::Segment>> DurableLog::Load(const InstallVisitor& install, const Report& report,
                                                         LoadTimes* times) {
  auto seqs = ListSegments(*cfg_.fs, cfg_.dir, report);
  if (!seqs.ok()) return seqs.status();
  const uint64_t seg_bytes = cfg_.segment_bytes;

  // One file as the reading thread leaves it for the calling thread.
  struct ReadFile {
    Status status;       // not OK: the load fails with it
    uint64_t seq = 0;
    uint32_t slot = 0;
    bool whole = true;   // false: a file whose creation a crash interrupted (removed)
    bool walked = false; // its entries checked and its writes listed (by either thread)
    uint64_t synced_bound = kSyncedBoundUnknown;  // its header's (segment_file.h)
    uint64_t used = 0;   // walked: bytes of valid writes (the torn tail cut)
    std::vector<Write> writes;  // walked: its valid writes, in file order
    std::vector<std::pair<std::string, bool>> reports;  // ReadSegmentFile's, for `report`
  };
  std::mutex mu;
  std::condition_variable ready_cv, room_cv;
  std::vector<ReadFile> queue;  // files read, not yet taken (at most kLoadAhead)
  bool reader_done = false, stop = false;
  std::atomic<uint64_t> read_ns{0}, check_ns{0}, reader_cpu_ns{0};

  // Walks a file read: checks every entry and hashes each write's key while
  // its bytes are in the cache. On either thread (below).
  auto walk = [&](ReadFile& c, const Report& rep) {
    const uint64_t t0 = NowNs();
    const uint64_t base = uint64_t{c.slot} * seg_bytes;
    c.writes.clear();
    auto used = WalkSegment(
        cfg_.log_base + base, seg_bytes, base, hash_seed_, c.synced_bound, PathOf(c.seq),
        [&](uint64_t off, uint64_t version, uint32_t lengths) {
          const std::string_view key(reinterpret_cast<const char*>(cfg_.log_base + off + kEntryKeyOffset),
                                     LengthsKey(lengths));
          c.writes.push_back(Write{off, version, HashKeyBytes(key, hash_seed_)});
        },
        rep);
    check_ns.fetch_add(NowNs() - t0, std::memory_order_relaxed);
    c.walked = true;
    if (used.ok()) {
      c.used = *used;
    } else {
      c.status = used.status();
    }
  };

  // The reading thread: reads each file into its slot of the log (the disk
  // reads the next files meanwhile: posix_fadvise WILLNEED) and checks its
  // header, while the calling thread installs the files before it. It walks
  // the file too when the calling thread has files enough to go on with
  // (the reads are ahead: small values, where installing is the bound);
  // otherwise the calling thread walks it (large values: it would wait).
  std::thread reader([&] {
    pthread_setname_np(pthread_self(), "kv-recovery");

    constexpr size_t kReadAhead = 4;  // files the disk reads ahead
    std::vector<std::unique_ptr<File>> ahead;
    auto prefetch = [&](size_t i) {
      if (i >= seqs->size()) return;
      auto f = cfg_.fs->Open(PathOf((*seqs)[i]), OpenMode::kReadOnly);
      if (!f.ok()) return;  // reported when it is read
      (*f)->Prefetch();
      ahead.push_back(std::move(f).value());
    };
    for (size_t i = 0; i < kReadAhead; ++i) prefetch(i);
    uint32_t slot = 0;
    for (size_t i = 0; i < seqs->size(); ++i) {
      prefetch(kReadAhead + i);
      if (ahead.size() > 2 * kReadAhead) ahead.erase(ahead.begin());
      ReadFile c;
      c.seq = (*seqs)[i];
      c.slot = slot;
      const Report keep = [&c](const std::string& m, bool damage) { c.reports.emplace_back(m, damage); };
      const std::string path = PathOf(c.seq);
      if (slot == cfg_.segment_count) {
        c.status = Status::InvalidArgument(cfg_.dir + " holds more segments than the log's " +
                                           std::to_string(cfg_.segment_count) + " (raise --log-mb)");
      } else {
        std::byte* mem = cfg_.log_base + uint64_t{slot} * seg_bytes;
        const uint64_t t0 = NowNs();
        auto whole = ReadSegmentFile(*cfg_.fs, path, c.seq, data_dir_id_, seg_bytes, mem, &c.synced_bound, keep);
        const uint64_t t1 = NowNs();
        read_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
        if (!whole.ok()) {
          c.status = whole.status();
        } else if (!*whole) {
          c.whole = false;
        } else {
          ++slot;
          bool ahead;
          {
            std::lock_guard<std::mutex> l(mu);
            ahead = queue.size() >= kLoadAhead / 2;
          }
          if (ahead) walk(c, keep);
        }
      }
      const bool failed = !c.status.ok();
      std::unique_lock<std::mutex> l(mu);
      room_cv.wait(l, [&] { return stop || queue.size() < kLoadAhead; });
      if (stop) return;
      reader_cpu_ns.store(ThreadCpuNs(), std::memory_order_relaxed);
      queue.push_back(std::move(c));
      ready_cv.notify_one();
      if (failed) break;  // nothing after a file that fails is read
    }
    std::lock_guard<std::mutex> l(mu);
    reader_done = true;
    ready_cv.notify_one();
  });
  // Whatever way this returns, the reading thread is told to stop and joined.
  struct Join {
    std::thread& t;
    std::mutex& mu;
    bool& stop;
    std::condition_variable& cv;
    ~Join() {
      {
        std::lock_guard<std::mutex> l(mu);
        stop = true;
      }
      cv.notify_all();
      t.join();
    }
  } join{reader, mu, stop, room_cv};

  std::vector<Segment> out;
  uint64_t install_ns = 0, install_cpu_ns = 0, wait_ns = 0;
  auto finish = [&] {
    if (times == nullptr) return;
    times->read_ns = read_ns.load(std::memory_order_relaxed);
    times->check_ns = check_ns.load(std::memory_order_relaxed);
    times->reader_cpu_ns = reader_cpu_ns.load(std::memory_order_relaxed);
    times->install_ns = install_ns;
    times->install_cpu_ns = install_cpu_ns;
    times->wait_ns = wait_ns;
  };
  for (;;) {
    ReadFile c;
    {
      const uint64_t t0 = NowNs();
      std::unique_lock<std::mutex> l(mu);
      ready_cv.wait(l, [&] { return !queue.empty() || reader_done; });
      wait_ns += NowNs() - t0;
      if (queue.empty()) break;
      c = std::move(queue.front());
      queue.erase(queue.begin());
      room_cv.notify_one();
    }
    for (const auto& [m, damage] : c.reports) report(m, damage);
    if (!c.status.ok()) {
      finish();
      return c.status;
    }
    const std::string path = PathOf(c.seq);
    if (!c.whole) {
      KVRDMA_RETURN_IF_ERROR(cfg_.fs->Remove(path));
      continue;
    }
    const uint64_t c0 = ThreadCpuNs();
    if (!c.walked) walk(c, report);
    if (!c.status.ok()) {
      finish();
      return c.status;
    }
    const uint64_t t1 = NowNs();
    install(c.slot, c.writes);
    install_ns += NowNs() - t1;
    install_cpu_ns += ThreadCpuNs() - c0;
    auto f = cfg_.fs->Open(path, OpenMode::kReadWrite);  // for its marks
    if (!f.ok()) return f.status();
    {
      std::lock_guard<std::mutex> l(slots_mu_);
      slots_[c.slot].file = std::move(f).value();
      slots_[c.slot].open_seq = c.seq;
      slots_[c.slot].persisted.store(seg_bytes, std::memory_order_release);  // all of it is in the file
      // No synced bound records: nothing more is written to it but marks,
      // and a bound past a cut tail (still in the file) would make the
      // next recovery call that tail damage.
      std::lock_guard<std::mutex> b(slots_[c.slot].bound_mu);
      slots_[c.slot].bound_seq = 0;
    }
    segments_on_disk_.fetch_add(1, std::memory_order_relaxed);
    out.push_back(Segment{c.slot, c.seq, c.used});
  }
  finish();
  return out;
}

Result<DurableLog::VerifySummary> DurableLog::Verify(FileSystem& fs, const std::string& dir, const Report& report) {
  VerifySummary sum;
  const std::string meta_path = dir + "/" + kMetaFileName;
  if (!fs.Exists(meta_path)) return Status::InvalidArgument(dir + " is not a kvrdma data dir: it has no " + kMetaFileName);
  auto meta = ReadMeta(fs, meta_path);
  if (!meta.ok()) return meta.status();
  sum.segment_bytes = meta->segment_bytes;
  auto seqs = ListSegments(fs, dir, report);
  if (!seqs.ok()) return seqs.status();
  std::vector<std::byte> mem(meta->segment_bytes);
  for (const uint64_t seq : *seqs) {
    const std::string path = dir + "/" + SegmentFileName(seq);
    ++sum.files;
    uint64_t synced_bound;
    auto whole =
        ReadSegmentFile(fs, path, seq, meta->data_dir_id, meta->segment_bytes, mem.data(), &synced_bound, report);
    if (!whole.ok()) {
      report(whole.status().message(), true);
      ++sum.damaged;
      continue;
    }
    if (!*whole) continue;
    auto used = WalkSegment(mem.data(), meta->segment_bytes, 0, meta->hash_seed, synced_bound, path,
                            [&](uint64_t, uint64_t, uint32_t) { ++sum.writes; }, report);
    if (!used.ok()) {
      ++sum.damaged;
      continue;
    }
    sum.bytes += *used;
  }
  return sum;
}

Status DurableLog::OpenSegment(uint32_t slot, uint64_t open_seq) {
  const std::string path = PathOf(open_seq);
  // The header and, unless kNo (which never syncs), the first synced bound
  // record (bound 0) in slot 0: one write.
  std::byte hdr[kSegmentFirstWriteBytes] = {};
  EncodeSegmentHeader({data_dir_id_, open_seq, cfg_.segment_bytes},
                      std::span<std::byte, kSegmentHeaderUsedBytes>(hdr, kSegmentHeaderUsedBytes));
  const bool bounds = cfg_.fsync != FsyncMode::kNo;
  if (bounds) {
    EncodeSyncedBound(open_seq, 0,
                      std::span<std::byte, kSyncedBoundBytes>(hdr + kSyncedBoundOffsets[0], kSyncedBoundBytes));
  }
  const std::span<const std::byte> first(hdr, bounds ? kSegmentFirstWriteBytes : kSegmentHeaderUsedBytes);
  Result<std::unique_ptr<File>> f = TakeSpare(path);
  Status st;
  if (*f == nullptr) {
    f = cfg_.fs->Open(path, OpenMode::kCreate);
    if (!f.ok()) {
      io_errors_.fetch_add(1, std::memory_order_relaxed);
      return f.status();
    }
    st = (*f)->Allocate(kSegmentHeaderBytes + cfg_.segment_bytes);
    // kAlways without a spare ready (the first segment of each head, or
    // segments that fill faster than the spare is made): written whole here,
    // once, so that its commits' syncs do not convert unwritten extents; the
    // header goes in before that sync.
    if (st.ok() && cfg_.fsync == FsyncMode::kAlways) {
      st = WriteZeros(**f, first);
    } else if (st.ok()) {
      st = (*f)->WriteAt(0, first);
    }
  } else {
    // kAlways, the spare: its header synced before any write in it. A power
    // cut may persist a file's unsynced writes in any order: a commit's data
    // without the header (written just before it, synced with it) would
    // leave a file recovery cannot read, and a synced bound record needs the
    // header's first record (bound 0) durable. One sync per segment opened.
    st = (*f)->WriteAt(0, first);
    if (st.ok()) st = (*f)->Sync();
  }
  // The name must survive a power cut before any write in the file is
  // acknowledged as durable (kAlways), or flushed (kEverySec).
  if (st.ok() && cfg_.fsync != FsyncMode::kNo) st = cfg_.fs->SyncDir(cfg_.dir);
  if (!st.ok()) {
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    f->reset();
    (void)cfg_.fs->Remove(path);  // best effort: an empty file left behind is recovered as empty
    return st;
  }
  {
    std::lock_guard<std::mutex> l(slots_mu_);
    SlotFile& sf = slots_[slot];
    sf.file = std::move(f).value();
    // persisted belongs to the new seq before a reader can see that seq
    // (Written reads both without the lock); the slot's old file is gone.
    sf.open_seq.store(0, std::memory_order_release);
    sf.persisted.store(0, std::memory_order_release);
    sf.dirty.store(true, std::memory_order_relaxed);  // the header
    sf.open_seq.store(open_seq, std::memory_order_release);
    std::lock_guard<std::mutex> b(sf.bound_mu);
    sf.bound_seq = bounds ? open_seq : 0;
    sf.bound = 0;
    sf.bound_records = 1;  // the header's, in slot 0
    sf.bound_durable = cfg_.fsync == FsyncMode::kAlways ? 1 : 0;  // kAlways synced it above
  }
  {
    // Marks queued for the slot's previous file after it went (their
    // PlaceOf ran before its RemoveSegment) have nothing left to mark.
    std::lock_guard<std::mutex> l(slots_[slot].marks_mu);
    slots_[slot].marks.clear();
  }
  segments_on_disk_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

std::unique_ptr<File> DurableLog::TakeSpare(const std::string& path) {
  if (cfg_.fsync != FsyncMode::kAlways) return nullptr;
  {
    std::lock_guard<std::mutex> l(spare_mu_);
    if (!spare_wanted_) {
      spare_wanted_ = true;  // from now on the disk is the log's: make the first spare
      spare_cv_.notify_all();
    }
    if (spare_state_ != SpareState::kReady) return nullptr;
    spare_state_ = SpareState::kTaking;
  }
  const std::string spare = cfg_.dir + "/" + kSpareFileName;
  Status st = cfg_.fs->Rename(spare, path);
  Result<std::unique_ptr<File>> f = st.ok() ? cfg_.fs->Open(path, OpenMode::kReadWrite) : Result<std::unique_ptr<File>>(st);
  if (!f.ok()) {
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    KVRDMA_LOG_WARN("durable log: taking the spare file for %s: %s (the file is allocated instead)", path.c_str(),
                    f.status().ToString().c_str());
    (void)cfg_.fs->Remove(st.ok() ? path : spare);  // best effort: so that neither name is in the way
  } else {
    segments_from_spares_.fetch_add(1, std::memory_order_relaxed);
  }
  {
    std::lock_guard<std::mutex> l(spare_mu_);
    spare_state_ = SpareState::kNone;
  }
  spare_cv_.notify_all();
  return f.ok() ? std::move(f).value() : nullptr;
}

Status DurableLog::WriteZeros(File& f, std::span<const std::byte> first) {
  static const std::vector<std::byte> zeros(size_t{1} << 20);
  const uint64_t bytes = kSegmentHeaderBytes + cfg_.segment_bytes;
  for (uint64_t off = 0; off < bytes; off += zeros.size()) {
    KVRDMA_RETURN_IF_ERROR(f.WriteAt(off, {zeros.data(), std::min<uint64_t>(zeros.size(), bytes - off)}));
  }
  if (!first.empty()) KVRDMA_RETURN_IF_ERROR(f.WriteAt(0, first));
  return f.Sync();
}

void DurableLog::SpareLoop() {
  pthread_setname_np(pthread_self(), "kv-spare");
  const std::string path = cfg_.dir + "/" + kSpareFileName;
  const uint64_t bytes = kSegmentHeaderBytes + cfg_.segment_bytes;
  bool warned = false;
  std::unique_lock<std::mutex> l(spare_mu_);
  for (;;) {
    spare_cv_.wait(l, [&] { return spare_stop_ || (spare_wanted_ && spare_state_ == SpareState::kNone); });
    if (spare_stop_) return;
    spare_state_ = SpareState::kMaking;
    l.unlock();
    // Allocated first (a full disk fails here, as at a segment's open), then
    // every block written and synced: the segment's writes and syncs then
    // go to blocks the file system already wrote.
    auto f = cfg_.fs->Open(path, OpenMode::kCreate);
    Status st = f.status();
    if (st.ok()) st = (*f)->Allocate(bytes);
    if (st.ok()) st = WriteZeros(**f);
    if (f.ok()) f->reset();  // closed: a segment that takes the spare opens it under its own name
    if (!st.ok()) {
      if (f.ok()) (void)cfg_.fs->Remove(path);
      if (!warned) {
        KVRDMA_LOG_WARN("durable log: making a spare segment file: %s (segments are allocated as they open; "
                        "tried again each second)", st.ToString().c_str());
        warned = true;
      }
    }
    l.lock();
    if (st.ok()) {
      warned = false;
      spare_state_ = SpareState::kReady;
    } else {
      spare_state_ = SpareState::kNone;
      spare_cv_.wait_for(l, std::chrono::seconds(1), [&] { return spare_stop_; });
    }
  }
}

void DurableLog::HeadMoved(uint32_t head, int64_t old_slot, uint64_t old_used, uint32_t new_slot) {
  Head& h = heads_[head];
  if (old_slot >= 0 && h.slot == old_slot && old_used > h.persisted) {
    h.sealed.push_back(Range{static_cast<uint32_t>(old_slot), h.open_seq, h.persisted, old_used});
  }
  h.slot = new_slot;
  h.persisted = 0;
  std::lock_guard<std::mutex> l(slots_mu_);
  h.open_seq = slots_[new_slot].open_seq;
}

Status DurableLog::WriteRange(const Range& r) {
  uint64_t seq;
  std::shared_ptr<File> f = FileOf(r.slot, &seq);
  // The segment was compacted and its file removed before its head wrote
  // this tail (its live entries were copied, and the copies made durable,
  // first): nothing to write, and the slot's new file must not get it.
  if (!f || seq != r.open_seq) return Status::OK();
  const std::byte* mem = cfg_.log_base + uint64_t{r.slot} * cfg_.segment_bytes;
  std::span<const std::byte> bytes{mem + r.from, r.to - r.from};
#if defined(KVRDMA_TSAN)
  // The kernel copies these bytes while other threads may set the
  // not-current bit of an entry among them (Store::Supersede: an atomic
  // store; recovery ignores that bit). ThreadSanitizer sees pwrite read the
  // buffer plainly: copy it first the way a racing reader must (RacyCopy).
  thread_local std::vector<std::byte> copy;
  copy.resize(bytes.size());
  RacyCopy(copy.data(), bytes.data(), bytes.size());
  bytes = copy;
#endif
  // everysec and no answer once the bytes are in the kernel: copied into
  // the file's pages through a mapping, without a system call (a pwrite was
  // ~10 us of a 41 us PUT in the test bed's guest). always syncs next, and
  // its files are written whole with zeros (a fault on an evicted page would
  // read it back): a pwrite.
  Status st = cfg_.fsync == FsyncMode::kAlways ? f->WriteAt(kSegmentHeaderBytes + r.from, bytes)
                                               : f->WriteMapped(kSegmentHeaderBytes + r.from, bytes);
  if (!st.ok()) {
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    return st;
  }
  slots_[r.slot].dirty.store(true, std::memory_order_release);
  slots_[r.slot].persisted.store(r.to, std::memory_order_release);  // a head writes its ranges in order
  bytes_written_.fetch_add(r.to - r.from, std::memory_order_relaxed);
  return Status::OK();
}

Status DurableLog::Commit(uint32_t head, int64_t open_slot, uint64_t used) {
  Head& h = heads_[head];
  // Tails of segments the head left, oldest first; a range that fails stays
  // queued (the next Commit writes it again), and so does what follows it.
  size_t done = 0;
  Status st;
  for (; done < h.sealed.size() && st.ok(); ++done) {
    st = WriteRange(h.sealed[done]);
    if (st.ok() && cfg_.fsync == FsyncMode::kAlways) NoteUnsynced(h, h.sealed[done].slot, h.sealed[done].open_seq);
  }
  if (!st.ok()) --done;
  h.sealed.erase(h.sealed.begin(), h.sealed.begin() + static_cast<ptrdiff_t>(done));
  if (st.ok() && open_slot >= 0 && open_slot == h.slot && used > h.persisted) {
    st = WriteRange(Range{static_cast<uint32_t>(open_slot), h.open_seq, h.persisted, used});
    if (st.ok()) h.persisted = used;
  }
  if (!st.ok()) return st;
  if (cfg_.fsync != FsyncMode::kAlways) return Status::OK();
  st = SyncHeadFiles(h);
  if (st.ok()) commits_flushed_.fetch_add(1, std::memory_order_relaxed);
  return st;
}

void DurableLog::NoteUnsynced(Head& h, uint32_t slot, uint64_t open_seq) {
  for (const FileRef& r : h.unsynced) {
    if (r.slot == slot && r.open_seq == open_seq) return;
  }
  h.unsynced.push_back(FileRef{slot, open_seq});  // a few entries: its capacity stays
}

Status DurableLog::SyncHeadFiles(Head& h) {
  // The files of the ranges just written: the sealed segments' (noted as
  // they were written) and the open one's (synced even when this Commit
  // wrote nothing to it: a caller commits when it applied writes), and the
  // files of a Commit whose sync failed.
  if (h.slot >= 0) NoteUnsynced(h, static_cast<uint32_t>(h.slot), h.open_seq);
  const uint64_t t0 = NowNs();
  Status result;
  size_t kept = 0, synced = 0;
  for (const FileRef& r : h.unsynced) {
    uint64_t seq;
    std::shared_ptr<File> f = FileOf(r.slot, &seq);
    // A file removed meanwhile: its segment was compacted, and its live
    // entries' copies made durable first (Settle).
    if (!f || seq != r.open_seq) continue;
    ++synced;
    const SyncCover cover = BeforeSync(r.slot, r.open_seq);
    if (Status st = f->Sync(); !st.ok()) {
      io_errors_.fetch_add(1, std::memory_order_relaxed);
      if (result.ok()) result = st;
      h.unsynced[kept++] = r;
    } else {
      RecordSyncedBound(r.slot, *f, cover);
    }
  }
  h.unsynced.resize(kept);
  if (synced > 0) CountFlush(NowNs() - t0);  // a flush is a sync that ran, as in the flusher's rounds
  return result;
}

DurableLog::Place DurableLog::PlaceOf(uint64_t off, uint64_t end) const {
  Place p;
  p.slot = static_cast<uint32_t>(off / cfg_.segment_bytes);
  p.end = end - uint64_t{p.slot} * cfg_.segment_bytes;
  p.open_seq = slots_[p.slot].open_seq.load(std::memory_order_acquire);
  return p;
}

bool DurableLog::Gone(const Place& p) const {
  return slots_[p.slot].open_seq.load(std::memory_order_acquire) != p.open_seq;
}

bool DurableLog::Written(const Place& p) const {
  if (p.open_seq == 0) return true;
  const SlotFile& f = slots_[p.slot];
  // persisted first: if the seq is still p's afterwards, persisted was p's
  // file's (OpenSegment resets it only while the seq is 0).
  const uint64_t persisted = f.persisted.load(std::memory_order_acquire);
  return f.open_seq.load(std::memory_order_acquire) != p.open_seq || persisted >= p.end;
}

void DurableLog::QueueMark(uint64_t entry_off, uint64_t entry_bytes, uint64_t newer_off, uint64_t newer_end) {
  const uint64_t leader_off = entry_off - kLeaderBytes;
  Mark m;
  m.target = PlaceOf(leader_off, entry_off + entry_bytes);
  if (m.target.open_seq == 0) return;  // no file (recovery's superseded copies of a gone segment)
  m.in_segment = leader_off % cfg_.segment_bytes;
  if (newer_end != 0) m.newer = PlaceOf(newer_off, newer_end);
  SlotFile& sf = slots_[m.target.slot];
  // The seq is taken under the slot's lock: a Settle that reads
  // next_mark_seq_ after it finds the mark in the slot's list.
  std::lock_guard<std::mutex> l(sf.marks_mu);
  m.seq = next_mark_seq_.fetch_add(1, std::memory_order_acq_rel);
  sf.marks.push_back(m);
}

Status DurableLog::WaitForFlush() {
  std::unique_lock<std::mutex> l(flush_mu_);
  const uint64_t ticket = ++requested_;
  flush_cv_.notify_one();
  served_cv_.wait(l, [&] { return served_ >= ticket || stop_; });
  if (served_ < ticket) return Status::IOError("durable log: stopped before the flush");
  for (const auto& [from, to] : failed_) {
    if (ticket > from && ticket <= to) return failure_;
  }
  return Status::OK();
}

bool DurableLog::MarksWait(uint64_t upto, bool tombstones, uint32_t slot, uint64_t seg_seq) {
  auto waits = [&](const Mark& m) {
    if (m.seq >= upto) return false;
    if (tombstones) return !Gone(m.target);
    return m.target.open_seq == seg_seq && !Written(m.newer);
  };
  const uint32_t first = tombstones ? 0 : slot, last = tombstones ? cfg_.segment_count : slot + 1;
  for (uint32_t i = first; i < last; ++i) {
    std::lock_guard<std::mutex> l(slots_[i].marks_mu);
    for (const Mark& m : slots_[i].marks) {
      if (waits(m)) return true;
    }
  }
  // Marks a round took out to write (tombstones: they must be written; the
  // other case needs only what such marks already have: their newer writes
  // in their files). Checked after the lists: a round lowers it (under a
  // slot's lock) before it takes marks out of that slot, and raises it only
  // after it wrote them or put them back.
  return tombstones && marks_out_min_seq_.load(std::memory_order_acquire) < upto;
}

Status DurableLog::Settle(uint32_t slot, bool tombstones, std::chrono::milliseconds patience) {
  const auto give_up = Clock::now() + patience;
  const uint64_t upto = next_mark_seq_.load(std::memory_order_acquire);
  const uint64_t seg_seq = slots_[slot].open_seq.load(std::memory_order_acquire);
  if (tombstones) write_marks_.fetch_add(1, std::memory_order_acq_rel);
  struct Done {
    DurableLog* d;
    bool on;
    ~Done() {
      if (on) d->write_marks_.fetch_sub(1, std::memory_order_acq_rel);
    }
  } done{this, tombstones};
  // Each round flushes what is in the files (then, with tombstones, writes
  // the marks whose writes were in their files); a last round flushes what
  // the rounds before left in the files.
  for (;;) {
    KVRDMA_RETURN_IF_ERROR(WaitForFlush());
    if (!MarksWait(upto, tombstones, slot, seg_seq)) break;
    if (Clock::now() >= give_up) return Status::Retry("marks still wait for writes a head has not committed");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return WaitForFlush();
}

Status DurableLog::RemoveSegment(uint32_t slot) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(slots_mu_);
    if (!slots_[slot].file) return Status::OK();
    seq = slots_[slot].open_seq.load(std::memory_order_relaxed);
    slots_[slot].file.reset();  // closed once the flusher lets go of it too
    slots_[slot].open_seq.store(0, std::memory_order_release);
    slots_[slot].dirty.store(false, std::memory_order_relaxed);
    std::lock_guard<std::mutex> b(slots_[slot].bound_mu);
    slots_[slot].bound_seq = 0;  // its file takes no more records
  }
  {
    // The marks of the file's entries go with it, all at once.
    std::lock_guard<std::mutex> l(slots_[slot].marks_mu);
    std::vector<Mark>().swap(slots_[slot].marks);
  }
  Status st = cfg_.fs->Remove(PathOf(seq));
  if (st.ok()) segments_on_disk_.fetch_sub(1, std::memory_order_relaxed);
  if (st.ok() && cfg_.fsync != FsyncMode::kNo) st = cfg_.fs->SyncDir(cfg_.dir);
  if (!st.ok()) io_errors_.fetch_add(1, std::memory_order_relaxed);
  return st;
}

void DurableLog::FlusherLoop() {
  pthread_setname_np(pthread_self(), "kv-flusher");
  std::unique_lock<std::mutex> l(flush_mu_);
  for (;;) {
    // kEverySec: a round at least once a second while anything may be
    // unflushed; kAlways/kNo: when asked (kNo also writes queued marks each
    // second).
    flush_cv_.wait_for(l, std::chrono::seconds(1), [&] { return stop_ || requested_ > served_; });
    if (stop_) break;
    const uint64_t target = requested_;
    l.unlock();
    const Status st = FlushRound();
    l.lock();
    if (!st.ok()) {
      failed_.emplace_back(served_, target);
      if (failed_.size() > 64) failed_.erase(failed_.begin());
      failure_ = st;
    }
    served_ = target;
    served_cv_.notify_all();
  }
  served_cv_.notify_all();
}

Status DurableLog::FlushRound() {
  // The marks this round may write: their writes are in their files now, so
  // the flush below makes the newer writes durable before the marks go out.
  // Marks are looked at only while a Settle wants them written: otherwise
  // they wait in their slots, and go with their file.
  std::vector<Mark> ready;
  if (write_marks_.load(std::memory_order_acquire) > 0) {
    for (uint32_t i = 0; i < cfg_.segment_count; ++i) {
      SlotFile& sf = slots_[i];
      std::lock_guard<std::mutex> l(sf.marks_mu);
      // A mark whose segment's file is gone has nothing left to mark.
      std::erase_if(sf.marks, [&](const Mark& m) { return Gone(m.target); });
      auto keep = std::stable_partition(sf.marks.begin(), sf.marks.end(),
                                        [&](const Mark& m) { return !(Written(m.target) && Written(m.newer)); });
      if (keep == sf.marks.end()) continue;
      uint64_t min_seq = marks_out_min_seq_.load(std::memory_order_relaxed);
      for (auto it = keep; it != sf.marks.end(); ++it) min_seq = std::min(min_seq, it->seq);
      marks_out_min_seq_.store(min_seq, std::memory_order_release);  // before they leave the list
      ready.insert(ready.end(), keep, sf.marks.end());
      sf.marks.erase(keep, sf.marks.end());
    }
  }
  Status result;
  if (cfg_.fsync != FsyncMode::kNo) {
    const uint64_t t0 = NowNs();
    bool any = false;
    for (uint32_t s = 0; s < cfg_.segment_count; ++s) {
      if (!slots_[s].dirty.exchange(false, std::memory_order_acq_rel)) continue;
      uint64_t seq;
      std::shared_ptr<File> f = FileOf(s, &seq);
      if (!f) continue;  // removed meanwhile
      any = true;
      const SyncCover cover = BeforeSync(s, seq);
      if (Status st = f->Sync(); !st.ok()) {
        slots_[s].dirty.store(true, std::memory_order_relaxed);  // flushed again next round
        io_errors_.fetch_add(1, std::memory_order_relaxed);
        if (result.ok()) result = st;
      } else {
        RecordSyncedBound(s, *f, cover);
      }
    }
    if (any) CountFlush(NowNs() - t0);
  }
  std::vector<Mark> again;  // not written: for the next round
  if (!result.ok()) {
    again = std::move(ready);  // the writes they follow may not be durable
  } else {
    static const uint64_t kDead = PackLeader(0);
    for (const Mark& m : ready) {
      uint64_t seq;
      std::shared_ptr<File> f = FileOf(m.target.slot, &seq);
      if (!f || seq != m.target.open_seq) continue;  // the segment's file is gone: so is the entry
      std::byte b[kLeaderBytes];
      std::memcpy(b, &kDead, kLeaderBytes);
      if (Status st = f->WriteAt(kSegmentHeaderBytes + m.in_segment, b); !st.ok()) {
        io_errors_.fetch_add(1, std::memory_order_relaxed);
        if (result.ok()) result = st;
        again.push_back(m);
        continue;
      }
      slots_[m.target.slot].dirty.store(true, std::memory_order_release);
      marks_written_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  for (const Mark& m : again) {
    std::lock_guard<std::mutex> l(slots_[m.target.slot].marks_mu);
    slots_[m.target.slot].marks.push_back(m);
  }
  marks_out_min_seq_.store(UINT64_MAX, std::memory_order_release);  // after they were written or put back
  return result;
}

DurableLog::SyncCover DurableLog::BeforeSync(uint32_t slot, uint64_t open_seq) {
  SlotFile& sf = slots_[slot];
  std::lock_guard<std::mutex> l(sf.bound_mu);
  SyncCover c;
  if (sf.bound_seq == 0 || sf.bound_seq != open_seq) return c;  // the file takes no records
  c.open_seq = open_seq;
  c.records = sf.bound_records;
  // The bytes written to the file before the sync starts: it covers them.
  // Read under bound_mu with the file's seq still in bound_seq: the slot's
  // next file resets `persisted` and then takes bound_mu, and its writes
  // come after that.
  c.bound = sf.persisted.load(std::memory_order_acquire);
  return c;
}

void DurableLog::RecordSyncedBound(uint32_t slot, File& f, const SyncCover& c) {
  if (c.open_seq == 0) return;
  SlotFile& sf = slots_[slot];
  std::lock_guard<std::mutex> l(sf.bound_mu);
  if (sf.bound_seq != c.open_seq) return;  // removed meanwhile
  // The records written before the sync started are durable now.
  sf.bound_durable = std::max(sf.bound_durable, c.records);
  if (c.bound <= sf.bound) return;  // nothing new to say
  // A record overwrites the slot that does not hold the newest record, and
  // only once that newest one is durable: whatever a crash does to this
  // write, the other slot holds a durable record that checks. Otherwise the
  // next sync writes it (it covers the newest record).
  if (sf.bound_durable < sf.bound_records) return;
  std::byte rec[kSyncedBoundBytes];
  EncodeSyncedBound(c.open_seq, c.bound, rec);
  const uint64_t at = kSyncedBoundOffsets[sf.bound_records % 2];
  // kAlways: a pwrite (its files are written whole, and the next commit
  // syncs); else a store into the mapping, as the heads write.
  const Status st = cfg_.fsync == FsyncMode::kAlways ? f.WriteAt(at, rec) : f.WriteMapped(at, rec);
  if (!st.ok()) {
    // The slot may hold part of it: the next record goes to the same slot;
    // the other one still holds the newest durable record.
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ++sf.bound_records;
  sf.bound = c.bound;
  sf.dirty.store(true, std::memory_order_release);  // made durable by the next sync (a round's, or the head's)
}

void DurableLog::CountFlush(uint64_t ns) {
  flushes_.fetch_add(1, std::memory_order_relaxed);
  flush_ns_total_.fetch_add(ns, std::memory_order_relaxed);
  uint64_t max = flush_ns_max_.load(std::memory_order_relaxed);
  while (ns > max && !flush_ns_max_.compare_exchange_weak(max, ns, std::memory_order_relaxed)) {
  }
  for (size_t i = 0; i < DurableStats::kFlushBuckets; ++i) {
    if (ns <= DurableStats::kFlushBucketsNs[i]) {
      flush_buckets_[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
}

DurableStats DurableLog::Stats() const {
  DurableStats s;
  s.flushes = flushes_.load(std::memory_order_relaxed);
  s.flush_ns_total = flush_ns_total_.load(std::memory_order_relaxed);
  s.flush_ns_max = flush_ns_max_.load(std::memory_order_relaxed);
  s.commits_flushed = commits_flushed_.load(std::memory_order_relaxed);
  s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  s.marks_written = marks_written_.load(std::memory_order_relaxed);
  s.segments_on_disk = segments_on_disk_.load(std::memory_order_relaxed);
  s.io_errors = io_errors_.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> l(spare_mu_);
    s.spares_on_disk = spare_state_ == SpareState::kReady ? 1 : 0;
  }
  s.segments_from_spares = segments_from_spares_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < DurableStats::kFlushBuckets; ++i) {
    s.flush_buckets[i] = flush_buckets_[i].load(std::memory_order_relaxed);
  }
  return s;
}

}  // namespace kvrdma
