// PosixFileSystem on a temporary directory, and FaultFileSystem's model of the
// durability contract (server/store/file_system.h): what survives a power cut
// or a process crash, crash steps, torn writes, injected errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/store/file_system.h"
#include "tests/store/fault_file_system.h"

namespace kvrdma::test {
namespace {

std::span<const std::byte> B(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

uint64_t SizeOf(File& f) {
  Result<uint64_t> size = f.Size();
  EXPECT_TRUE(size.ok()) << size.status().ToString();
  return size.ok() ? size.value() : ~uint64_t{0};
}

// The whole of `f` (its Size() bytes), as a string.
std::string ReadAll(File& f) {
  Result<uint64_t> size = f.Size();
  EXPECT_TRUE(size.ok()) << size.status().ToString();
  if (!size.ok()) return "<error>";
  std::string s(*size, '\0');
  size_t got = 0;
  Status st = f.ReadAt(0, std::as_writable_bytes(std::span(s.data(), s.size())), &got);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, s.size());
  return s;
}

std::string ReadFile(FileSystem& fs, const std::string& path) {
  auto f = fs.Open(path, OpenMode::kReadOnly);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? ReadAll(**f) : "<missing>";
}

std::unique_ptr<File> MustOpen(FileSystem& fs, const std::string& path, OpenMode mode) {
  auto f = fs.Open(path, mode);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::move(f).value() : nullptr;
}

void MustWrite(File& f, uint64_t offset, std::string_view s) {
  Status st = f.WriteAt(offset, B(s));
  ASSERT_TRUE(st.ok()) << st.ToString();
}

std::vector<std::string> MustList(FileSystem& fs, const std::string& dir) {
  auto names = fs.List(dir);
  EXPECT_TRUE(names.ok()) << names.status().ToString();
  return names.ok() ? *names : std::vector<std::string>{};
}

void ExpectIOError(const Status& st, std::string_view path, std::string_view cause) {
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(cause), std::string::npos) << st.ToString();
}

// ------------------------------------------------------------ PosixFileSystem

class PosixFileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvrdma-fs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  FileSystem& fs_ = PosixFileSystem();
  std::string dir_;
};

TEST_F(PosixFileSystemTest, CreateWriteReadSyncSize) {
  auto f = MustOpen(fs_, Path("seg"), OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->path(), Path("seg"));
  MustWrite(*f, 0, "hello");
  MustWrite(*f, 8, "world");  // past the end: the gap reads as zeros
  ASSERT_TRUE(f->Sync().ok());
  EXPECT_EQ(SizeOf(*f), 13u);
  EXPECT_EQ(ReadAll(*f), std::string("hello\0\0\0world", 13));

  char buf[10];
  size_t got = 99;
  ASSERT_TRUE(f->ReadAt(10, std::as_writable_bytes(std::span(buf)), &got).ok());
  EXPECT_EQ(std::string(buf, got), "rld");  // short only at the end of the file
  ASSERT_TRUE(f->ReadAt(100, std::as_writable_bytes(std::span(buf)), &got).ok());
  EXPECT_EQ(got, 0u);
  f.reset();

  auto rw = MustOpen(fs_, Path("seg"), OpenMode::kReadWrite);
  ASSERT_NE(rw, nullptr);
  MustWrite(*rw, 0, "J");
  EXPECT_EQ(ReadFile(fs_, Path("seg")), std::string("Jello\0\0\0world", 13));
}

