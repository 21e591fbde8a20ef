#pragma once
// The one parser of integer lists on command lines and in config values: "0,1,2", "1, 2, 3".
#include <cstdint>
#include <string>
#include <vector>

namespace blocklab {

// Comma-separated integers >= min (spaces and tabs around an item are allowed). Throws Error, naming `what`
// (the flag or key) and the offending item, for an empty list, an empty item, text that is not an integer,
// or a value below min or beyond the type.
template <typename Int>
std::vector<Int> parse_list(const std::string& text, const std::string& what, Int min);

extern template std::vector<int> parse_list(const std::string&, const std::string&, int);  // int32_t ids too
extern template std::vector<uint64_t> parse_list(const std::string&, const std::string&, uint64_t);

}  // namespace blocklab
