// Server-sent events and the OpenAI streaming chunks they carry.
//
// SseParser turns a byte stream, split anywhere across reads, into events
// (WHATWG rules: "field: value" lines, blank line ends an event, ':' comments,
// LF / CRLF / CR line ends, several data lines joined with '\n').
// StreamAccumulator reads the OpenAI chunks of one request (completions or
// chat) and keeps what the metrics need: when content arrived, the server's
// usage, errors, [DONE]. Neither is thread-safe; each request owns its own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::bench {

struct SseEvent {
  std::string event;  // "" unless an "event:" field was given
  std::string data;
};

class SseParser {
 public:
  // Appends bytes; returns the events completed by them (possibly none).
  std::vector<SseEvent> Feed(std::string_view bytes);
  // Whether bytes of an unfinished event are buffered.
  bool HasPartial() const { return !line_.empty() || has_data_ || !event_.empty(); }

 private:
  void Line(std::string_view line, std::vector<SseEvent>* out);
  std::string line_;
  std::string event_;
  std::string data_;
  bool has_data_ = false;
  bool last_was_cr_ = false;
};

// What one streamed request produced. Times are seconds on the caller's clock.
struct StreamResult {
  bool done = false;            // saw data: [DONE]
  std::string error;            // first error event / error object / bad JSON
  int64_t content_chunks = 0;   // chunks carrying non-empty text/content
  double first_content = -1;    // time of the first content chunk (-1: none)
  double last_content = -1;
  std::vector<double> itl;      // gaps between consecutive content chunks
  int64_t usage_prompt_tokens = -1;      // from the usage object, -1 if absent
  int64_t usage_completion_tokens = -1;
  std::string text;             // generated text (concatenated)
};

class StreamAccumulator {
 public:
  // Feeds one event received at time `now`.
  void OnEvent(const SseEvent& ev, double now);
  const StreamResult& result() const { return r_; }

 private:
  StreamResult r_;
};

}  // namespace tessera::bench