TEST_F(PosixFileSystemTest, AllocateSetsTheSizeAndKeepsTheBytes) {
  auto f = MustOpen(fs_, Path("seg"), OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  MustWrite(*f, 0, "abc");
  ASSERT_TRUE(f->Allocate(4096).ok());
  EXPECT_EQ(SizeOf(*f), 4096u);
  EXPECT_EQ(ReadAll(*f), "abc" + std::string(4093, '\0'));
  ASSERT_TRUE(f->Allocate(100).ok());  // never shrinks
  EXPECT_EQ(SizeOf(*f), 4096u);
  EXPECT_TRUE(f->Allocate(0).ok());
}

// WriteMapped (the write path of --fsync everysec and no): the bytes are in
// the file at once (ReadAt and another descriptor see them); a write past
// the mapped size is a WriteAt; a page the kernel cannot supply (here: the
// file shrank under the mapping) is an IOError naming the file, and the
// process goes on.
TEST_F(PosixFileSystemTest, WriteMappedLandsInTheFileAndABusErrorIsAnIOError) {
  auto f = MustOpen(fs_, Path("seg"), OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->Allocate(3 * 4096).ok());
  ASSERT_TRUE(f->WriteMapped(4090, B("across a page")).ok());
  ASSERT_TRUE(f->WriteMapped(0, B("head")).ok());
  EXPECT_EQ(ReadFile(fs_, Path("seg")).substr(4090, 13), "across a page");
  EXPECT_EQ(ReadAll(*f).substr(0, 4), "head");
  ASSERT_TRUE(f->WriteMapped(3 * 4096, B("past")).ok());  // outside the mapping: a pwrite
  EXPECT_EQ(SizeOf(*f), 3u * 4096 + 4);
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_EQ(::truncate(Path("seg").c_str(), 4096), 0) << std::strerror(errno);
  Status st = f->WriteMapped(2 * 4096 + 10, B("gone"));
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_NE(st.message().find(Path("seg")), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("bus error"), std::string::npos) << st.ToString();
  ASSERT_TRUE(f->WriteMapped(100, B("still here")).ok());  // the guard is reset
  EXPECT_EQ(ReadAll(*f).substr(100, 10), "still here");
}

// A write through the mapping cut by kill -9 at any instant leaves a prefix
// of its bytes in the file (what recovery takes for a torn tail). A child
// writes 8 MiB at file offset 24 (a write starts wherever the last one
// ended) again and again, each time another byte value, and is killed at a
// random moment; the file must then hold the new value up to one point and
// the old one after it: never two boundaries. glibc's memcpy of this size
// aligns the destination to 64 bytes for its `rep movsb` and stores the
// first 40 bytes last (tests/putback/run 24.ordered), as it did when
// kill9_test.sh found a value in a segment file without its leader.
TEST_F(PosixFileSystemTest, AWriteMappedCutByKill9LeavesAPrefixOfItsBytes) {
  constexpr size_t kBytes = 8 << 20;
  {
    auto f = MustOpen(fs_, Path("seg"), OpenMode::kCreate);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->Allocate(kBytes).ok());
  }
  unsigned seed = 12345;
  int cut = 0;  // kills that landed inside a copy
  for (int round = 0; round < 24; ++round) {
    {
      auto f = MustOpen(fs_, Path("seg"), OpenMode::kReadWrite);
      ASSERT_NE(f, nullptr);
      ASSERT_TRUE(f->WriteAt(0, std::vector<std::byte>(kBytes, std::byte{0x10})).ok());
    }
    const pid_t child = ::fork();
    ASSERT_GE(child, 0) << std::strerror(errno);
    if (child == 0) {
      auto f = fs_.Open(Path("seg"), OpenMode::kReadWrite);
      if (!f.ok()) ::_exit(1);
      std::vector<std::byte> a(kBytes - 4096, std::byte{0x21}), b(kBytes - 4096, std::byte{0x32});
      for (uint64_t i = 0;; ++i) {
        if (!(*f)->WriteMapped(24, i % 2 == 0 ? a : b).ok()) ::_exit(1);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rand_r(&seed) % 20000));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child exit status " << status;
    const std::string bytes = ReadFile(fs_, Path("seg"));
    ASSERT_EQ(bytes.size(), kBytes);
    size_t changes = 0, first_change = 0;
    for (size_t i = 25; i < 24 + kBytes - 4096; ++i) {
      if (bytes[i] != bytes[i - 1] && changes++ == 0) first_change = i;
    }
    ASSERT_LE(changes, 1u) << "round " << round << ": " << changes << " boundaries, the first at byte "
                           << first_change << " (a write through the mapping left more than a prefix)";
    cut += changes;
  }
  std::printf("[kill9-copy] %d of 24 kills landed inside a copy\n", cut);
}

