#include "server/kv_events/kv_event_subscriber.h"
#include "common/log.h"

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <iterator>
#include <map>
#include <optional>

#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace tessera::kv_events {
namespace {

int64_t ReadSeq(const zmq::message_t& m) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<const unsigned char*>(m.data())[i];
  return static_cast<int64_t>(v);
}

std::string SeqBytes(int64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(seq) >> (8 * (7 - i))) & 0xff);
  return out;
}

}  // namespace

struct KvEventSubscriber::Impl {
  struct Source {
    KvEventSource config;
    std::unique_ptr<zmq::socket_t> sub;
    int64_t last_seq = -1;   // last applied (live or replayed); -1: none
    int64_t last_live = -1;  // last received on the SUB socket; -1: none
    // Catch-up: until the first live message, the subscription may not have
    // reached the publisher yet ("slow joiner"), and a batch published in
    // that window is lost without a later one to reveal the gap. The buffer
    // is replayed again at growing intervals (50 ms .. 3.2 s, ~6 s in all).
    int catchup_ms = 0;  // 0: done
    std::chrono::steady_clock::time_point next_catchup;
  };

  KvEventSubscriberOptions options;
  KvPrefixIndex* index = nullptr;
  zmq::context_t ctx{1};
  std::map<std::string, Source> sources;  // the thread's

  std::mutex mu;
  std::vector<KvEventSource> to_add;       // guarded by mu
  std::vector<std::string> to_remove;      // guarded by mu
  bool stop = false;                       // guarded by mu
  KvEventSubscriberStats stats;            // guarded by mu
  std::thread thread;

  void Count(int64_t KvEventSubscriberStats::*field) {
    std::lock_guard<std::mutex> lock(mu);
    ++(stats.*field);
  }

  void ApplyPayload(const std::string& instance, const zmq::message_t& payload) {
    StatusOr<EventBatch> batch = DecodeEventBatch(payload.to_string_view());
    if (!batch.ok()) {
      Count(&KvEventSubscriberStats::decode_errors);
      LogWarn("KV events from {}: {}", instance, batch.status().ToString());
      return;
    }
    index->Apply(instance, *batch);
    Count(&KvEventSubscriberStats::batches_applied);
  }

