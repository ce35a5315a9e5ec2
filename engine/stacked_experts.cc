#include "engine/stacked_experts.h"

#include <cstring>
#include <string>

namespace tessera {
namespace {

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

StatusOr<const SafetensorsTensor*> Need(const WeightStore& store, const std::string& name,
                                        const std::vector<int64_t>& shape, bool u8) {
  const SafetensorsTensor* t = store.Find(name);
  if (t == nullptr) return NotFound(store.dir() + ": missing tensor '" + name + "'");
  if (t->shape != shape) {
    return InvalidArgument(t->file + ": tensor '" + name + "' has shape " + ShapeText(t->shape) + ", expected " +
                           ShapeText(shape));
  }
  const bool ok = u8 ? t->dtype_name == "U8"
                     : t->dtype && (*t->dtype == DType::kF32 || *t->dtype == DType::kF16 || *t->dtype == DType::kBF16);
  if (!ok) {
    return Unimplemented(t->file + ": tensor '" + name + "' has dtype " + t->dtype_name + ", expected " +
                         (u8 ? "U8" : "F32, F16 or BF16"));
  }
  return t;
}

}  // namespace

void RepackMxfp4Row(const uint8_t* blocks, const uint8_t* scales, int64_t num_blocks, uint8_t* out) {
  for (int64_t b = 0; b < num_blocks; ++b) {
    const uint8_t* in = blocks + 16 * b;
    uint8_t* o = out + 17 * b;
    o[0] = scales[b];
    for (int j = 0; j < 16; ++j) {
      // Element j is nibble j % 2 of HF byte j / 2; element j + 16 that of byte 8 + j / 2.
      const int lo = (in[j / 2] >> (4 * (j % 2))) & 0xF;
      const int hi = (in[8 + j / 2] >> (4 * (j % 2))) & 0xF;
      o[1 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void UnpackMxfp4Row(const uint8_t* ggml, int64_t num_blocks, uint8_t* blocks, uint8_t* scales) {
  for (int64_t b = 0; b < num_blocks; ++b) {
    const uint8_t* in = ggml + 17 * b;
    uint8_t* o = blocks + 16 * b;
    scales[b] = in[0];
    std::memset(o, 0, 16);
    for (int j = 0; j < 16; ++j) {
      o[j / 2] |= static_cast<uint8_t>((in[1 + j] & 0xF) << (4 * (j % 2)));
      o[8 + j / 2] |= static_cast<uint8_t>((in[1 + j] >> 4) << (4 * (j % 2)));
    }
  }
}

StatusOr<SourceTensor> ReadStackedExpert(const WeightStore& store, const WeightSpec& spec, int64_t num_experts,
                                         std::vector<std::unique_ptr<uint8_t[]>>* owned) {
  const int64_t rows = spec.shape[0], stored = spec.stored_rows, e = spec.expert;
  if (!spec.stacked || stored <= 0 || e < 0 || e >= num_experts ||
      spec.row_offset + (rows - 1) * spec.row_step >= stored) {
    return Internal("stacked experts: bad spec for '" + spec.name + "'");
  }
  auto row_of = [&](int64_t r) { return spec.row_offset + r * spec.row_step; };
  if (spec.shape.size() == 1) {  // a bias, [E, stored]
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, Need(store, spec.name, {num_experts, stored}, false));
    const int64_t es = DTypeSize(*t->dtype);
    auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(rows * es));
    const uint8_t* src = t->data + e * stored * es;
    for (int64_t r = 0; r < rows; ++r) std::memcpy(buf.get() + r * es, src + row_of(r) * es, static_cast<size_t>(es));
    owned->push_back(std::move(buf));
    return SourceTensor{owned->back().get(), *t->dtype, rows * es, t->file};
  }
  const int64_t cols = spec.shape[1];
  if (store.Find(spec.name) == nullptr && store.Find(spec.name + "_blocks") == nullptr) {
    return NotFound(store.dir() + ": missing tensor '" + spec.name + "' (nor its MXFP4 '" + spec.name +
                    "_blocks' and '" + spec.name + "_scales')");
  }
  if (store.Find(spec.name) != nullptr) {
    // Dense: [E, cols, stored] (x @ W); out[r][c] = in[e][c][row_of(r)].
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, Need(store, spec.name, {num_experts, cols, stored}, false));
    const int64_t es = DTypeSize(*t->dtype);
    auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(rows * cols * es));
    const uint8_t* src = t->data + e * cols * stored * es;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        std::memcpy(buf.get() + (r * cols + c) * es, src + (c * stored + row_of(r)) * es, static_cast<size_t>(es));
      }
    }
    owned->push_back(std::move(buf));
    return SourceTensor{owned->back().get(), *t->dtype, rows * cols * es, t->file};
  }
  if (cols % 32 != 0) {
    return InvalidArgument(store.dir() + ": tensor '" + spec.name + "_blocks': MXFP4 rows of " +
                           std::to_string(cols) + " columns are not whole blocks of 32");
  }
  const int64_t nb = cols / 32;
  ASSIGN_OR_RETURN(const SafetensorsTensor* blocks,
                   Need(store, spec.name + "_blocks", {num_experts, stored, nb, 16}, true));
  ASSIGN_OR_RETURN(const SafetensorsTensor* scales,
                   Need(store, spec.name + "_scales", {num_experts, stored, nb}, true));
  const int64_t row_bytes = DTypeRowBytes(DType::kMXFP4, cols);
  auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t in_row = e * stored + row_of(r);
    RepackMxfp4Row(blocks->data + in_row * nb * 16, scales->data + in_row * nb, nb, buf.get() + r * row_bytes);
  }
  owned->push_back(std::move(buf));
  return SourceTensor{owned->back().get(), DType::kMXFP4, rows * row_bytes, blocks->file};
}

}  // namespace tessera
