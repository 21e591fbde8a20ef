#include "text/tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "text/unicode.h"
#include "io/json_text.h"
#include "io/read_file.h"
#include "util/error.h"

namespace blocklab::text {

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Byte-level alphabet (GPT-2's bytes_to_unicode): printable bytes stand for themselves, the others
// are mapped to U+0100 + n in byte order.

struct ByteAlphabet {
  char32_t byte_to_char[256];
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  ByteAlphabet() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      char_to_byte[byte_to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Loading

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::is_directory(path, ec) ? path / "tokenizer.json" : path;
  if (!std::filesystem::exists(file, ec)) throw Error(file.string() + ": not found");
  return parse(io::read_file(file), file.string());
}

Tokenizer Tokenizer::parse(std::string_view text, const std::string& where) {
  const json j = io::parse_json_object(text, where);
  if (!j.contains("model") || !j["model"].is_object()) throw Error(where + ": missing \"model\" object");
  Tokenizer tk;
  tk.read_vocabulary(j, where);
  tk.read_merges(j["model"], where);
  tk.read_normalizer(j, where);
  tk.read_pre_tokenizer(j, where);
  tk.splitter_ = PreTokenizer(tk.pattern_);
  tk.read_post_processor(j, where);
  return tk;
}

// The model's type and options, model.vocab and added_tokens (the id tables), and every byte's symbol.
void Tokenizer::read_vocabulary(const json& j, const std::string& where) {
  const json& model = j["model"];
  const std::string model_type = type_of(model);
  if (model_type != "BPE" && !(model_type.empty() && model.contains("merges")))
    throw Error(where + ": model type \"" + model_type + "\" is not supported (only byte-level BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && !(model[key].is_string() && model[key].get<std::string>().empty()))
      throw Error(where + ": model." + key + " is not supported");
  }
  if (model.contains("byte_fallback") && model["byte_fallback"].is_boolean() && model["byte_fallback"].get<bool>())
    throw Error(where + ": model.byte_fallback is not supported (only byte-level BPE)");
  if (model.contains("ignore_merges") && model["ignore_merges"].is_boolean())
    ignore_merges_ = model["ignore_merges"].get<bool>();

  if (!model.contains("vocab") || !model["vocab"].is_object()) throw Error(where + ": missing model.vocab object");
  int64_t max_id = -1;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (int64_t{1} << 30))
      throw Error(where + ": model.vocab entry \"" + token + "\" has an invalid id");
    max_id = std::max(max_id, id.get<int64_t>());
    vocab_[token] = static_cast<int32_t>(id.get<int64_t>());
  }

  // --- added tokens
  std::vector<std::pair<std::string, int32_t>> added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) throw Error(where + ": \"added_tokens\" is not an array");
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string() || a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > (int64_t{1} << 30))
        throw Error(where + ": malformed entry in \"added_tokens\" (needs integer id and string content)");
      const std::string content = a["content"].get<std::string>();
      if (content.empty()) throw Error(where + ": empty content in \"added_tokens\"");
      added.emplace_back(content, static_cast<int32_t>(a["id"].get<int64_t>()));
      max_id = std::max(max_id, a["id"].get<int64_t>());
    }
  }
  if (max_id < 0) throw Error(where + ": empty vocabulary");
  id_to_token_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  is_added_.assign(id_to_token_.size(), false);
  for (const auto& [token, id] : vocab_) id_to_token_[id] = token;
  for (const auto& [content, id] : added) {
    id_to_token_[id] = content;
    is_added_[id] = true;
    added_.push_back({content, id});
  }
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });

  // --- byte symbols
  const ByteAlphabet& abc = alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(sym, abc.byte_to_char[b]);
    auto it = vocab_.find(sym);
    if (it == vocab_.end())
      throw Error(where + ": model.vocab lacks the byte-level token for byte " + std::to_string(b) +
                  " (not a byte-level BPE vocabulary)");
    byte_ids_[b] = it->second;
  }
}

