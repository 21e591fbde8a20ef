#pragma once
// The language of a report and of its figures: English, or Korean (the language of the source text).
// Both wordings sit side by side where the text is made, tr(lang, "English", "한국어"), so a reader of
// either sees at once what the other says. Korean follows the source's own terms: 층 정규화 (LayerNorm),
// 뒤 정규화 / 앞 정규화 (Post-LN / Pre-LN), 잔차 줄기 (residual stream), 워밍업 (warm-up), 베끼기 태스크
// (copy task), 그래디언트 크기 (gradient norm), 블록 N벌 (N blocks). Identifiers a reader types or greps
// (outcome labels such as `learned`, config keys, file names) stay as they are in both languages.
#include <string>

namespace blocklab::io {

enum class Lang { En, Ko };

// "en" or "ko"; anything else throws Error naming the choices.
Lang parse_lang(const std::string& text);
std::string to_string(Lang lang);

inline std::string tr(Lang lang, std::string en, std::string ko) { return lang == Lang::Ko ? std::move(ko) : std::move(en); }

}  // namespace blocklab::io
