// `tessera serve --record DIR` (docs/architecture.md, "Record and replay"): a
// bounded, rotating log of what the server answered, one JSON line per finished
// response, for `tessera replay DIR` to re-run offline.
//
// Layout of DIR: `serve.toml` (the settings the operator gave, secrets left
// out; written by the serve command, read by replay as its --config), and
// `requests-NNNNNN.jsonl`, rotated when one passes `file_bytes`; the oldest
// files are deleted while the total passes `max_bytes`, so the newest records
// are kept. A restarted server continues the numbering.
//
// Thread-safety: Append may be called from any thread; it never blocks on
// disk (a bounded queue feeds one writer thread; a full queue drops the record
// and counts it). The destructor writes what is queued and joins the writer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tessera::record {

struct RequestLogOptions {
  std::string dir;
  uint64_t max_bytes = 256ull << 20;  // all request files together
  uint64_t file_bytes = 0;            // one file; 0: max_bytes / 8 (at least 4 KiB)
  size_t max_queued = 4096;           // records waiting for the writer
};

struct RequestLogCounters {
  int64_t records = 0;        // written
  int64_t dropped = 0;        // queue full, or a write failed
  int64_t files_deleted = 0;  // rotated out by max_bytes
};

class RequestLog {
 public:
  // Creates DIR if needed; INVALID_ARGUMENT / INTERNAL naming --record.
  static StatusOr<std::unique_ptr<RequestLog>> Open(RequestLogOptions options);
  ~RequestLog();
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  // One record: a complete JSON object, without the newline.
  void Append(std::string line);
  // Nanoseconds of the steady clock since Open: the records' arrival times.
  int64_t SinceOpenNs(std::chrono::steady_clock::time_point t) const;
  RequestLogCounters counters() const;
  const std::string& dir() const { return options_.dir; }

  // The request files of `dir` in record order (by number).
  static std::vector<std::filesystem::path> RequestFiles(const std::string& dir);

 private:
  explicit RequestLog(RequestLogOptions options);
  void Run();
  void Write(const std::string& line);
  void OpenNext();
  void Trim();

  const RequestLogOptions options_;
  const std::chrono::steady_clock::time_point opened_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;  // guarded by mu_
  bool stop_ = false;              // guarded by mu_
  std::atomic<int64_t> records_{0}, dropped_{0}, files_deleted_{0};
  // Writer-thread state.
  int64_t next_number_ = 1;
  std::FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  std::thread writer_;
};

}  // namespace tessera::record