// model.merges: "a b" strings or [a, b] pairs, in rank order.
void Tokenizer::read_merges(const json& model, const std::string& where) {
  if (!model.contains("merges") || !model["merges"].is_array()) throw Error(where + ": missing model.merges array");
  const json& merges = model["merges"];
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const json& m : merges) {
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size())
        throw Error(where + ": merge #" + std::to_string(rank) + " \"" + s + "\" is not \"left right\"");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      throw Error(where + ": merge #" + std::to_string(rank) + " is neither \"left right\" nor [left, right]");
    }
    auto l = vocab_.find(left), r = vocab_.find(right), res = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || res == vocab_.end())
      throw Error(where + ": merge #" + std::to_string(rank) + " (\"" + left + "\", \"" + right +
                  "\") uses a token that is not in model.vocab");
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) | static_cast<uint32_t>(r->second);
    merges_.emplace(key, Merge{rank, res->second});  // the first (lowest-rank) occurrence wins
    ++rank;
  }
}

// normalizer: none or NFC (alone or in a Sequence).
void Tokenizer::read_normalizer(const json& j, const std::string& where) {
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& n = j["normalizer"];
    const std::string t = type_of(n);
    if (t == "NFC") {
      nfc_ = true;
    } else if (t == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
      for (const json& part : n["normalizers"]) {
        if (type_of(part) != "NFC") throw Error(where + ": normalizer \"" + type_of(part) + "\" is not supported");
        nfc_ = true;
      }
    } else {
      throw Error(where + ": normalizer \"" + t + "\" is not supported (supported: none, NFC)");
    }
  }
}

// pre_tokenizer: ByteLevel with GPT-2's split, or a Split on one of the known regexes followed by ByteLevel.
void Tokenizer::read_pre_tokenizer(const json& j, const std::string& where) {
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
    throw Error(where + ": missing pre_tokenizer (a byte-level BPE tokenizer needs ByteLevel)");
  const json& pre = j["pre_tokenizer"];
  auto byte_level = [&](const json& p, bool& use_regex) {
    if (type_of(p) != "ByteLevel") return false;
    add_prefix_space_ = p.value("add_prefix_space", false);
    use_regex = p.value("use_regex", true);
    return true;
  };
  bool use_regex = true;
  if (byte_level(pre, use_regex)) {
    if (!use_regex) throw Error(where + ": ByteLevel pre_tokenizer without a split pattern is not supported");
    pattern_ = PreTokenizerPattern::GPT2;
  } else if (type_of(pre) == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
             pre["pretokenizers"].size() == 2) {
    const json& split = pre["pretokenizers"][0];
    if (type_of(split) != "Split" || !split.contains("pattern") || !split["pattern"].is_object() ||
        !split["pattern"].contains("Regex") || !split["pattern"]["Regex"].is_string())
      throw Error(where + ": pre_tokenizer Sequence must start with a Split on a regex");
    const std::string regex = split["pattern"]["Regex"].get<std::string>();
    if (!find_pattern(regex, pattern_))
      throw Error(where + ": pre-tokenizer regex is not one of the supported patterns (GPT-2, Qwen2, Llama 3): " + regex);
    if (split.value("behavior", std::string("Isolated")) != "Isolated" || split.value("invert", false))
      throw Error(where + ": Split pre-tokenizer must have behavior Isolated and invert false");
    bool inner_regex = false;
    if (!byte_level(pre["pretokenizers"][1], inner_regex) || inner_regex)
      throw Error(where + ": pre_tokenizer Sequence must end with ByteLevel (use_regex false)");
  } else {
    throw Error(where + ": pre_tokenizer \"" + type_of(pre) + "\" is not supported (byte-level BPE only)");
  }
}