// What a write through the mapping promises: once WriteMapped returns, the
// bytes survive the writer's kill -9 (they are in the kernel's page cache).
TEST_F(PosixFileSystemTest, WriteMappedBytesSurviveKill9OfTheWriter) {
  {
    auto f = MustOpen(fs_, Path("seg"), OpenMode::kCreate);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->Allocate(8192).ok());
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    auto f = fs_.Open(Path("seg"), OpenMode::kReadWrite);
    if (!f.ok() || !(*f)->WriteMapped(5000, B("acknowledged")).ok()) ::_exit(1);
    ::raise(SIGKILL);
    ::_exit(2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child exit status " << status;
  EXPECT_EQ(ReadFile(fs_, Path("seg")).substr(5000, 12), "acknowledged");
}

TEST_F(PosixFileSystemTest, ListRemoveRenameExists) {
  ASSERT_TRUE(fs_.CreateDir(Path("sub/deeper")).ok());  // with its parent
  EXPECT_TRUE(fs_.Exists(Path("sub/deeper")));
  EXPECT_TRUE(fs_.CreateDir(Path("sub/deeper")).ok());  // already there: fine
  for (const char* name : {"b", "a"}) {
    auto f = MustOpen(fs_, Path(name), OpenMode::kCreate);
    ASSERT_NE(f, nullptr);
    MustWrite(*f, 0, name);
  }
  EXPECT_EQ(MustList(fs_, dir_), (std::vector<std::string>{"a", "b", "sub"}));

  ASSERT_TRUE(fs_.Rename(Path("a"), Path("c")).ok());
  EXPECT_FALSE(fs_.Exists(Path("a")));
  EXPECT_EQ(ReadFile(fs_, Path("c")), "a");
  ASSERT_TRUE(fs_.Rename(Path("c"), Path("b")).ok());  // replaces b
  EXPECT_EQ(ReadFile(fs_, Path("b")), "a");
  ASSERT_TRUE(fs_.Remove(Path("b")).ok());
  EXPECT_FALSE(fs_.Exists(Path("b")));
  EXPECT_EQ(MustList(fs_, dir_), (std::vector<std::string>{"sub"}));
  EXPECT_TRUE(fs_.SyncDir(dir_).ok());
}

TEST_F(PosixFileSystemTest, ErrorsNameThePathAndTheCause) {
  auto missing = fs_.Open(Path("missing"), OpenMode::kReadOnly);
  ASSERT_FALSE(missing.ok());
  ExpectIOError(missing.status(), Path("missing"), "No such file or directory");

  auto f = MustOpen(fs_, Path("seg"), OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  auto again = fs_.Open(Path("seg"), OpenMode::kCreate);
  ASSERT_FALSE(again.ok());
  ExpectIOError(again.status(), Path("seg"), "File exists");

  auto ro = MustOpen(fs_, Path("seg"), OpenMode::kReadOnly);
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ro->WriteAt(8, B("abcd")).message(), Path("seg") + ": writing 4 bytes at 8: Bad file descriptor");

  ExpectIOError(fs_.Remove(Path("missing")), Path("missing"), "No such file or directory");
  ExpectIOError(fs_.Rename(Path("missing"), Path("x")), Path("missing"), "No such file or directory");
  ExpectIOError(fs_.SyncDir(Path("nodir")), Path("nodir"), "No such file or directory");
  ExpectIOError(fs_.List(Path("nodir")).status(), Path("nodir"), "No such file or directory");
  ExpectIOError(fs_.CreateDir(Path("seg/sub")), Path("seg"), "Not a directory");
}

TEST_F(PosixFileSystemTest, ConcurrentWritesAndReadsOnOneFile) {
  auto f = MustOpen(fs_, Path("seg"), OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  constexpr int kThreads = 4, kChunks = 64, kChunk = 512;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = t; c < kChunks; c += kThreads) {
        std::string chunk(kChunk, static_cast<char>('A' + c % 26));
        EXPECT_TRUE(f->WriteAt(static_cast<uint64_t>(c) * kChunk, B(chunk)).ok());
        if (c % 8 == 0) {
          EXPECT_TRUE(f->Sync().ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::string all = ReadAll(*f);
  ASSERT_EQ(all.size(), static_cast<size_t>(kChunks) * kChunk);
  for (int c = 0; c < kChunks; ++c) {
    EXPECT_EQ(all.substr(static_cast<size_t>(c) * kChunk, kChunk), std::string(kChunk, static_cast<char>('A' + c % 26)));
  }
}

// ------------------------------------------------------------ FaultFileSystem

// A file system with directory "d" and file "d/f" (durable name), holding
// `synced` (synced) and then the unsynced `writes`.
struct Write {
  uint64_t offset;
  std::string bytes;
};

std::unique_ptr<FaultFileSystem> WithFile(std::string_view synced, const std::vector<Write>& writes) {
  auto fs = std::make_unique<FaultFileSystem>();
  EXPECT_TRUE(fs->CreateDir("d").ok());
  auto f = MustOpen(*fs, "d/f", OpenMode::kCreate);
  EXPECT_TRUE(fs->SyncDir("d").ok());
  if (f == nullptr) return fs;
  MustWrite(*f, 0, synced);
  EXPECT_TRUE(f->Sync().ok());
  for (const Write& w : writes) MustWrite(*f, w.offset, w.bytes);
  return fs;
}

std::string Applied(std::string s, uint64_t offset, std::string_view bytes) {
  if (bytes.empty()) return s;
  if (s.size() < offset + bytes.size()) s.resize(offset + bytes.size(), '\0');
  s.replace(offset, bytes.size(), bytes);
  return s;
}

TEST(FaultFileSystemTest, SyncedWritesSurviveAPowerCutAndUnsyncedOnesMayNot) {
  bool lost_all = false;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    auto fs = WithFile("synced!!", {{8, "UNSYNCED"}});
    fs->Restart(FaultFileSystem::CrashKind::kPowerCut, seed);
    std::string got = ReadFile(*fs, "d/f");
    ASSERT_GE(got.size(), 8u) << "seed " << seed;
    EXPECT_EQ(got.substr(0, 8), "synced!!") << "seed " << seed;
    EXPECT_EQ(got.substr(8), std::string("UNSYNCED").substr(0, got.size() - 8)) << "seed " << seed;
    lost_all |= got == "synced!!";
  }
  EXPECT_TRUE(lost_all) << "no seed in 64 dropped the unsynced write";
}

TEST(FaultFileSystemTest, AProcessCrashKeepsEverythingAndMakesItDurable) {
  auto fs = WithFile("synced!!", {{8, "UNSYNCED"}});
  {
    auto g = MustOpen(*fs, "d/g", OpenMode::kCreate);  // name never synced
    ASSERT_NE(g, nullptr);
    MustWrite(*g, 0, "g");
  }
  fs->Restart(FaultFileSystem::CrashKind::kProcess, 0);
  EXPECT_EQ(ReadFile(*fs, "d/f"), "synced!!UNSYNCED");
  EXPECT_EQ(ReadFile(*fs, "d/g"), "g");
  // After the restart all of it is the durable baseline: a power cut now
  // loses nothing, whatever the seed.
  for (uint64_t seed = 0; seed < 8; ++seed) {
    fs->Restart(FaultFileSystem::CrashKind::kPowerCut, seed);
    EXPECT_EQ(ReadFile(*fs, "d/f"), "synced!!UNSYNCED");
    EXPECT_EQ(ReadFile(*fs, "d/g"), "g");
  }
}

TEST(FaultFileSystemTest, APowerCutKeepsOnlyAPrefixOfTheUnsyncedWrites) {
  const std::string durable = "0123456789";
  // Overlapping, extending (with a gap) and distinct bytes, so that every
  // outcome tells which writes it kept and where the tear was.
  const std::vector<Write> writes = {{2, "aaaa"}, {12, "bbbbbb"}, {0, "cc"}, {16, "dddddddd"}};
  int kept_some = 0, tore = 0, kept_all = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto fs = WithFile(durable, writes);
    fs->Restart(FaultFileSystem::CrashKind::kPowerCut, seed);
    const std::string got = ReadFile(*fs, "d/f");
    bool matched = false;
    std::string prefix = durable;  // durable + the first k writes
    for (size_t k = 0; k <= writes.size() && !matched; ++k) {
      if (k == writes.size()) {
        matched = got == prefix;
        kept_all += matched;
        break;
      }
      for (size_t t = 0; t < writes[k].bytes.size() && !matched; ++t) {
        if (got == Applied(prefix, writes[k].offset, writes[k].bytes.substr(0, t))) {
          matched = true;
          kept_some += k > 0;
          tore += t > 0;
        }
      }
      prefix = Applied(prefix, writes[k].offset, writes[k].bytes);
    }
    EXPECT_TRUE(matched) << "seed " << seed << ": not durable + a prefix of the writes: " << got;
  }
  EXPECT_GT(kept_some, 0);
  EXPECT_GT(tore, 0);
  EXPECT_GT(kept_all, 0);
}

// kPowerCutAnyOrder: synced bytes always stay; of the unsynced writes, any
// subset of their sectors (or of the writes) may: a later sector kept after
// an earlier one dropped (a hole, then data), which a prefix never leaves.
TEST(FaultFileSystemTest, APowerCutAnyOrderCanKeepALaterSectorAndDropAnEarlierOne) {
  const std::string durable(16, 's');
  const std::string unsynced = std::string(16, 'a') + std::string(16, 'b') + std::string(16, 'c');
  int hole_then_data = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto fs = WithFile(durable, {{16, unsynced}});
    fs->SetSectorBytes(16);
    fs->Restart(FaultFileSystem::CrashKind::kPowerCutAnyOrder, seed);
    std::string got = ReadFile(*fs, "d/f");
    ASSERT_GE(got.size(), 16u) << "seed " << seed;
    EXPECT_EQ(got.substr(0, 16), durable) << "seed " << seed << ": synced bytes lost";
    got.resize(64, '\0');  // never written: zeros
    bool dropped_before = false;
    for (size_t i = 0; i < 3; ++i) {
      const std::string sector = got.substr(16 + 16 * i, 16);
      const bool kept = sector == unsynced.substr(16 * i, 16);
      if (kept && dropped_before) {
        ++hole_then_data;
        break;
      }
      dropped_before |= sector == std::string(16, '\0');
    }
  }
  EXPECT_GT(hole_then_data, 10) << "few seeds kept a sector after dropping an earlier one";
}

TEST(FaultFileSystemTest, APowerCutKeepsTheAllocatedSize) {
  auto fs = WithFile("abc", {});
  {
    auto f = MustOpen(*fs, "d/f", OpenMode::kReadWrite);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->Allocate(64).ok());
  }
  fs->Restart(FaultFileSystem::CrashKind::kPowerCut, 1);
  EXPECT_EQ(ReadFile(*fs, "d/f"), "abc" + std::string(61, '\0'));
}

