#include "probe/probes/probe.h"

#include <gtest/gtest.h>

#include "probe/probes/probe_args.h"
#include "probe/probes/probe_test_util.h"

namespace uc::probe {
namespace {

using nlohmann::json;
using testing::Record;

TEST(ActivationRecordTest, MetadataHasEveryFieldButTheTensor) {
  ActivationRecord record = Record({1.0f, 2.0f}, 12, "toxicity", "r-7");
  record.tensor_type = TensorType::kMlpOut;
  record.is_generated = true;
  record.generated_index = 3;
  const json expected = {{"request_id", "r-7"},
                         {"extraction_point_name", "toxicity"},
                         {"layer", 2},
                         {"token_pos", 12},
                         {"tensor_type", "mlp_out"},
                         {"is_generated", true},
                         {"generated_index", 3},
                         {"timestamp", 1700000000.5}};
  EXPECT_EQ(record.Metadata(), expected);
  EXPECT_EQ(record.tensor().size(), 2u);
}

TEST(ActivationRecordTest, PromptTokenHasNullGeneratedIndex) {
  const json metadata = Record({0.0f}).Metadata();
  EXPECT_TRUE(metadata.at("generated_index").is_null());
  EXPECT_EQ(metadata.at("tensor_type"), "residual_stream");
  EXPECT_FALSE(metadata.contains("values"));
}

TEST(ProbeActionTest, Names) {
  EXPECT_EQ(Name(ProbeAction::kContinue), "continue");
  EXPECT_EQ(Name(ProbeAction::kFlag), "flag");
  EXPECT_EQ(Name(ProbeAction::kAbort), "abort");
}

TEST(ProbeSignalTest, ToJson) {
  ProbeSignal signal;
  signal.action = ProbeAction::kAbort;
  signal.confidence = 0.97;
  signal.metadata = {{"score", 0.97}};
  signal.timestamp = 12.5;
  EXPECT_EQ(signal.ToJson(), json({{"action", "abort"},
                                   {"confidence", 0.97},
                                   {"metadata", {{"score", 0.97}}},
                                   {"timestamp", 12.5}}));
  EXPECT_TRUE(ProbeSignal().ToJson().at("confidence").is_null());
  EXPECT_EQ(ProbeSignal().ToJson().at("metadata"), json::object());
}

TEST(ProbeResultTest, ToJson) {
  ProbeResult result;
  result.request_id = "r-1";
  result.point = "gate";
  result.verdict = {{"flagged", true}};
  ProbeSignal signal;
  signal.action = ProbeAction::kFlag;
  result.signal_history = {signal, ProbeSignal()};
  result.metadata = {{"threshold", 0.5}};
  const json out = result.ToJson();
  EXPECT_EQ(out.at("request_id"), "r-1");
  EXPECT_EQ(out.at("extraction_point_name"), "gate");
  EXPECT_EQ(out.at("verdict"), json({{"flagged", true}}));
  ASSERT_EQ(out.at("signal_history").size(), 2u);
  EXPECT_EQ(out.at("signal_history")[0], signal.ToJson());
  EXPECT_EQ(out.at("signal_history")[1].at("action"), "continue");
  EXPECT_EQ(out.at("metadata"), json({{"threshold", 0.5}}));
  EXPECT_EQ(ProbeResult().ToJson().at("signal_history"), json::array());
}

TEST(UnixSecondsTest, IsNow) {
  const double now = UnixSeconds();
  EXPECT_GT(now, 1.6e9);  // after 2020
  EXPECT_LT(now, 4.1e9);
}

TEST(ProbeArgsTest, EditDistanceAndClosestMatches) {
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("linear", "linear"), 0u);
  const std::vector<std::string> names = {"linear", "mlp", "norm_gate", "cosine", "ema"};
  EXPECT_EQ(ClosestMatches("lineer", names), std::vector<std::string>({"linear"}));
  EXPECT_EQ(ClosestMatches("emma", names), std::vector<std::string>({"ema"}));
  EXPECT_EQ(ClosestMatches("abc", {"abd", "abcd", "xyz", "ab", "abce"}),
            std::vector<std::string>({"ab", "abcd", "abce"}));  // ties by name, at most 3
  EXPECT_EQ(ClosestMatches("relu6", {"relu", "gelu", "tanh"}), std::vector<std::string>({"relu"}));
  EXPECT_TRUE(ClosestMatches("zzzzzzzzzz", names).empty());
  EXPECT_EQ(DidYouMean("cosin", names), " (did you mean 'cosine'?)");
  EXPECT_EQ(DidYouMean("xyzzy_plugh", names), "");
}

TEST(ProbeArgsTest, RejectsUnknownKeysWithSuggestion) {
  const StatusOr<ProbeArgs> args =
      ProbeArgs::Parse("linear", {{"treshold", 1}}, {"threshold", "weights"});
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(args.status().message(),
            "probe_type 'linear': unknown argument 'treshold' (did you mean 'threshold'?); "
            "valid arguments: 'threshold', 'weights'");
}

TEST(ProbeArgsTest, TypedAccessors) {
  const json raw = {{"n", 2.5},       {"b", true},     {"s", "x"},        {"flag", "flag"},
                    {"nil", nullptr}, {"bad", "high"}, {"action", "flag"}};
  StatusOr<ProbeArgs> args = ProbeArgs::ParseOpen("t", raw);
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(*args->Number("n"), 2.5);
  EXPECT_FALSE(args->OptionalNumber("nil")->has_value());
  EXPECT_FALSE(args->Has("nil"));
  EXPECT_EQ(*args->Bool("b", false), true);
  EXPECT_EQ(*args->Bool("missing", true), true);
  EXPECT_EQ(*args->String("s", ""), "x");
  EXPECT_EQ(*args->Action(), ProbeAction::kFlag);
  EXPECT_EQ(args->Number("bad").status().message(),
            "probe_type 't': argument 'bad': expected a number (got \"high\")");
  EXPECT_EQ(args->Number("missing").status().message(),
            "probe_type 't': argument 'missing': required (a number)");
  EXPECT_FALSE(args->Bool("n", false).ok());
  const Status choice = args->Choice("s", {"relu", "gelu"}, "relu").status();
  EXPECT_NE(choice.message().find("'x' is not one of 'relu', 'gelu'"), std::string::npos);
  EXPECT_FALSE(ProbeArgs::ParseOpen("t", json::array()).ok());
  EXPECT_TRUE(ProbeArgs::ParseOpen("t", nullptr).ok());
}

TEST(ProbeArgsTest, ActionSuggestsTheClosestSpelling) {
  StatusOr<ProbeArgs> args = ProbeArgs::ParseOpen("t", {{"action", "abrot"}});
  ASSERT_TRUE(args.ok());
  const Status status = args->Action().status();
  EXPECT_NE(status.message().find("argument 'action': 'abrot' is not one of 'abort', 'flag', "
                                  "'escalate' "
                                  "(did you mean 'abort'?)"),
            std::string::npos)
      << status.ToString();
}

}  // namespace
}  // namespace uc::probe
