#include "core/training/train_options.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace performer::training {
namespace {

TEST(TrainOptionsTest, JsonRoundTrip) {
  TrainOptions o;
  o.steps = 77;
  o.lr = 3.5e-4;
  o.seed = 18446744073709551615ull;
  o.checkpoint_dir = "/tmp/x";
  absl::StatusOr<TrainOptions> back = TrainOptions::FromJson(o.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), o.ToJson());
  EXPECT_EQ(back->seed, o.seed);
  EXPECT_EQ(back->lr, 3.5e-4);
}

TEST(TrainOptionsTest, FromJsonIsStrict) {
  nlohmann::json json = TrainOptions().ToJson();
  json["stepz"] = 3;
  absl::StatusOr<TrainOptions> bad = TrainOptions::FromJson(json);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stepz"), std::string::npos);
  json = TrainOptions().ToJson();
  json["batch_size"] = "eight";
  EXPECT_FALSE(TrainOptions::FromJson(json).ok());
  json["batch_size"] = 1.5;
  EXPECT_FALSE(TrainOptions::FromJson(json).ok());
}

TEST(TrainOptionsTest, ValidateNamesBadOptions) {
  TrainOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.batch_size = 0;
  o.beta2 = 1.0;
  absl::Status s = o.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("batch_size"), std::string::npos);
  EXPECT_NE(s.message().find("beta2"), std::string::npos);
}

TEST(TrainOptionsTest, ResumeMayChangeCadenceButNotTheCurve) {
  TrainOptions stored;
  TrainOptions requested = stored;
  requested.steps = stored.steps * 2;
  requested.val_every = 7;
  requested.checkpoint_every = 9;
  requested.checkpoint_dir = "elsewhere";
  EXPECT_TRUE(CheckResumable(stored, requested).ok());
  requested.lr *= 2;
  requested.seed = 5;
  absl::Status s = CheckResumable(stored, requested);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lr"), std::string::npos);
  EXPECT_NE(s.message().find("seed"), std::string::npos);
}

}  // namespace
}  // namespace performer::training
