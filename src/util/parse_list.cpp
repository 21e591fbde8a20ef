#include "util/parse_list.h"

#include <charconv>

#include "util/error.h"

namespace blocklab {

template <typename Int>
std::vector<Int> parse_list(const std::string& text, const std::string& what, Int min) {
  if (text.find_first_not_of(" \t") == std::string::npos) throw Error(what + ": the list is empty");
  std::vector<Int> values;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) throw Error(what + ": empty item in \"" + text + "\" (expected e.g. 1,2,3)");
    Int v{};
    const char* end = item.data() + item.size();
    const auto [ptr, ec] = std::from_chars(item.data(), end, v);
    if (ec != std::errc() || ptr != end || v < min)
      throw Error(what + ": \"" + item + "\" is not an integer >= " + std::to_string(min) +
                  (ec == std::errc::result_out_of_range ? " that fits" : "") + " (expected e.g. 1,2,3)");
    values.push_back(v);
    if (comma == std::string::npos) return values;
    start = comma + 1;
  }
}

template std::vector<int> parse_list(const std::string&, const std::string&, int);
template std::vector<uint64_t> parse_list(const std::string&, const std::string&, uint64_t);

}  // namespace blocklab