TEST(FaultFileSystemTest, NameOperationsWithoutSyncDirAreUndoneByAPowerCut) {
  for (bool sync_dir : {false, true}) {
    SCOPED_TRACE(sync_dir ? "with SyncDir" : "without SyncDir");
    FaultFileSystem fs;
    ASSERT_TRUE(fs.CreateDir("d").ok());
    for (const char* name : {"d/kept", "d/old"}) {
      auto f = MustOpen(fs, name, OpenMode::kCreate);
      ASSERT_NE(f, nullptr);
      MustWrite(*f, 0, name);
      ASSERT_TRUE(f->Sync().ok());
    }
    ASSERT_TRUE(fs.SyncDir("d").ok());
    {
      auto f = MustOpen(fs, "d/new", OpenMode::kCreate);
      ASSERT_NE(f, nullptr);
      MustWrite(*f, 0, "new");
      ASSERT_TRUE(f->Sync().ok());  // the bytes are durable, the name is not
    }
    ASSERT_TRUE(fs.Remove("d/kept").ok());
    ASSERT_TRUE(fs.Rename("d/old", "d/renamed").ok());
    EXPECT_EQ(MustList(fs, "d"), (std::vector<std::string>{"new", "renamed"}));
    if (sync_dir) {
      ASSERT_TRUE(fs.SyncDir("d").ok());
    }

    fs.Restart(FaultFileSystem::CrashKind::kPowerCut, 0);
    if (sync_dir) {
      EXPECT_EQ(MustList(fs, "d"), (std::vector<std::string>{"new", "renamed"}));
      EXPECT_EQ(ReadFile(fs, "d/renamed"), "d/old");
    } else {
      EXPECT_EQ(MustList(fs, "d"), (std::vector<std::string>{"kept", "old"}));
      EXPECT_FALSE(fs.Exists("d/new"));
      EXPECT_EQ(ReadFile(fs, "d/kept"), "d/kept");
      EXPECT_EQ(ReadFile(fs, "d/old"), "d/old");
    }
  }
}

