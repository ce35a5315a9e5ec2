#include "engine/parallel/store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace tessera::parallel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxField = 16u << 20;  // keys and values are small; refuse garbage lengths

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void PutU32(std::vector<char>* b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string p = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    return Status(StatusCode::kUnavailable, "cannot resolve " + host + ": " + ::gai_strerror(rc));
  return res;
}

}  // namespace

StatusOr<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Internal(std::string("FreeLoopbackPort: socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Internal(std::string("FreeLoopbackPort: bind 127.0.0.1:0: ") + std::strerror(err));
  return static_cast<int>(ntohs(a.sin_port));
}

Status ParseHostPort(const std::string& addr, std::string* host, int* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    return InvalidArgument("address '" + addr + "' is not host:port");
  std::string h = addr.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int p = 0;
  for (char c : addr.substr(colon + 1)) {
    if (c < '0' || c > '9' || p > 65535) return InvalidArgument("address '" + addr + "' has a bad port");
    p = p * 10 + (c - '0');
  }
  if (p < 1 || p > 65535) return InvalidArgument("address '" + addr + "' has a bad port");
  *host = h;
  *port = p;
  return Status::Ok();
}

// ---------------------------------------------------------------- server

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port) {
  ASSIGN_OR_RETURN(addrinfo * res, Resolve(host, port, true));
  int fd = -1;
  std::string err = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 256) == 0) break;
    err = Errno("bind/listen");
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0)
    return Status(StatusCode::kUnavailable,
                  "rendezvous store cannot listen on " + host + ":" + std::to_string(port) + ": " + err);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  std::unique_ptr<TcpStoreServer> s(new TcpStoreServer());
  s->listen_fd_ = fd;
  s->port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(s->wake_fd_, O_CLOEXEC) != 0) return Internal(Errno("pipe"));
  s->thread_ = std::thread([p = s.get()] { p->Serve(); });
  return s;
}

TcpStoreServer::~TcpStoreServer() {
  if (thread_.joinable()) {
    char c = 0;
    (void)!::write(wake_fd_[1], &c, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]})
    if (fd >= 0) ::close(fd);
}

void TcpStoreServer::Serve() {
  struct Conn {
    int fd;
    std::vector<char> in;
    std::vector<std::pair<std::string, std::vector<char>>> on_close;
  };
  std::vector<Conn> conns;
  std::map<std::string, std::vector<char>> kv;
  for (;;) {
    std::vector<pollfd> fds = {{wake_fd_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) break;
    const size_t polled = conns.size();  // a connection accepted below was not polled yet
    if (fds[1].revents & POLLIN) {
      int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conns.push_back({c, {}, {}});
      }
    }
    std::vector<bool> drop(conns.size(), false);
    for (size_t i = 0; i < polled; ++i) {
      if (fds[i + 2].revents == 0) continue;
      Conn& c = conns[i];
      char buf[4096];
      ssize_t r = ::recv(c.fd, buf, sizeof(buf), 0);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        drop[i] = true;
        continue;
      }
      c.in.insert(c.in.end(), buf, buf + r);
      // Serve every complete request in the buffer (a client sends one at a time).
      while (c.in.size() >= 9) {
        const uint32_t kl = GetU32(c.in.data() + 1), vl = GetU32(c.in.data() + 5);
        if (kl > kMaxField || vl > kMaxField || static_cast<uint8_t>(c.in[0]) > 3) {
          drop[i] = true;
          break;
        }
        if (c.in.size() < 9 + static_cast<size_t>(kl) + vl) break;
        const uint8_t op = static_cast<uint8_t>(c.in[0]);
        std::string key(c.in.data() + 9, kl);
        std::vector<char> value(c.in.begin() + 9 + kl, c.in.begin() + 9 + kl + vl);
        c.in.erase(c.in.begin(), c.in.begin() + 9 + kl + vl);
        std::vector<char> resp;
        auto it = kv.find(key);
        if (op == 0) {
          kv[key] = std::move(value);
          resp = {0};
          PutU32(&resp, 0);
        } else if (op == 1) {
          resp = {static_cast<char>(it == kv.end() ? 1 : 0)};
          PutU32(&resp, it == kv.end() ? 0 : static_cast<uint32_t>(it->second.size()));
          if (it != kv.end()) resp.insert(resp.end(), it->second.begin(), it->second.end());
        } else if (op == 3) {
          c.on_close.emplace_back(std::move(key), std::move(value));
          resp = {0};
          PutU32(&resp, 0);
        } else {
          resp = {static_cast<char>(it == kv.end() ? 0 : 1)};
          PutU32(&resp, 0);
          if (it == kv.end()) kv[key] = std::move(value);
        }
        if (!WriteAll(c.fd, resp.data(), resp.size())) {
          drop[i] = true;
          break;
        }
      }
    }
    std::vector<Conn> keep;
    for (size_t i = 0; i < conns.size(); ++i) {
      if (drop[i]) {
        ::close(conns[i].fd);
        for (auto& [k, v] : conns[i].on_close) kv[k] = std::move(v);
      } else {
        keep.push_back(std::move(conns[i]));
      }
    }
    conns = std::move(keep);
  }
  for (Conn& c : conns) ::close(c.fd);
}

