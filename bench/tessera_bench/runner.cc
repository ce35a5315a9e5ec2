#include "bench/tessera_bench/runner.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/tessera_bench/sse.h"

namespace tessera::bench {

namespace {

constexpr const char* kMaxDurationReason = "cancelled: --max-duration reached";

double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::vector<std::pair<std::string, std::string>> Headers(const std::string& api_key) {
  std::vector<std::pair<std::string, std::string>> h = {{"Content-Type", "application/json"},
                                                        {"Accept", "text/event-stream"}};
  if (!api_key.empty()) h.emplace_back("Authorization", "Bearer " + api_key);
  return h;
}

// Sends one request and measures it; `start` is the run's time zero.
RequestRecord Execute(const RunConfig& cfg, const RequestSpec& spec, Clock::time_point start,
                      CancelSlot* slot) {
  RequestRecord rec;
  rec.sent = true;
  rec.expected_output_tokens = spec.max_tokens;
  HttpRequest req;
  req.method = "POST";
  req.target = cfg.path;
  req.body = BuildRequestBody(cfg, spec);
  req.headers = Headers(cfg.api_key);
  SseParser parser;
  StreamAccumulator acc;
  const Clock::time_point t0 = Clock::now();
  rec.send_time = Secs(t0 - start);
  auto sink = [&](std::string_view bytes, Clock::time_point at) {
    for (const auto& ev : parser.Feed(bytes)) acc.OnEvent(ev, Secs(at - t0));
  };
  auto resp = SendHttp(cfg.base, req, sink, slot);
  const double end = Secs(Clock::now() - t0);
  rec.e2e = end;
  if (!resp.ok()) {
    rec.cancelled = resp.status().code() == StatusCode::kCancelled && resp.status().message() == kMaxDurationReason;
    rec.error = resp.status().message();
    return rec;
  }
  rec.http_status = resp->status;
  if (resp->status != 200) {
    std::string body = resp->body.substr(0, 300);
    rec.error = "HTTP " + std::to_string(resp->status) + ": " + body;
    return rec;
  }
  const StreamResult& r = acc.result();
  if (!r.error.empty()) {
    rec.error = r.error;
    return rec;
  }
  if (!r.done) {
    rec.error = "stream ended without data: [DONE]";
    return rec;
  }
  rec.ok = true;
  rec.ttft = r.first_content >= 0 ? r.first_content : end;
  rec.itl = r.itl;
  rec.usage_reported = r.usage_completion_tokens >= 0;
  rec.output_tokens = rec.usage_reported ? r.usage_completion_tokens : r.content_chunks;
  rec.prompt_tokens = r.usage_prompt_tokens >= 0 ? r.usage_prompt_tokens : spec.prompt_tokens;
  return rec;
}

std::string FormatElapsed(double s) {
  char buf[32];
  const int t = static_cast<int>(s);
  std::snprintf(buf, sizeof buf, "%02d:%02d", t / 60, t % 60);
  return buf;
}

}  // namespace

Status ValidateExtraBody(const std::string& extra) {
  if (extra.empty()) return Status::Ok();
  auto j = nlohmann::json::parse(extra, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("--extra-body must be a JSON object");
  return Status::Ok();
}

std::string BuildRequestBody(const RunConfig& cfg, const RequestSpec& spec) {
  nlohmann::json b;
  if (!cfg.model.empty()) b["model"] = cfg.model;
  if (cfg.chat) {
    auto msgs = nlohmann::json::array();
    if (!spec.system.empty()) msgs.push_back({{"role", "system"}, {"content", spec.system}});
    for (size_t i = 0; i < spec.history.size(); ++i) {
      msgs.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", spec.history[i]}});
    }
    msgs.push_back({{"role", "user"}, {"content", spec.prompt}});
    b["messages"] = std::move(msgs);
  } else {
    std::string text = spec.system;
    for (const std::string& h : spec.history) text += (text.empty() ? "" : " ") + h;
    b["prompt"] = text.empty() ? spec.prompt : text + " " + spec.prompt;
  }
  b["max_tokens"] = spec.max_tokens;
  b["temperature"] = cfg.temperature;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  if (cfg.ignore_eos) b["ignore_eos"] = true;
  if (!cfg.extra_body.empty()) {
    auto extra = nlohmann::json::parse(cfg.extra_body, nullptr, false);
    if (extra.is_object()) b.update(extra);
  }
  return b.dump();
}

RunOutput RunBenchmark(const RunConfig& cfg, const std::vector<RequestSpec>& specs,
                       const std::vector<double>& offsets) {
  RunOutput out;
  out.records.resize(specs.size());
  const size_t n = specs.size();
  const size_t max_workers = std::min<size_t>(
      cfg.max_concurrency > 0 ? static_cast<size_t>(cfg.max_concurrency) : kMaxWorkers, std::max<size_t>(n, 1));

  struct Active {
    std::shared_ptr<CancelSlot> slot;
    Clock::time_point deadline;
  };
  std::mutex mu;
  std::condition_variable cv;            // queue, stop and finished changes
  std::deque<size_t> queue;              // released, waiting for a worker
  std::vector<std::unique_ptr<Active>> active;  // in flight (guarded by mu)
  bool dispatch_done = false, stop = false;
  size_t idle = 0, in_flight = 0, finished = 0, sent = 0;
  int peak = 0;
  std::vector<std::thread> workers;

  const Clock::time_point start = Clock::now();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.timeout_s));

