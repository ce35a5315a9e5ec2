#include "bench/tessera_bench/sse.h"

#include <nlohmann/json.hpp>

namespace tessera::bench {

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // the LF of a CRLF: the line already ended
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = (c == '\r');
    if (c == '\n' || c == '\r') {
      Line(line_, &out);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
  return out;
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {  // dispatch
    if (has_data_) out->push_back({event_, data_});
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment / keep-alive
  std::string_view field = line, value;
  if (auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }  // id, retry and unknown fields do not matter here
}

namespace {

// Text carried by a choice: completions "text", chat "delta.content" (or
// "delta.reasoning_content", which is generated output too).
std::string ChoiceText(const nlohmann::json& choice) {
  std::string out;
  auto take = [&out](const nlohmann::json& obj, const char* key) {
    auto it = obj.find(key);
    if (it != obj.end() && it->is_string()) out += it->get<std::string>();
  };
  if (!choice.is_object()) return out;
  take(choice, "text");
  if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
    take(*d, "reasoning_content");
    take(*d, "content");
  }
  return out;
}

}  // namespace

void StreamAccumulator::OnEvent(const SseEvent& ev, double now) {
  if (ev.data == "[DONE]") {
    r_.done = true;
    return;
  }
  auto j = nlohmann::json::parse(ev.data, nullptr, /*allow_exceptions=*/false);
  if (ev.event == "error") {
    if (r_.error.empty()) r_.error = "error event: " + ev.data.substr(0, 500);
    return;
  }
  if (j.is_discarded() || !j.is_object()) {
    if (r_.error.empty()) r_.error = "stream chunk is not a JSON object: " + ev.data.substr(0, 200);
    return;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    if (r_.error.empty()) {
      std::string msg = e->is_object() && e->contains("message") && (*e)["message"].is_string()
                            ? (*e)["message"].get<std::string>()
                            : e->dump();
      r_.error = "error event: " + msg.substr(0, 500);
    }
    return;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    auto num = [&u](const char* k) -> int64_t {
      auto it = u->find(k);
      return it != u->end() && it->is_number_integer() ? it->get<int64_t>() : -1;
    };
    r_.usage_prompt_tokens = num("prompt_tokens");
    r_.usage_completion_tokens = num("completion_tokens");
  }
  std::string text;
  if (auto c = j.find("choices"); c != j.end() && c->is_array()) {
    for (const auto& choice : *c) text += ChoiceText(choice);
  }
  if (text.empty()) return;
  if (r_.first_content < 0) {
    r_.first_content = now;
  } else {
    r_.itl.push_back(now - r_.last_content);
  }
  r_.last_content = now;
  r_.content_chunks++;
  r_.text += text;
}

}  // namespace tessera::bench