// ---------------------------------------------------------------- client

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string where = host + ":" + std::to_string(port);
  std::string last = "timed out";
  for (auto backoff = std::chrono::milliseconds(10);; backoff = std::min(backoff * 2, std::chrono::milliseconds(200))) {
    auto res = Resolve(host, port, false);
    if (res.ok()) {
      for (addrinfo* a = *res; a != nullptr; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(*res);
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
          ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
          ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
          std::unique_ptr<TcpStore> s(new TcpStore());
          s->fd_ = fd;
          s->where_ = where;
          return s;
        }
        last = Errno("connect");
        ::close(fd);
      }
      ::freeaddrinfo(*res);
    } else {
      last = res.status().message();
    }
    if (Clock::now() + backoff > deadline)
      return Status(StatusCode::kDeadlineExceeded, "cannot reach the rendezvous store at " + where + " within " +
                                                       std::to_string(timeout.count()) + " ms (" + last + ")");
    std::this_thread::sleep_for(backoff);
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

Status TcpStore::Call(uint8_t op, const std::string& key, const std::vector<char>& value, bool* found,
                      std::vector<char>* out) {
  std::lock_guard<std::mutex> lk(mu_);
  if (fd_ < 0) return Status(StatusCode::kUnavailable, "rendezvous store at " + where_ + ": connection lost");
  std::vector<char> req = {static_cast<char>(op)};
  PutU32(&req, static_cast<uint32_t>(key.size()));
  PutU32(&req, static_cast<uint32_t>(value.size()));
  req.insert(req.end(), key.begin(), key.end());
  req.insert(req.end(), value.begin(), value.end());
  char head[5];
  bool ok = WriteAll(fd_, req.data(), req.size()) && ReadAll(fd_, head, 5);
  const uint32_t vl = ok ? GetU32(head + 1) : 0;
  if (ok && vl > kMaxField) ok = false;
  std::vector<char> v(vl);
  if (ok && vl > 0) ok = ReadAll(fd_, v.data(), vl);
  if (!ok) {
    ::close(fd_);
    fd_ = -1;
    return Status(StatusCode::kUnavailable,
                  "rendezvous store at " + where_ + " stopped answering (the leader, rank 0, may have exited)");
  }
  *found = head[0] == 0;
  if (out != nullptr) *out = std::move(v);
  return Status::Ok();
}

Status TcpStore::Set(const std::string& key, const std::vector<char>& value) {
  bool found = false;
  return Call(0, key, value, &found, nullptr);
}

Status TcpStore::SetOnDisconnect(const std::string& key, const std::vector<char>& value) {
  bool found = false;
  return Call(3, key, value, &found, nullptr);
}

StatusOr<bool> TcpStore::Create(const std::string& key, const std::vector<char>& value) {
  bool created = false;
  RETURN_IF_ERROR(Call(2, key, value, &created, nullptr));
  return created;
}

StatusOr<std::vector<char>> TcpStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(Wait({key}, timeout));
  bool found = false;
  std::vector<char> v;
  RETURN_IF_ERROR(Call(1, key, {}, &found, &v));
  if (!found) return Internal("rendezvous store at " + where_ + ": key '" + key + "' vanished");
  return v;
}

Status TcpStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> missing = keys;
  for (auto backoff = std::chrono::milliseconds(1);; backoff = std::min(backoff * 2, std::chrono::milliseconds(50))) {
    std::vector<std::string> still;
    for (const std::string& k : missing) {
      bool found = false;
      RETURN_IF_ERROR(Call(1, k, {}, &found, nullptr));
      if (!found) still.push_back(k);
    }
    missing = std::move(still);
    if (missing.empty()) return Status::Ok();
    if (Clock::now() >= deadline) {
      std::string list;
      for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i ? ", '" : "'") + missing[i] + "'";
      if (missing.size() > 8) list += ", ...";
      return Status(StatusCode::kDeadlineExceeded, "rendezvous store at " + where_ + ": key(s) " + list +
                                                       " not set within " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
  }
}

}  // namespace tessera::parallel