  auto worker = [&] {
    std::unique_lock lock(mu);
    for (;;) {
      idle++;
      cv.wait(lock, [&] { return !queue.empty() || dispatch_done; });
      idle--;
      if (queue.empty()) return;
      const size_t i = queue.front();
      queue.pop_front();
      if (stop) continue;  // released but never sent: stays `sent = false`
      auto act = std::make_unique<Active>();
      act->slot = std::make_shared<CancelSlot>();
      act->deadline = Clock::now() + timeout;
      Active* mine = act.get();
      active.push_back(std::move(act));
      in_flight++;
      sent++;
      peak = std::max(peak, static_cast<int>(in_flight));
      std::shared_ptr<CancelSlot> slot = mine->slot;
      lock.unlock();
      RequestRecord rec = Execute(cfg, specs[i], start, slot.get());
      lock.lock();
      out.records[i] = std::move(rec);
      active.erase(std::find_if(active.begin(), active.end(), [&](const auto& a) { return a.get() == mine; }));
      in_flight--;
      finished++;
      cv.notify_all();
    }
  };

  // Watchdog: timeouts, --max-duration, progress.
  std::thread watchdog([&] {
    const bool tty_bar = cfg.progress == ProgressMode::kBar;
    Clock::time_point last_line = start;
    std::unique_lock lock(mu);
    for (;;) {
      const bool all_done = dispatch_done && finished == sent && queue.empty();
      const auto now = Clock::now();
      const double elapsed = Secs(now - start);
      for (auto& a : active) {
        if (now >= a->deadline && !a->slot->cancelled()) {
          char msg[96];
          std::snprintf(msg, sizeof msg, "timeout: no complete response within %g s (--timeout)", cfg.timeout_s);
          a->slot->Cancel(msg);
        }
      }
      if (cfg.max_duration_s > 0 && elapsed >= cfg.max_duration_s && !stop) {
        stop = true;
        for (auto& a : active) a->slot->Cancel(kMaxDurationReason);
        cv.notify_all();
      }
      const double rate = elapsed > 0 ? static_cast<double>(finished) / elapsed : 0.0;
      if (tty_bar) {
        constexpr int kWidth = 30;
        const int fill = n ? static_cast<int>(kWidth * finished / n) : kWidth;
        std::fprintf(stderr, "\r%s [%.*s%*s] %zu/%zu done, %zu in flight, %.2f req/s, %s ",
                     cfg.label.c_str(), fill, "##############################", kWidth - fill, "", finished, n,
                     in_flight, rate, FormatElapsed(elapsed).c_str());
        if (all_done) std::fprintf(stderr, "\n");
        std::fflush(stderr);
      } else if (cfg.progress == ProgressMode::kLines && (now - last_line > std::chrono::seconds(10) || all_done)) {
        if (all_done || finished > 0 || now - start > std::chrono::seconds(10)) {
          std::fprintf(stderr, "%s%s%zu/%zu done, %zu in flight, %.2f req/s, %s elapsed\n", cfg.label.c_str(),
                       cfg.label.empty() ? "" : ": ", finished, n, in_flight, rate, FormatElapsed(elapsed).c_str());
        }
        last_line = now;
      }
      if (all_done) return;
      cv.wait_for(lock, std::chrono::milliseconds(tty_bar ? 100 : 50));
    }
  });

  // Dispatch.
  {
    std::unique_lock lock(mu);
    for (size_t i = 0; i < n; ++i) {
      const auto when = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(i < offsets.size() ? offsets[i] : 0.0));
      cv.wait_until(lock, when, [&] { return stop; });
      // Also wait here (not in the queue) while all workers are busy, so a
      // --max-duration stop leaves unsent requests unsent.
      if (workers.size() >= max_workers) cv.wait(lock, [&] { return stop || idle > queue.size(); });
      if (stop) break;
      queue.push_back(i);
      if (idle < queue.size() && workers.size() < max_workers) workers.emplace_back(worker);
      cv.notify_all();
    }
    dispatch_done = true;
    cv.notify_all();
  }
  for (auto& w : workers) w.join();
  out.duration_s = Secs(Clock::now() - start);
  {
    std::lock_guard lock(mu);
    cv.notify_all();
  }
  watchdog.join();
  out.peak_in_flight = peak;
  return out;
}

StatusOr<std::string> FirstModelId(const BaseUrl& base, const std::string& api_key) {
  HttpRequest req;
  req.target = base.prefix + "/v1/models";
  if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
  // Bounded: a server that accepts but never answers fails after 30 s.
  CancelSlot slot;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread timer([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; })) {
      slot.Cancel("timeout: no answer within 30 s");
    }
  });
  auto resp = SendHttp(base, req, nullptr, &slot);
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  timer.join();
  if (!resp.ok()) return resp.status();
  if (resp->status != 200) {
    return Status(StatusCode::kUnavailable,
                  "GET " + req.target + ": HTTP " + std::to_string(resp->status) + ": " + resp->body.substr(0, 300));
  }
  auto j = nlohmann::json::parse(resp->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
    return j["data"][0]["id"].get<std::string>();
  }
  return Status(StatusCode::kUnavailable, "GET " + req.target + ": no model id in the response (pass --model)");
}

}  // namespace tessera::bench
