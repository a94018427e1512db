// kvserver with a data dir (docs/DESIGN.md, "Durability"), end to end: what
// clients wrote and were answered survives a stop and a restart of the
// server on the same dir, values and versions, over loopback and the RDMA
// device. Crashes (kill -9, power cuts at any I/O step) are explored in
// tests/store/durability_test.cc and tests/e2e/kill9_test.sh.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "server/data_dir.h"
#include "tests/store/fault_file_system.h"
#include "tests/e2e/e2e_util.h"

namespace kvrdma::testing {
namespace {

class DurableServerTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    env_ = TransportEnv::Make(GetParam());
    if (!env_.skip_reason.empty()) GTEST_SKIP() << env_.skip_reason;
    char tmpl[] = "/tmp/kvrdma-durable-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    if (!root_.empty()) std::system(("rm -rf " + root_).c_str());
  }
  std::unique_ptr<TestServer> Start(FsyncMode mode) {
    return std::make_unique<TestServer>(env_, TestServer::Defaults(), [&](StoreConfig& sc) {
      sc.data_dir = root_ + "/data";
      sc.fsync = mode;
    });
  }
  TransportEnv env_;
  std::string root_;
};

TEST_P(DurableServerTest, ARestartServesEveryAnsweredWriteWithItsVersion) {
  struct Want {
    std::string value;  // "" and !present: deleted
    bool present = false;
    uint64_t version = 0;
  };
  std::map<std::string, Want> want;
  for (FsyncMode mode : {FsyncMode::kAlways, FsyncMode::kEverySec, FsyncMode::kNo}) {
    {
      auto server = Start(mode);
      auto c = server->Connect(PutMode::kWriteImm);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      // Keys already there from the last round first: each must be as left.
      for (const auto& [key, w] : want) {
        std::string v;
        Status st = (*c)->Get(key, &v);
        if (w.present) {
          ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
          EXPECT_EQ(v, w.value) << key;
        } else {
          EXPECT_TRUE(st.IsNotFound()) << key << ": " << st.ToString();
        }
      }
      const int round = static_cast<int>(mode);
      for (int i = 0; i < 300; ++i) {
        const std::string key = "key-" + std::to_string((i * 7 + round * 13) % 250);
        // Sizes from one byte to fragmented (the message is 4 KiB).
        const std::string value(1 + (i * 37 + round) % (i % 50 == 0 ? 20000 : 300), static_cast<char>('a' + i % 26));
        if (i % 9 == 4 && want.count(key) && want[key].present) {
          ASSERT_TRUE((*c)->Delete(key).ok()) << key;
          want[key] = Want{};
        } else {
          ASSERT_TRUE((*c)->Put(key, value).ok()) << key;
          want[key] = Want{value, true, 0};
        }
      }
      // The versions the store gave (what conditional writes compare).
      for (auto& [key, w] : want) {
        if (!w.present) continue;
        std::string v;
        ASSERT_TRUE(server->backend().store().Get(key, &v, &w.version).ok()) << key;
      }
      EXPECT_GE(StatOf(**c, "items"), 1u);
    }  // the server stops (as with SIGTERM) and its store goes
    auto server = Start(mode);
    auto c = server->Connect(PutMode::kSend);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    uint64_t checked = 0;
    for (const auto& [key, w] : want) {
      std::string v;
      Status st = (*c)->Get(key, &v);
      if (!w.present) {
        EXPECT_TRUE(st.IsNotFound()) << key << ": " << st.ToString();
        continue;
      }
      ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
      EXPECT_EQ(v, w.value) << key;
      ++checked;
    }
    // Versions survived: a conditional write at the old version commits, one
    // at any other is refused (then the version moves on).
    int n = 0;
    for (auto& [key, w] : want) {
      if (!w.present || n++ >= 20) continue;
      EXPECT_TRUE((*c)->Put(key, w.value, w.version + 1).IsVersionMismatch()) << key;
      EXPECT_TRUE((*c)->Put(key, w.value, w.version).ok()) << key << " at version " << w.version;
    }
    std::printf("fsync %s: %llu values and their versions served after the restart\n", FsyncModeName(mode),
                static_cast<unsigned long long>(checked));
  }
}

// Rendezvous PUTs (issue 26) under --fsync always: answered only after
// their group commit, like any PUT (the worker applies them when the READ
// completes, outside a round), and served after a restart with their
// versions; a conditional one refused is not written.
TEST_P(DurableServerTest, RendezvousPutsSurviveARestartWithTheirVersions) {
  std::map<std::string, std::pair<std::string, uint64_t>> want;
  {
    auto server = Start(FsyncMode::kAlways);
    auto c = server->Connect(PutMode::kSend, 64 * 1024);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (int i = 0; i < 12; ++i) {
      const std::string key = "rv-" + std::to_string(i % 5);
      const std::string value(65536 + size_t(i) * 30000, static_cast<char>('A' + i));
      ASSERT_TRUE((*c)->Put(key, value).ok()) << key;
      want[key] = {value, (*c)->last_version()};
    }
    EXPECT_TRUE((*c)->Put("rv-0", std::string(70000, 'x'), want["rv-0"].second + 100).IsVersionMismatch());
    EXPECT_EQ((*c)->stats().rendezvous_puts, 13u);
  }
  auto server = Start(FsyncMode::kAlways);
  auto c = server->Connect(PutMode::kSend, 64 * 1024);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const auto& [key, w] : want) {
    std::string v;
    ASSERT_TRUE((*c)->Get(key, &v).ok()) << key;
    EXPECT_TRUE(v == w.first) << key;
    ASSERT_TRUE((*c)->Put(key, "small", w.second).ok()) << key << ": the version after the restart";
  }
}

