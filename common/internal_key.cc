#include "common/internal_key.h"

#include <arpa/inet.h>

#include <fstream>

#include <openssl/crypto.h>

#include "common/sha256.h"

namespace tessera {
namespace {

std::string Hmac(std::string_view key, std::string_view message) {
  const Sha256Digest mac = HmacSha256(key, {message});
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

}  // namespace

StatusOr<std::string> ReadInternalKeyFile(const std::string& path, std::string_view flag) {
  const std::string f(flag);
  std::ifstream in(path);
  if (!in) return NotFound(f + " " + path + ": cannot be read");
  std::string line;
  std::getline(in, line);
  const size_t b = line.find_first_not_of(" \t\r\n");
  const size_t e = line.find_last_not_of(" \t\r\n");
  line = b == std::string::npos ? std::string() : line.substr(b, e - b + 1);
  for (char c : line) {
    if (c < 0x21 || c > 0x7e) {  // it travels in Authorization headers and gRPC metadata
      return InvalidArgument(f + " " + path + ": the key must be printable ASCII without spaces");
    }
  }
  if (line.size() < 16) {
    return InvalidArgument(f + " " + path + ": the key (its first line) must be at least 16 characters, e.g. "
                           "`openssl rand -hex 32`");
  }
  return line;
}

std::string DeriveInternalKey(std::string_view key, std::string_view purpose) {
  return Hmac(key, "tessera/" + std::string(purpose));
}

std::string HmacSha256Hex(std::string_view key, std::string_view message) {
  return ToHex(HmacSha256(key, {message}));
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace tessera
