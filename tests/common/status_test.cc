#include "common/status.h"

#include <gtest/gtest.h>

namespace kvrdma {
namespace {

TEST(StatusTest, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, FactoriesSetCodeAndMessage) {
  Status s = Status::ServerFull("log full");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kServerFull);
  EXPECT_EQ(s.ToString(), "ServerFull: log full");
  EXPECT_EQ(Status::FromErrno("open", 2).ToString(), "IOError: open: No such file or directory");
}

TEST(StatusTest, ResultHoldsValueOrStatus) {
  Result<int> a = 5;
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(*a, 5);
  Result<int> b = Status::NotFound("k");
  EXPECT_FALSE(b.ok());
  EXPECT_TRUE(b.status().IsNotFound());
}

Status Chain(bool fail) {
  KVRDMA_RETURN_IF_ERROR(fail ? Status::Timeout("t") : Status::OK());
  return Status::Corruption("reached");
}

TEST(StatusTest, ReturnIfError) {
  EXPECT_TRUE(Chain(true).IsTimeout());
  EXPECT_EQ(Chain(false).code(), Status::Code::kCorruption);
}

}  // namespace
}  // namespace kvrdma
