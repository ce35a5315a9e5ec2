// Ed25519 signatures of receipts (libsodium). The key file (--receipt-key)
// holds one line: the 32-byte Ed25519 seed (RFC 8032's secret key) as 64
// hex digits; the public key is derived from it. `tessera receipt-keygen
// FILE` writes one (mode 0600) and prints the public key. A key file that
// the group or others may read is refused, as ssh refuses such keys.
//
// Thread-safe: a ReceiptSigner is immutable after Load.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "receipt/receipt.h"

namespace tessera::receipt {

class ReceiptSigner {
 public:
  // The key in `path` (format above); INVALID_ARGUMENT / NOT_FOUND naming the file.
  static StatusOr<ReceiptSigner> Load(const std::string& path);
  // A fresh key written to `path` (must not exist), mode 0600.
  static StatusOr<ReceiptSigner> Generate(const std::string& path);

  // base64url of the public key, as receipts carry it.
  std::string public_key() const;
  // Sets r->signature over SignedBytes(*r).
  void Sign(Receipt* r) const;

 private:
  std::array<uint8_t, 64> secret_{};  // libsodium's secret key: seed || public key
  std::array<uint8_t, 32> public_{};
};

// OK when `r` is signed by `public_key` (base64url): the key in the receipt
// must be that key and the signature must verify over SignedBytes(r).
// INVALID_ARGUMENT starting "receipt signature:" and naming what failed (unsigned receipt, another key, a
// signature that does not verify: the receipt was altered).
Status VerifySignature(const Receipt& r, const std::string& public_key);

}  // namespace tessera::receipt