TEST(FaultFileSystemTest, CrashAtStepFailsThatCallAndEveryLaterOne) {
  FaultFileSystem fs;
  fs.CrashAtStep(5);
  ASSERT_TRUE(fs.CreateDir("d").ok());  // 1
  auto f = MustOpen(fs, "d/f", OpenMode::kCreate);  // 2
  ASSERT_NE(f, nullptr);
  MustWrite(*f, 0, "aaaa");          // 3
  ASSERT_TRUE(f->Sync().ok());       // 4
  EXPECT_FALSE(fs.crashed());
  Status st = f->WriteAt(4, B("bbbb"));  // 5
  EXPECT_EQ(st.message(), "d/f: writing 4 bytes at 4: simulated crash");
  EXPECT_TRUE(fs.crashed());
  ExpectIOError(f->Sync(), "d/f", "simulated crash");
  ExpectIOError(fs.SyncDir("d"), "d", "simulated crash");
  ExpectIOError(fs.Open("d/g", OpenMode::kCreate).status(), "d/g", "simulated crash");
  ExpectIOError(fs.Remove("d/f"), "d/f", "simulated crash");
  EXPECT_EQ(fs.steps(), 9u);
  // Nothing from step 5 on took effect; reads still work.
  EXPECT_EQ(ReadAll(*f), "aaaa");
  EXPECT_FALSE(fs.Exists("d/g"));
  EXPECT_EQ(fs.writes(), 1u);
  EXPECT_EQ(fs.syncs(), 1u);

  f.reset();
  fs.Restart(FaultFileSystem::CrashKind::kProcess, 0);
  EXPECT_FALSE(fs.crashed());
  f = MustOpen(fs, "d/f", OpenMode::kReadWrite);
  ASSERT_NE(f, nullptr);
  MustWrite(*f, 4, "bbbb");  // step 10: the crash is cleared
  EXPECT_EQ(fs.steps(), 10u);
  EXPECT_EQ(ReadAll(*f), "aaaabbbb");
}