// post_processor: the special tokens a TemplateProcessing puts around a single sequence.
void Tokenizer::read_post_processor(const json& j, const std::string& where) {
  if (j.contains("post_processor") && !j["post_processor"].is_null()) {
    std::vector<const json*> parts;
    const json& pp = j["post_processor"];
    if (type_of(pp) == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
      for (const json& p : pp["processors"]) parts.push_back(&p);
    } else {
      parts.push_back(&pp);
    }
    for (const json* p : parts) {
      const std::string t = type_of(*p);
      if (t == "ByteLevel") continue;
      if (t != "TemplateProcessing") throw Error(where + ": post_processor \"" + t + "\" is not supported");
      if (!p->contains("single") || !(*p)["single"].is_array())
        throw Error(where + ": TemplateProcessing without a \"single\" template");
      bool after = false;
      for (const json& item : (*p)["single"]) {
        if (item.contains("Sequence")) {
          after = true;
          continue;
        }
        if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
            !item["SpecialToken"]["id"].is_string())
          throw Error(where + ": malformed TemplateProcessing item");
        const std::string name = item["SpecialToken"]["id"].get<std::string>();
        std::vector<int32_t> ids;
        const json* specials = p->contains("special_tokens") ? &(*p)["special_tokens"] : nullptr;
        if (specials != nullptr && specials->contains(name) && (*specials)[name].contains("ids") &&
            (*specials)[name]["ids"].is_array()) {
          for (const json& id : (*specials)[name]["ids"]) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size())
              throw Error(where + ": TemplateProcessing special token \"" + name + "\" has an invalid id");
            ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
          }
        } else {
          throw Error(where + ": TemplateProcessing special token \"" + name + "\" is not defined");
        }
        auto& dst = after ? suffix_ids_ : prefix_ids_;
        dst.insert(dst.end(), ids.begin(), ids.end());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Encoding

void Tokenizer::bpe(std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  struct Symbol {
    int32_t id;
    int prev, next;
  };
  std::vector<Symbol> sym(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left, right, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const int32_t l = sym[pos].id, r = sym[sym[pos].next].id;
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r));
    if (it != merges_.end()) heap.push({it->second.rank, pos, l, r, it->second.result});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  // Lowest rank first, leftmost among equal ranks; a candidate is stale when either side has changed.
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[c.pos];
    if (s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;
    const int gone = s.next;
    s.id = c.result;
    s.next = sym[gone].next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    sym[gone].id = -1;
    push(s.prev);
    push(c.pos);
  }
  ids.clear();
  for (int i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

void Tokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized = nfc_ ? nfc(text) : std::string(text);
  if (add_prefix_space_ && !normalized.empty() && normalized[0] != ' ') normalized.insert(0, 1, ' ');
  const ByteAlphabet& abc = alphabet();
  std::vector<int32_t> piece;
  std::string symbols;
  for (const auto& [b, e] : splitter_.split(normalized)) {
    const std::string_view bytes = std::string_view(normalized).substr(b, e - b);
    if (ignore_merges_) {
      symbols.clear();
      for (unsigned char c : bytes) append_utf8(symbols, abc.byte_to_char[c]);
      auto it = vocab_.find(symbols);
      if (it != vocab_.end()) {
        out.push_back(it->second);
        continue;
      }
    }
    piece.clear();
    for (unsigned char c : bytes) piece.push_back(byte_ids_[c]);
    bpe(piece);
    out.insert(out.end(), piece.begin(), piece.end());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  check_utf8(text, "text");
  std::vector<int32_t> out;
  if (add_special_tokens) out = prefix_ids_;
  // Added tokens are matched in the raw text first (leftmost, then longest), as Hugging Face does.
  std::size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : added_)
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > start) encode_segment(text.substr(start, i - start), out);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (start < text.size()) encode_segment(text.substr(start), out);
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || id_to_token_[id].empty())
    throw Error("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary");
  const std::string& tok = id_to_token_[id];
  if (is_added_[id]) return tok;
  std::string out;
  const ByteAlphabet& abc = alphabet();
  for (char32_t c : decode_utf8(tok, "vocabulary token")) {
    auto it = abc.char_to_byte.find(c);
    if (it == abc.char_to_byte.end()) return tok;  // not a byte-level symbol: show as written
    out += static_cast<char>(it->second);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace blocklab::text