  // Applies the buffered batches with last_seq < seq < before from the
  // instance's replay socket. False when it has none or does not answer.
  bool Replay(Source& src, int64_t before) {
    if (src.config.replay_endpoint.empty()) return false;
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::rcvtimeo, options.replay_timeout_ms);
    try {
      if (options.curve) MakeCurveClient(dealer, *options.curve);
      dealer.connect(src.config.replay_endpoint);
      const std::string start = SeqBytes(src.last_seq + 1);
      std::array<zmq::const_buffer, 2> req = {zmq::const_buffer(), zmq::buffer(start)};
      if (!zmq::send_multipart(dealer, req)) return false;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.replay_timeout_ms);
      while (std::chrono::steady_clock::now() < deadline) {
        std::vector<zmq::message_t> parts;
        if (!zmq::recv_multipart(dealer, std::back_inserter(parts))) return false;  // timed out
        if (parts.size() != 3 || parts[1].size() != 8) return false;
        const int64_t seq = ReadSeq(parts[1]);
        if (seq < 0) {
          Count(&KvEventSubscriberStats::replays);
          return true;
        }
        if (seq <= src.last_seq || seq >= before) continue;
        if (seq != src.last_seq + 1) return false;  // the buffer no longer reaches back far enough
        ApplyPayload(src.config.instance, parts[2]);
        src.last_seq = seq;
      }
    } catch (const zmq::error_t& e) {
      LogWarn("KV events: replay from {} failed: {}", src.config.replay_endpoint, e.what());
    }
    return false;
  }

  void OnMessage(Source& src, std::vector<zmq::message_t>& parts) {
    if (parts.size() != 3 || parts[1].size() != 8) {
      Count(&KvEventSubscriberStats::decode_errors);
      return;
    }
    const int64_t seq = ReadSeq(parts[1]);
    if (seq < 0) {
      Count(&KvEventSubscriberStats::decode_errors);
      return;
    }
    if (seq <= src.last_seq) {
      // Already applied through a replay, or the instance restarted (its
      // sequence starts again from 0 on the same endpoint).
      if (seq > src.last_live) {
        src.last_live = seq;
        return;
      }
      Count(&KvEventSubscriberStats::restarts);
      index->ClearInstance(src.config.instance);
      src.last_seq = -1;
    }
    src.last_live = seq;
    if (seq != src.last_seq + 1) {
      Count(&KvEventSubscriberStats::gaps);
      if (!Replay(src, seq)) {
        if (!src.config.replay_endpoint.empty()) Count(&KvEventSubscriberStats::replay_failures);
        index->ClearInstance(src.config.instance);
      }
    }
    ApplyPayload(src.config.instance, parts[2]);
    src.last_seq = seq;
  }

  void TakeCommands() {
    std::vector<KvEventSource> add;
    std::vector<std::string> remove;
    {
      std::lock_guard<std::mutex> lock(mu);
      add.swap(to_add);
      remove.swap(to_remove);
    }
    for (const std::string& name : remove) {
      sources.erase(name);
      index->RemoveInstance(name);
    }
    for (KvEventSource& s : add) {
      Source src;
      src.config = s;
      try {
        src.sub = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::sub);
        src.sub->set(zmq::sockopt::linger, 0);
        if (options.curve) MakeCurveClient(*src.sub, *options.curve);
        src.sub->set(zmq::sockopt::subscribe, options.topic);
        src.sub->connect(s.endpoint);
      } catch (const zmq::error_t& e) {
        LogWarn("KV events: cannot subscribe to {} ({}): {}", s.endpoint, s.instance, e.what());
        continue;
      }
      index->AddInstance(s.instance);
      Source& added = sources[s.instance] = std::move(src);
      // A new subscription missed the stream so far: rebuild from the buffer.
      if (!added.config.replay_endpoint.empty()) {
        if (Replay(added, INT64_MAX)) {
          added.catchup_ms = 50;
          added.next_catchup = std::chrono::steady_clock::now() + std::chrono::milliseconds(added.catchup_ms);
        } else {
          Count(&KvEventSubscriberStats::replay_failures);
        }
      }
    }
  }

  // One catch-up replay per due source; stops at the first live message, a
  // failed replay, or after the last interval.
  void CatchUp() {
    const auto now = std::chrono::steady_clock::now();
    for (auto& [name, src] : sources) {
      if (src.catchup_ms == 0) continue;
      if (src.last_live >= 0) {
        src.catchup_ms = 0;
        continue;
      }
      if (now < src.next_catchup) continue;
      if (!Replay(src, INT64_MAX) || src.catchup_ms >= 3200) {
        src.catchup_ms = 0;
        continue;
      }
      src.catchup_ms *= 2;
      src.next_catchup = now + std::chrono::milliseconds(src.catchup_ms);
    }
  }

  void Run() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop) return;
      }
      TakeCommands();
      CatchUp();
      std::vector<zmq::pollitem_t> items;
      std::vector<Source*> order;
      for (auto& [name, src] : sources) {
        items.push_back({src.sub->handle(), 0, ZMQ_POLLIN, 0});
        order.push_back(&src);
      }
      const auto timeout = std::chrono::milliseconds(options.poll_interval_ms);
      if (items.empty()) {
        std::this_thread::sleep_for(timeout);
        continue;
      }
      zmq::poll(items.data(), items.size(), timeout);
      for (size_t i = 0; i < items.size(); ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        for (int n = 0; n < 1024; ++n) {  // drain, bounded so others get a turn
          std::vector<zmq::message_t> parts;
          if (!zmq::recv_multipart(*order[i]->sub, std::back_inserter(parts), zmq::recv_flags::dontwait)) break;
          OnMessage(*order[i], parts);
        }
      }
    }
  }
};

StatusOr<std::unique_ptr<KvEventSubscriber>> KvEventSubscriber::Start(const KvEventSubscriberOptions& options,
                                                                       KvPrefixIndex* index) {
  if (!index) return InvalidArgument("KV event subscriber: no index");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->index = index;
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<KvEventSubscriber>(new KvEventSubscriber(std::move(impl)));
}

KvEventSubscriber::KvEventSubscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvEventSubscriber::~KvEventSubscriber() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->thread.join();
}

void KvEventSubscriber::AddSource(KvEventSource source) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->to_add.push_back(std::move(source));
}

void KvEventSubscriber::RemoveSource(const std::string& instance) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->to_remove.push_back(instance);
}

KvEventSubscriberStats KvEventSubscriber::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace tessera::kv_events