TEST(FaultFileSystemTest, CrashAtStepWithTearLeavesAStrictPrefixOfThatWrite) {
  const std::string data = "0123456789";
  bool some_bytes = false;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    FaultFileSystem fs;
    ASSERT_TRUE(fs.CreateDir("d").ok());
    auto f = MustOpen(fs, "d/f", OpenMode::kCreate);
    ASSERT_NE(f, nullptr);
    MustWrite(*f, 0, "xy");
    fs.CrashAtStep(4, /*tear=*/true, seed);
    ExpectIOError(f->WriteAt(2, B(data)), "d/f", "simulated crash");
    const std::string got = ReadAll(*f);
    ASSERT_GE(got.size(), 2u);
    ASSERT_LT(got.size(), 2 + data.size()) << "seed " << seed << ": not a strict prefix";
    EXPECT_EQ(got, "xy" + data.substr(0, got.size() - 2)) << "seed " << seed;
    some_bytes |= got.size() > 2;
    f.reset();
    fs.Restart(FaultFileSystem::CrashKind::kProcess, 0);  // the kernel has the prefix
    EXPECT_EQ(ReadFile(fs, "d/f"), got);
  }
  EXPECT_TRUE(some_bytes);
}

TEST(FaultFileSystemTest, FailCallsFailThatManyCallsAndChangeNothing) {
  auto fs = WithFile("abc", {});
  auto f = MustOpen(*fs, "d/f", OpenMode::kReadWrite);
  ASSERT_NE(f, nullptr);
  const uint64_t syncs = fs->syncs();

  fs->FailCalls(FaultFileSystem::Op::kWrite, ENOSPC, 1);
  EXPECT_EQ(f->WriteAt(0, B("xyz")).message(), "d/f: writing 3 bytes at 0: No space left on device");
  EXPECT_EQ(ReadAll(*f), "abc");
  MustWrite(*f, 3, "def");  // only one call was failed

  fs->FailCalls(FaultFileSystem::Op::kSync, EIO, 2);
  ExpectIOError(f->Sync(), "d/f", "Input/output error");
  ExpectIOError(f->Sync(), "d/f", "Input/output error");
  EXPECT_EQ(fs->syncs(), syncs);
  EXPECT_TRUE(f->Sync().ok());

  fs->FailCalls(FaultFileSystem::Op::kAllocate, ENOSPC, 1);
  ExpectIOError(f->Allocate(100), "d/f", "No space left on device");
  EXPECT_EQ(SizeOf(*f), 6u);

  fs->FailCalls(FaultFileSystem::Op::kCreate, ENOSPC, 1);
  ExpectIOError(fs->Open("d/g", OpenMode::kCreate).status(), "d/g", "No space left on device");
  EXPECT_FALSE(fs->Exists("d/g"));

  fs->FailCalls(FaultFileSystem::Op::kRemove, EIO, 1);
  ExpectIOError(fs->Remove("d/f"), "d/f", "Input/output error");
  EXPECT_TRUE(fs->Exists("d/f"));

  fs->FailCalls(FaultFileSystem::Op::kRename, EIO, 1);
  ExpectIOError(fs->Rename("d/f", "d/h"), "d/f", "Input/output error");
  EXPECT_TRUE(fs->Exists("d/f"));
  EXPECT_FALSE(fs->Exists("d/h"));

  fs->FailCalls(FaultFileSystem::Op::kSyncDir, EIO, 1);
  ExpectIOError(fs->SyncDir("d"), "d", "Input/output error");
}

