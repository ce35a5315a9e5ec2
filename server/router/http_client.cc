#include "server/router/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <strings.h>

namespace tessera {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

Status Unavailable(const std::string& m) { return Status(StatusCode::kUnavailable, m); }

// Waits in slices of at most 250 ms so `abandon` is polled; false on timeout
// or when abandoned (*abandoned says which).
bool WaitFor(int fd, short events, std::chrono::milliseconds timeout, const std::function<bool()>& abandon,
             bool* abandoned) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  constexpr std::chrono::milliseconds kSlice{250};
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min(left, kSlice).count()));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
    if (abandon && abandon()) {
      *abandoned = true;
      return false;
    }
  }
}

}  // namespace

Status ParseHostPort(const std::string& s, const std::string& what, std::string* host, int* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    return InvalidArgument(what + ": '" + s + "' is not host:port");
  }
  *host = s.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  char* end = nullptr;
  const long p = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 1 || p > 65535) return InvalidArgument(what + ": bad port in '" + s + "'");
  *port = static_cast<int>(p);
  return Status::Ok();
}

Status HttpCall(const std::string& host, int port, const std::string& method, const std::string& path,
                const std::string& body, const HttpCallOptions& options, HttpCallResult* result,
                const std::function<bool(std::string_view)>& on_body) {
  *result = {};
  const std::string peer = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    return Unavailable("cannot resolve " + peer);
  }
  bool abandoned = false;
  Fd fd(socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  int rc = fd.get() < 0 ? -1 : connect(fd.get(), res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (fd.get() < 0) return Unavailable("socket: " + std::string(std::strerror(errno)));
  if (rc != 0) {
    if (errno != EINPROGRESS) return Unavailable("connect to " + peer + ": " + std::strerror(errno));
    if (!WaitFor(fd.get(), POLLOUT, options.connect_timeout, options.abandon, &abandoned)) {
      return Unavailable("connect to " + peer + (abandoned ? ": abandoned" : ": timeout"));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Unavailable("connect to " + peer + ": " + std::strerror(err));
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + peer + "\r\nConnection: close\r\n";
  if (!options.bearer.empty()) req += "Authorization: Bearer " + options.bearer + "\r\n";
  for (const auto& [name, value] : options.headers) {
    if (value.find_first_of("\r\n") != std::string::npos) return InvalidArgument("header " + name + ": CR/LF in value");
    req += name + ": " + value + "\r\n";
  }
  if (!body.empty() || method == "POST") {
    req += "Content-Type: " + options.content_type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  for (size_t sent = 0; sent < req.size();) {
    if (!WaitFor(fd.get(), POLLOUT, options.idle_timeout, options.abandon, &abandoned)) {
      return Unavailable("send to " + peer + (abandoned ? ": abandoned" : ": timeout"));
    }
    const ssize_t n = send(fd.get(), req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Unavailable("send to " + peer + ": " + std::strerror(errno));
    }
    sent += static_cast<size_t>(n);
  }

  std::string buf;
  bool headers_done = false, chunked = false, stopped = false, complete = false;
  int64_t content_length = -1, body_seen = 0;
  int64_t chunk_left = -1;  // chunked: bytes left in the current chunk; -1: expect a size line
  auto deliver = [&](std::string_view piece) {
    if (piece.empty() || stopped) return;
    if (on_body) {
      if (!on_body(piece)) stopped = true;
    } else {
      result->body.append(piece);
    }
  };
  // Consumes what `buf` holds; returns false on a malformed response.
  auto process = [&]() -> bool {
    if (!headers_done) {
      const size_t end = buf.find("\r\n\r\n");
      if (end == std::string::npos) return buf.size() < 65536;
      const std::string head = buf.substr(0, end);
      buf.erase(0, end + 4);
      headers_done = true;
      if (head.compare(0, 5, "HTTP/") != 0 || head.size() < 12) return false;
      result->status = std::atoi(head.c_str() + 9);
      size_t pos = head.find("\r\n");
      while (pos != std::string::npos && pos < head.size()) {
        const size_t next = head.find("\r\n", pos + 2);
        const std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
        const size_t colon = line.find(':');
        if (colon != std::string::npos) {
          std::string name = line.substr(0, colon), value = line.substr(colon + 1);
          while (!value.empty() && value.front() == ' ') value.erase(0, 1);
          if (strcasecmp(name.c_str(), "transfer-encoding") == 0 && strcasestr(value.c_str(), "chunked")) chunked = true;
          if (strcasecmp(name.c_str(), "content-length") == 0) content_length = std::atoll(value.c_str());
        }
        pos = next;
      }
      if (!chunked && content_length == 0) complete = true;
    }
    if (!chunked) {
      body_seen += static_cast<int64_t>(buf.size());
      deliver(buf);
      buf.clear();
      if (content_length >= 0 && body_seen >= content_length) complete = true;
      return true;
    }
    while (!complete) {
      if (chunk_left == -2) {  // the CRLF that ends a chunk's data
        if (buf.size() < 2) return true;
        buf.erase(0, 2);
        chunk_left = -1;
      }
      if (chunk_left < 0) {
        const size_t eol = buf.find("\r\n");
        if (eol == std::string::npos) return buf.size() < 1024;
        chunk_left = std::strtoll(buf.c_str(), nullptr, 16);
        buf.erase(0, eol + 2);
        if (chunk_left == 0) {
          complete = true;  // trailers ignored
          break;
        }
      }
      if (buf.empty()) return true;
      const size_t take = std::min<size_t>(buf.size(), static_cast<size_t>(chunk_left));
      deliver(std::string_view(buf).substr(0, take));
      buf.erase(0, take);
      chunk_left -= static_cast<int64_t>(take);
      if (chunk_left == 0) chunk_left = -2;
    }
    return true;
  };
  char tmp[16384];
  while (!complete && !stopped) {
    if (!WaitFor(fd.get(), POLLIN, options.idle_timeout, options.abandon, &abandoned)) {
      return Unavailable("read from " + peer + (abandoned ? ": abandoned" : ": timeout"));
    }
    const ssize_t n = recv(fd.get(), tmp, sizeof(tmp), 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Unavailable("read from " + peer + ": " + std::strerror(errno));
    }
    if (n == 0) {
      if (headers_done && !chunked && content_length < 0) complete = true;  // body until EOF
      break;
    }
    buf.append(tmp, static_cast<size_t>(n));
    if (!process()) return Unavailable("malformed response from " + peer);
  }
  if (stopped) return Status::Ok();
  if (!complete) return Unavailable("connection to " + peer + " closed before the response was complete");
  return Status::Ok();
}

}  // namespace tessera