// A flush that fails under --fsync always: the PUTs whose commit it was are
// answered IOError (the worker rewrites their queued replies), the client
// and the server go on, and the next PUTs succeed once the disk does. A full
// disk refuses a PUT that needs a new segment file, with the reason.
TEST(DurableServerErrorsTest, AFailedFlushAnswersIOErrorAndTheServerGoesOn) {
  TransportEnv env = TransportEnv::Make(Kind::kLoopback);
  test::FaultFileSystem fs;
  TestServer server(env, TestServer::Defaults(), [&](StoreConfig& sc) {
    sc.data_dir = "d";
    sc.file_system = &fs;
    sc.fsync = FsyncMode::kAlways;
    sc.segment_bytes = 1 << 20;
    sc.log_bytes = 8 << 20;
    sc.max_value_bytes = 64 << 10;
  });
  server::ServerConfig cfg = TestServer::Defaults();
  auto c = server.Connect(PutMode::kSend);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Put("before", "v").ok());
  fs.FailCalls(test::FaultFileSystem::Op::kSync, EIO, 1000000);
  Status st = (*c)->Put("during", "v");
  EXPECT_EQ(st.code(), Status::Code::kIOError) << st.ToString();
  EXPECT_NE(st.message().find("not made durable"), std::string::npos) << st.ToString();
  // Several writes in one message (protocol 10): every applied one's record
  // becomes IOError, a refused one keeps its own status.
  {
    std::vector<std::string> keys;
    std::vector<Op> ops(6);
    for (int i = 0; i < 6; ++i) keys.push_back("during" + std::to_string(i));
    for (int i = 0; i < 6; ++i) {
      ops[i].type = i == 3 ? Op::Type::kDelete : Op::Type::kPut;
      ops[i].key = keys[i];
      ops[i].value = "v";
    }
    ops[4].key = "before";
    ops[4].if_version = 1u << 30;  // not its version: VersionMismatch, not applied
    std::vector<Op*> ptrs;
    for (Op& o : ops) ptrs.push_back(&o);
    const uint64_t messages = (*c)->stats().messages;
    ASSERT_EQ((*c)->Submit(ptrs), ptrs.size());
    std::vector<Op*> done(8);
    size_t n = 0;
    for (int t = 0; t < 100 && n < ops.size(); ++t) n += (*c)->Wait(done, 100);
    ASSERT_EQ(n, ops.size());
    EXPECT_EQ((*c)->stats().messages - messages, 1u) << "the six writes were sent in one message";
    for (int i = 0; i < 6; ++i) {
      const Status::Code want = i == 4 ? Status::Code::kVersionMismatch
                                : i == 3 ? Status::Code::kNotFound
                                         : Status::Code::kIOError;
      EXPECT_EQ(ops[i].status.code(), want) << i << ": " << ops[i].status.ToString();
    }
  }
  fs.FailCalls(test::FaultFileSystem::Op::kSync, EIO, 0);
  ASSERT_TRUE((*c)->Put("after", "v").ok());
  std::string v;
  ASSERT_TRUE((*c)->Get("before", &v).ok());
  // A full disk: the next segment file cannot be allocated.
  fs.SetSpaceLimit(1);
  Status full;
  const std::string big(60 << 10, 'x');
  for (int i = 0; i < 40 && full.ok(); ++i) full = (*c)->Put("big" + std::to_string(i), big);
  EXPECT_EQ(full.code(), Status::Code::kIOError) << full.ToString();
  EXPECT_NE(full.message().find("No space left on device"), std::string::npos) << full.ToString();
  fs.SetSpaceLimit(0);
  EXPECT_TRUE((*c)->Put("resumed", big).ok());
  ASSERT_TRUE((*c)->Get("after", &v).ok());
  (void)cfg;
}

// kvserver --data-dir DIR --verify (server::VerifyDataDir): 0 on a good dir,
// 1 once a byte in the middle of a segment file is flipped, 1 on a dir that
// is not a data dir; it changes nothing.
TEST(VerifyDataDirTest, AGoodDirPassesADamagedOneFails) {
  char tmpl[] = "/tmp/kvrdma-verify-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl, dir = root + "/data";
  {
    StoreConfig sc;
    sc.index_homes = 1024;
    sc.segment_bytes = 64 << 10;
    sc.log_bytes = 16 * sc.segment_bytes;
    sc.max_value_bytes = 4096;
    sc.huge_pages = HugePages::kOff;
    sc.data_dir = dir;
    sc.fsync = FsyncMode::kAlways;
    auto s = Store::Open(sc);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (int i = 0; i < 300; ++i) ASSERT_TRUE((*s)->Put(0, "k" + std::to_string(i), std::string(100, 'v')).ok());
    ASSERT_TRUE((*s)->Commit(0).ok());
  }
  EXPECT_EQ(server::VerifyDataDir(dir), 0);
  EXPECT_EQ(server::VerifyDataDir(root), 1);  // no meta file: not a data dir
  // One byte in the middle of the first segment file's data.
  const std::string seg = dir + "/segment-0000000000000001.kvseg";
  FILE* f = std::fopen(seg.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fseek(f, 4096 + 1000, SEEK_SET), 0);
  const int c = std::fgetc(f);
  ASSERT_EQ(std::fseek(f, 4096 + 1000, SEEK_SET), 0);
  std::fputc(c ^ 0x01, f);
  std::fclose(f);
  EXPECT_EQ(server::VerifyDataDir(dir), 1);
  std::system(("rm -rf " + root).c_str());
}

INSTANTIATE_TEST_SUITE_P(Loopback, DurableServerTest, ::testing::Values(Kind::kLoopback), KindName);
INSTANTIATE_TEST_SUITE_P(Verbs, DurableServerTest, ::testing::Values(Kind::kVerbs), KindName);

}  // namespace
}  // namespace kvrdma::testing
