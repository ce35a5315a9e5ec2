#include "text/incremental_detokenizer.h"

#include <algorithm>
#include <span>

#include "text/utf8.h"

namespace tessera::text {
namespace {

constexpr std::string_view kFffd = "\xEF\xBF\xBD";

// Suffixes (after a space) that clean_up_tokenization may still rewrite.
bool IsCleanupPrefix(std::string_view tail) {
  static const std::string_view kPatterns[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
  for (std::string_view p : kPatterns) {
    if (tail.size() < p.size() && p.substr(0, tail.size()) == tail) return true;
  }
  return false;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, DetokenizerOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  options_.decode.clean_up = false;  // applied incrementally by CleanUp()
  options_.stop.erase(std::remove(options_.stop.begin(), options_.stop.end(), std::string()), options_.stop.end());
}

std::string IncrementalDetokenizer::DecodeWindow(size_t begin, size_t end) const {
  auto text = tokenizer_->Decode(std::span<const int32_t>(ids_.data() + begin, end - begin), options_.decode);
  return text.ok() ? std::move(text).value() : std::string();
}

size_t IncrementalDetokenizer::StableEnd(const std::string& text, size_t from, bool final) const {
  if (final) return text.size();
  size_t end = text.size();
  // A trailing U+FFFD may be an incomplete character that later bytes fix.
  while (end >= from + kFffd.size() && std::string_view(text).substr(end - kFffd.size(), kFffd.size()) == kFffd) {
    end -= kFffd.size();
  }
  return std::max(end, from);
}

StatusOr<std::string> IncrementalDetokenizer::Step(int32_t id) {
  if (stopped_) return std::string();
  if (tokenizer_->IdToToken(id) == nullptr) {
    return OutOfRange("token id " + std::to_string(id) + " is not in the vocabulary");
  }
  ids_.push_back(id);
  const std::string window = DecodeWindow(prefix_offset_, ids_.size());
  const size_t end = StableEnd(window, emitted_in_window_, /*final=*/false);
  std::string fresh;
  if (end > emitted_in_window_) fresh = window.substr(emitted_in_window_, end - emitted_in_window_);
  emitted_in_window_ = std::max(end, emitted_in_window_);
  if (emitted_in_window_ == window.size() && !window.empty()) {
    // Everything in the window is out: restart it after the previous read
    // point so one token of context stays (Strip/Metaspace look at the start).
    const std::string context = DecodeWindow(read_offset_, ids_.size());
    if (read_offset_ > prefix_offset_ && !context.empty() && window.size() >= context.size() &&
        window.compare(window.size() - context.size(), context.size(), context) == 0) {
      prefix_offset_ = read_offset_;
      emitted_in_window_ = context.size();
    }
    read_offset_ = ids_.size();
  }
  return Release(CleanUp(std::move(fresh), /*final=*/false), /*final=*/false);
}

std::string IncrementalDetokenizer::Finish() {
  if (stopped_) return std::string();
  const std::string window = DecodeWindow(prefix_offset_, ids_.size());
  std::string fresh;
  if (window.size() > emitted_in_window_) fresh = window.substr(emitted_in_window_);
  emitted_in_window_ = window.size();
  return Release(CleanUp(std::move(fresh), /*final=*/true), /*final=*/true);
}

std::string IncrementalDetokenizer::CleanUp(std::string raw, bool final) {
  if (!tokenizer_->clean_up_tokenization_spaces()) return raw;
  raw_pending_ += raw;
  // Cut before the last space while the tail from it could still be (the
  // start of) a clean-up pattern; every pattern starts with a space, so no
  // rewrite can then straddle the cut.
  size_t k = raw_pending_.size();
  while (!final && k > 0) {
    const size_t space = raw_pending_.rfind(' ', k - 1);
    if (space == std::string::npos) break;
    if (space + 1 == k || IsCleanupPrefix(std::string_view(raw_pending_).substr(space, k - space))) {
      k = space;
      continue;
    }
    break;
  }
  std::string out = CleanUpTokenization(std::string_view(raw_pending_).substr(0, k));
  raw_pending_.erase(0, k);
  return out;
}

std::string IncrementalDetokenizer::Release(std::string stable, bool final) {
  held_ += stable;
  if (options_.stop.empty()) return std::exchange(held_, std::string());
  // The stop string that completes first: earliest end, then earliest start.
  size_t best_end = std::string::npos, best_start = 0;
  for (const std::string& s : options_.stop) {
    const size_t pos = held_.find(s);
    if (pos == std::string::npos) continue;
    const size_t e = pos + s.size();
    if (e < best_end || (e == best_end && pos < best_start)) {
      best_end = e;
      best_start = pos;
      matched_stop_ = s;
    }
  }
  if (best_end != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best_start);
    held_.clear();
    return out;
  }
  if (final) return std::exchange(held_, std::string());
  // Withhold the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : options_.stop) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  // Never split a UTF-8 sequence when releasing.
  size_t cut = held_.size() - keep;
  cut = CompleteUtf8Prefix(std::string_view(held_).substr(0, cut));
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

}  // namespace tessera::text
