// report/lang: placeholders, the PO reader, and the Korean catalogue compiled into the library.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "report/lang.h"
#include "util/error.h"

namespace blocklab {
namespace {

std::set<std::string> placeholders(const std::string& text) {
  std::set<std::string> out;
  static const std::regex re(R"(\{[0-9]+\})");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.insert(it->str());
  return out;
}

TEST(Lang, FormatFillsNumberedPlaceholdersInOnePass) {
  EXPECT_EQ(report::format_message("{1} blocks, seed {2}", {"24", "0"}), "24 blocks, seed 0");
  EXPECT_EQ(report::format_message("{2}스텝 뒤 마지막 {1}", {"0.01", "600"}), "600스텝 뒤 마지막 0.01");
  EXPECT_EQ(report::format_message("{1}{1}", {"ab"}), "abab");
  // A value holding a placeholder stays as it is; braces that are not placeholders are text.
  EXPECT_EQ(report::format_message("{1} and {2}", {"{2}", "x"}), "{2} and x");
  EXPECT_EQ(report::format_message("{Post-LN, Pre-LN} x {1} {} {x} {", {"2"}), "{Post-LN, Pre-LN} x 2 {} {x} {");
  EXPECT_THROW(report::format_message("{3}", {"a", "b"}), Error);
  EXPECT_THROW(report::format_message("{0}", {"a"}), Error);
}

TEST(Lang, ReadsPoFilesAsGettextDoes) {
  const std::string po = R"(# a comment
msgid ""
msgstr ""
"Language: ko\n"

#: src/x.cpp:1
msgid "one line"
msgstr "한 줄"

msgid ""
"wrapped "
"over lines with \"quotes\", a tab\t and\n"
msgstr "여러 줄"
"에 걸침"

#, fuzzy
msgid "fuzzy entry"
msgstr "흐릿함"

msgid "untranslated"
msgstr ""

msgctxt "verdict"
msgid "agrees"
msgstr "맞음"
msgid "no blank line before"
msgstr "빈 줄 없음"
)";
  const auto c = report::parse_po(po, "test.po");
  EXPECT_EQ(c.size(), 4u);
  EXPECT_EQ(c.at("one line"), "한 줄");
  EXPECT_EQ(c.at("wrapped over lines with \"quotes\", a tab\t and\n"), "여러 줄에 걸침");
  EXPECT_EQ(c.count("fuzzy entry"), 0u);   // gettext ignores fuzzy translations
  EXPECT_EQ(c.count("untranslated"), 0u);  // falls back to the English
  EXPECT_EQ(c.count(""), 0u);              // the header
  EXPECT_EQ(c.at(std::string("verdict") + '\x04' + "agrees"), "맞음");
  EXPECT_EQ(c.at("no blank line before"), "빈 줄 없음");

  for (const char* bad : {"msgstr \"x\"\n", "msgid \"a\"\nmsgstr \"b\\q\"\n", "\"orphan\"\n", "msgid \"a\"\nmsgid_plural \"as\"\n",
                          "msgid \"a\"\nmsgstr[0] \"b\"\n", "hello\n"}) {
    try {
      report::parse_po(bad, "bad.po");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.po:"), std::string::npos) << e.what();
    }
  }
}

TEST(Lang, TranslatesThroughTheKoreanCatalogueAndFallsBackToEnglish) {
  EXPECT_EQ(report::tr(report::Lang::En, "{1} s", {"5"}), "5 s");
  EXPECT_EQ(report::tr(report::Lang::Ko, "{1} s", {"5"}), "5초");
  EXPECT_EQ(report::tr(report::Lang::Ko, "Adam lr {1} (beta2 {2}), batch {3}, {4} steps", {"0.001", "0.98", "16", "600"}),
            "Adam 학습률 0.001 (beta2 0.98), 배치 16, 600스텝");
  EXPECT_EQ(report::trc(report::Lang::Ko, "verdict", "agrees"), "맞음");
  EXPECT_EQ(report::trc(report::Lang::En, "verdict", "agrees"), "agrees");
  EXPECT_EQ(report::trc(report::Lang::Ko, "placement", "Post-LN"), "뒤 정규화 (Post-LN)");
  EXPECT_EQ(report::trc(report::Lang::Ko, "placement", "DeepNorm"), "DeepNorm");  // untranslated: the English
  EXPECT_EQ(report::tr(report::Lang::Ko, "a sentence not in the catalogue {1}", {"x"}), "a sentence not in the catalogue x");
}

TEST(Lang, EveryKoreanEntryKeepsTheEnglishPlaceholders) {
  const auto& catalog = report::korean_catalog();
  ASSERT_GT(catalog.size(), 250u);
  for (const auto& [key, korean] : catalog) {
    const size_t ctx = key.find('\x04');
    const std::string english = ctx == std::string::npos ? key : key.substr(ctx + 1);
    EXPECT_EQ(placeholders(english), placeholders(korean)) << english << "\n" << korean;
    EXPECT_NE(english, korean) << "a Korean entry that only repeats the English";
  }
}

}  // namespace
}  // namespace blocklab
