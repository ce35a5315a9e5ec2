#include "server/record/request_log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "common/log.h"

namespace tessera::record {
namespace fs = std::filesystem;

namespace {

// requests-NNNNNN.jsonl -> NNNNNN; 0 for any other name.
int64_t FileNumber(const fs::path& p) {
  const std::string name = p.filename().string();
  constexpr std::string_view kPrefix = "requests-", kSuffix = ".jsonl";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return 0;
  }
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > 12 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return 0;
  return std::stoll(digits);
}

}  // namespace

std::vector<fs::path> RequestLog::RequestFiles(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> numbered;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (const int64_t n = FileNumber(e.path()); n > 0 && e.is_regular_file(ec)) numbered.emplace_back(n, e.path());
  }
  std::sort(numbered.begin(), numbered.end());
  std::vector<fs::path> out;
  for (auto& [n, p] : numbered) out.push_back(std::move(p));
  return out;
}

StatusOr<std::unique_ptr<RequestLog>> RequestLog::Open(RequestLogOptions options) {
  if (options.dir.empty()) return InvalidArgument("--record: a directory is required");
  if (options.max_bytes < 4096) return InvalidArgument("--record-max-mb: must allow at least 4 KiB");
  if (options.file_bytes == 0) options.file_bytes = std::max<uint64_t>(options.max_bytes / 8, 4096);
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec || !fs::is_directory(options.dir)) {
    return InvalidArgument("--record " + options.dir + ": cannot create the directory: " + ec.message());
  }
  std::unique_ptr<RequestLog> log(new RequestLog(std::move(options)));
  const std::vector<fs::path> existing = RequestFiles(log->options_.dir);
  if (!existing.empty()) log->next_number_ = FileNumber(existing.back()) + 1;
  log->writer_ = std::thread([l = log.get()] { l->Run(); });
  return log;
}

RequestLog::RequestLog(RequestLogOptions options)
    : options_(std::move(options)), opened_(std::chrono::steady_clock::now()) {}

RequestLog::~RequestLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (file_ != nullptr) std::fclose(file_);
}

void RequestLog::Append(std::string line) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queued) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(line));
  }
  cv_.notify_one();
}

int64_t RequestLog::SinceOpenNs(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - opened_).count();
}

RequestLogCounters RequestLog::counters() const {
  return {records_.load(), dropped_.load(), files_deleted_.load()};
}

void RequestLog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    std::deque<std::string> batch;
    batch.swap(queue_);
    lock.unlock();
    for (const std::string& line : batch) Write(line);
    if (file_ != nullptr) std::fflush(file_);
    lock.lock();
  }
}

void RequestLog::OpenNext() {
  if (file_ != nullptr) std::fclose(file_);
  char name[40];
  std::snprintf(name, sizeof(name), "requests-%06lld.jsonl", static_cast<long long>(next_number_++));
  const fs::path path = fs::path(options_.dir) / name;
  // 0600: the records hold clients' prompts and outputs.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  file_ = fd < 0 ? nullptr : ::fdopen(fd, "wb");
  if (fd >= 0 && file_ == nullptr) ::close(fd);
  file_size_ = 0;
  if (file_ == nullptr) LogError("serve --record: cannot open {}: {}", path.string(), std::strerror(errno));
}

void RequestLog::Write(const std::string& line) {
  if (file_ == nullptr || file_size_ + line.size() + 1 > options_.file_bytes) {
    // A record larger than a whole file still gets a file of its own.
    if (file_ == nullptr || file_size_ > 0) {
      OpenNext();
      Trim();
    }
  }
  if (file_ == nullptr || std::fwrite(line.data(), 1, line.size(), file_) != line.size() ||
      std::fputc('\n', file_) == EOF) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  file_size_ += line.size() + 1;
  records_.fetch_add(1, std::memory_order_relaxed);
}

// Deletes the oldest files (never the one being written) while the total
// passes max_bytes, counting the open file at its bound.
void RequestLog::Trim() {
  std::vector<fs::path> files = RequestFiles(options_.dir);
  if (files.empty()) return;
  files.pop_back();  // the file just opened
  std::error_code ec;
  uint64_t total = options_.file_bytes;
  std::vector<uint64_t> sizes;
  for (const fs::path& p : files) {
    const uint64_t s = fs::file_size(p, ec);
    sizes.push_back(ec ? 0 : s);
    total += sizes.back();
  }
  for (size_t i = 0; i < files.size() && total > options_.max_bytes; ++i) {
    if (fs::remove(files[i], ec)) files_deleted_.fetch_add(1, std::memory_order_relaxed);
    total -= sizes[i];
  }
}

}  // namespace tessera::record
