// PosixFileSystem on a temporary directory.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/store/file_system.h"

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

}  // namespace
}  // namespace kvrdma::test