TEST(FaultFileSystemTest, ASpaceLimitGivesNoSpaceLeftOnDeviceAndChangesNothing) {
  FaultFileSystem fs;
  fs.SetSpaceLimit(100);
  auto f = MustOpen(fs, "f", OpenMode::kCreate);
  auto g = MustOpen(fs, "g", OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  ASSERT_NE(g, nullptr);
  MustWrite(*f, 0, std::string(60, 'f'));
  EXPECT_EQ(g->WriteAt(0, B(std::string(41, 'g'))).message(), "g: writing 41 bytes at 0: No space left on device");
  EXPECT_EQ(SizeOf(*g), 0u);
  MustWrite(*g, 0, std::string(40, 'g'));  // exactly the limit
  MustWrite(*f, 0, std::string(60, 'F'));  // inside the file: no new space
  ExpectIOError(f->Allocate(61), "f", "No space left on device");
  EXPECT_EQ(SizeOf(*f), 60u);
  EXPECT_EQ(fs.writes(), 3u);
  EXPECT_EQ(fs.bytes_written(), 160u);
  fs.SetSpaceLimit(0);
  EXPECT_TRUE(f->Allocate(1000).ok());
  EXPECT_EQ(SizeOf(*f), 1000u);
}

TEST(FaultFileSystemTest, OpenErrorsLookLikePosix) {
  FaultFileSystem fs;
  ExpectIOError(fs.Open("d/f", OpenMode::kReadOnly).status(), "d/f", "No such file or directory");
  ExpectIOError(fs.Open("d/f", OpenMode::kCreate).status(), "d/f", "No such file or directory");  // no "d"
  ASSERT_TRUE(fs.CreateDir("d/e").ok());
  EXPECT_EQ(MustList(fs, "d"), (std::vector<std::string>{"e"}));
  auto f = MustOpen(fs, "d/f", OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  ExpectIOError(fs.Open("d/f", OpenMode::kCreate).status(), "d/f", "File exists");
  auto ro = MustOpen(fs, "d/f", OpenMode::kReadOnly);
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ro->WriteAt(8, B("abcd")).message(), "d/f: writing 4 bytes at 8: Bad file descriptor");
  EXPECT_EQ(MustList(fs, "d"), (std::vector<std::string>{"e", "f"}));
}

TEST(FaultFileSystemTest, AFileKeptAcrossRestartIsStale) {
  auto fs = WithFile("abc", {});
  auto f = MustOpen(*fs, "d/f", OpenMode::kReadWrite);
  ASSERT_NE(f, nullptr);
  fs->Restart(FaultFileSystem::CrashKind::kProcess, 0);
  ExpectIOError(f->WriteAt(0, B("x")), "d/f", "Stale file handle");
  EXPECT_EQ(ReadFile(*fs, "d/f"), "abc");
}

TEST(FaultFileSystemTest, ConcurrentWritesOnOneFile) {
  FaultFileSystem fs;
  auto f = MustOpen(fs, "f", OpenMode::kCreate);
  ASSERT_NE(f, nullptr);
  constexpr int kThreads = 4, kChunks = 64, kChunk = 64;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = t; c < kChunks; c += kThreads) {
        EXPECT_TRUE(f->WriteAt(static_cast<uint64_t>(c) * kChunk, B(std::string(kChunk, static_cast<char>('A' + c % 26)))).ok());
        if (c % 8 == 0) {
          EXPECT_TRUE(f->Sync().ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(fs.writes(), static_cast<uint64_t>(kChunks));
  std::string all = ReadAll(*f);
  ASSERT_EQ(all.size(), static_cast<size_t>(kChunks) * kChunk);
  for (int c = 0; c < kChunks; ++c) {
    EXPECT_EQ(all.substr(static_cast<size_t>(c) * kChunk, kChunk), std::string(kChunk, static_cast<char>('A' + c % 26)));
  }
}

}  // namespace
}  // namespace kvrdma::test
