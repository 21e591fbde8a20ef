// util/parse_list: the one integer-list parser of flags and config values.
#include <gtest/gtest.h>

#include "util/error.h"
#include "util/parse_list.h"

namespace blocklab {
namespace {

std::string error_of(const std::string& text, int min = 0) {
  try {
    parse_list<int>(text, "--depths", min);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParseList, ReadsCommaSeparatedIntegersWithSpacesAroundItems) {
  EXPECT_EQ(parse_list<int>("6,12, 24 ,\t48", "--depths", 1), (std::vector<int>{6, 12, 24, 48}));
  EXPECT_EQ(parse_list<int>("0", "--tokens", 0), (std::vector<int>{0}));
  EXPECT_EQ(parse_list<uint64_t>("0,18446744073709551615", "--seeds", 0),
            (std::vector<uint64_t>{0, 18446744073709551615ull}));
}

TEST(ParseList, NamesTheFlagAndTheBadItem) {
  EXPECT_EQ(error_of(""), "--depths: the list is empty");
  EXPECT_EQ(error_of("  "), "--depths: the list is empty");
  EXPECT_EQ(error_of("1,,2"), "--depths: empty item in \"1,,2\" (expected e.g. 1,2,3)");
  EXPECT_EQ(error_of("1,"), "--depths: empty item in \"1,\" (expected e.g. 1,2,3)");
  EXPECT_EQ(error_of("1,x"), "--depths: \"x\" is not an integer >= 0 (expected e.g. 1,2,3)");
  EXPECT_EQ(error_of("1.5"), "--depths: \"1.5\" is not an integer >= 0 (expected e.g. 1,2,3)");
  EXPECT_EQ(error_of("2 3"), "--depths: \"2 3\" is not an integer >= 0 (expected e.g. 1,2,3)");
  EXPECT_EQ(error_of("-1"), "--depths: \"-1\" is not an integer >= 0 (expected e.g. 1,2,3)");
  EXPECT_EQ(error_of("0", 1), "--depths: \"0\" is not an integer >= 1 (expected e.g. 1,2,3)");
  EXPECT_EQ(error_of("99999999999"), "--depths: \"99999999999\" is not an integer >= 0 that fits (expected e.g. 1,2,3)");
  EXPECT_THROW(parse_list<uint64_t>("-1", "--seeds", 0), Error);
}

}  // namespace
}  // namespace blocklab
