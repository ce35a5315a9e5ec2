#include "receipt/signing.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tessera::receipt {
namespace {

Status Init() {
  if (sodium_init() < 0) return Internal("libsodium failed to initialise");
  return Status::Ok();
}

Status SignatureError(const std::string& what) { return InvalidArgument(what); }

}  // namespace

StatusOr<ReceiptSigner> ReceiptSigner::Load(const std::string& path) {
  RETURN_IF_ERROR(Init());
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return NotFound("--receipt-key: cannot read " + path);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return InvalidArgument("--receipt-key: " + path + " may be read by group or others (chmod 600 it)");
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string hex = ss.str();
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back()))) hex.pop_back();
  uint8_t seed[crypto_sign_SEEDBYTES];
  size_t len = 0;
  if (!in || hex.size() != 2 * crypto_sign_SEEDBYTES ||
      sodium_hex2bin(seed, sizeof(seed), hex.data(), hex.size(), nullptr, &len, nullptr) != 0 ||
      len != sizeof(seed)) {
    return InvalidArgument("--receipt-key: " + path +
                           " must hold one line: a 32-byte Ed25519 seed as 64 hex digits (tessera receipt-keygen)");
  }
  ReceiptSigner s;
  crypto_sign_seed_keypair(s.public_.data(), s.secret_.data(), seed);
  sodium_memzero(seed, sizeof(seed));
  return s;
}

StatusOr<ReceiptSigner> ReceiptSigner::Generate(const std::string& path) {
  RETURN_IF_ERROR(Init());
  uint8_t seed[crypto_sign_SEEDBYTES];
  randombytes_buf(seed, sizeof(seed));
  char hex[2 * crypto_sign_SEEDBYTES + 1];
  sodium_bin2hex(hex, sizeof(hex), seed, sizeof(seed));
  sodium_memzero(seed, sizeof(seed));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return InvalidArgument("receipt-keygen: cannot create " + path + ": " + std::strerror(errno));
  std::string line = std::string(hex) + "\n";
  sodium_memzero(hex, sizeof(hex));
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  sodium_memzero(line.data(), line.size());
  ::close(fd);
  if (!ok) return Internal("receipt-keygen: cannot write " + path);
  return Load(path);
}

std::string ReceiptSigner::public_key() const {
  return Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(public_.data()), public_.size()));
}

void ReceiptSigner::Sign(Receipt* r) const {
  r->signature.reset();
  const std::string bytes = SignedBytes(*r);
  uint8_t sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), secret_.data());
  r->signature = Signature{public_key(), Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(sig), sizeof(sig)))};
}

Status VerifySignature(const Receipt& r, const std::string& public_key) {
  RETURN_IF_ERROR(Init());
  if (!r.signature) return SignatureError("receipt signature: the receipt is not signed");
  if (r.signature->public_key != public_key) {
    return SignatureError("receipt signature: signed by key " + r.signature->public_key + ", not by this server's key " +
                           public_key);
  }
  StatusOr<std::string> pk = Base64UrlDecode(public_key);
  StatusOr<std::string> sig = Base64UrlDecode(r.signature->value);
  if (!pk.ok() || pk->size() != crypto_sign_PUBLICKEYBYTES || !sig.ok() || sig->size() != crypto_sign_BYTES) {
    return SignatureError("receipt signature: 'signature.value' is not a base64url Ed25519 signature");
  }
  const std::string bytes = SignedBytes(r);
  if (crypto_sign_verify_detached(reinterpret_cast<const uint8_t*>(sig->data()),
                                  reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                  reinterpret_cast<const uint8_t*>(pk->data())) != 0) {
    return SignatureError("receipt signature: does not verify (the receipt was altered after signing)");
  }
  return Status::Ok();
}

}  // namespace tessera::receipt
