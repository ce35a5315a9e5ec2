// `tessera kernel`: runs one CPU kernel on raw little-endian files, for independent
// oracles (tests/reference/test_quant_reference.py, test_gguf_py_oracle.py) and debugging. Not a serving path.
//
//   tessera kernel --op dequantize --dtype q4_k --k 512 --n 3 --weights w.bin --out deq.f32
//   tessera kernel --op quantize --dtype q5_1 --k 512 --n 3 --x rows.f32 --out w.bin
//   tessera kernel --op linear --dtype q8_0 --k 512 --n 3 --m 5 --weights w.bin
//       --x x.f32 [--bias b.f32] [--threads 2] --out y.f32
//   tessera kernel --op gdn --gdn-dims 2,4,16,16,4 --m 40 [--gdn-tiled] [--gdn-calls 7,23,40]
//       --x layer.f32 [--threads 3] --out y.f32
//
// weights: n rows of k elements in the dtype's byte layout (GGUF blocks for quantized
// types); x: [m, k] f32 ([n, k] for quantize); bias: [n] f32; out: [m, n] f32 (linear),
// [n, k] f32 (dequantize) or n rows of blocks (quantize: common/quant.h's QuantizeRow).
// gdn (a Gated DeltaNet layer between its projections, kernels/cpu/gdn.h), dims Hk,Hv,dk,dv,K,
// m tokens: x = [qkv [m, C] | conv weight [C, K] | a [m, Hv] | b [m, Hv] | A_log [Hv] |
// dt_bias [Hv] | z [m, Hv*dv] | norm weight [dv]] (C = 2*Hk*dk + Hv*dv), run as calls ending
// at --gdn-calls (default one call); out = [y [m, Hv*dv] | o [m, Hv*dv] | S [Hv, dk, dv]].
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/quant.h"
#include "common/thread_pool.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cpu/ops.h"
#include "cli/commands.h"

namespace tessera {
namespace {

struct KernelArgs {
  std::string op, dtype, weights, x, bias, out;
  int64_t k = 0, n = 0, m = 1;
  int threads = 1;
  std::vector<int64_t> gdn_dims, gdn_calls;
  bool gdn_tiled = false;
  float eps = 1e-6f;
};

// Reads exactly `bytes` bytes of `path` into out; false (with a message naming the
// field) when the file is missing or has another size.
bool ReadExact(const char* field, const std::string& path, int64_t bytes, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "error: --%s: cannot open %s\n", field, path.c_str());
    return false;
  }
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (static_cast<int64_t>(out->size()) != bytes) {
    std::fprintf(stderr, "error: --%s: %s has %zu bytes, expected %lld\n", field, path.c_str(),
                 out->size(), static_cast<long long>(bytes));
    return false;
  }
  return true;
}

bool WriteAll(const std::string& path, const void* data, int64_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) {
    std::fprintf(stderr, "error: --out: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

// --op gdn: conv1d, GC-form core and gated RMSNorm over the calls the user chose.
int RunGdn(const KernelArgs& a) {
  kernels::cpu::GdnDims d;
  if (a.gdn_dims.size() != 5) {
    std::fprintf(stderr, "error: --gdn-dims: expected Hk,Hv,dk,dv,K\n");
    return 2;
  }
  d.k_heads = a.gdn_dims[0];
  d.v_heads = a.gdn_dims[1];
  d.k_dim = a.gdn_dims[2];
  d.v_dim = a.gdn_dims[3];
  d.conv_kernel = a.gdn_dims[4];
  d.v_heads_tiled = a.gdn_tiled;
  if (Status st = kernels::cpu::CheckGdnDims(d); !st.ok()) {
    std::fprintf(stderr, "error: --gdn-dims: %s\n", st.message().c_str());
    return 2;
  }
  std::vector<int64_t> calls = a.gdn_calls.empty() ? std::vector<int64_t>{a.m} : a.gdn_calls;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i] <= (i == 0 ? 0 : calls[i - 1]) || calls[i] > a.m || (i + 1 == calls.size() && calls[i] != a.m)) {
      std::fprintf(stderr, "error: --gdn-calls: call ends must increase and end at --m\n");
      return 2;
    }
  }
  const int64_t m = a.m, C = d.conv_channels(), K = d.conv_kernel, Hv = d.v_heads, vd = Hv * d.v_dim;
  const int64_t sizes[] = {m * C, C * K, m * Hv, m * Hv, Hv, Hv, m * vd, d.v_dim};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  std::vector<uint8_t> bytes;
  if (!ReadExact("x", a.x, total * 4, &bytes)) return 2;
  std::vector<float> in(total);
  std::memcpy(in.data(), bytes.data(), bytes.size());
  const float* part[8];
  for (int i = 0, off = 0; i < 8; off += static_cast<int>(sizes[i]), ++i) part[i] = in.data() + off;
  std::unique_ptr<ThreadPool> pool = a.threads > 1 ? std::make_unique<ThreadPool>(a.threads) : nullptr;
  std::vector<float> ring(std::max<int64_t>(K - 1, 0) * C), qkv(m * C), o(m * vd), out(2 * m * vd);
  std::vector<float> state(d.state_floats(), 0.0f), open(d.open_floats(), 0.0f);
  kernels::cpu::GdnScratch scratch;
  const kernels::cpu::GdnParams params{part[4], part[5]};
  for (int64_t start = 0, i = 0; start < m; start = calls[i++]) {
    const int64_t rows = calls[i] - start;
    const kernels::cpu::GdnConvSeq cs{start, rows, part[0] + start * C, ring.data(), K - 1, qkv.data() + start * C};
    kernels::cpu::GdnConv(d, part[1], &cs, 1, pool.get());
    kernels::cpu::GdnSeq s;
    s.start = start;
    s.rows = rows;
    s.qkv = qkv.data() + start * C;
    s.a = part[2] + start * Hv;
    s.b = part[3] + start * Hv;
    s.state = state.data();
    s.open = open.data();
    s.out = o.data() + start * vd;
    kernels::cpu::GdnCore(d, params, &s, 1, &scratch, pool.get());
  }
  kernels::cpu::GatedRmsNorm(o.data(), part[6], part[7], m, Hv, d.v_dim, a.eps, out.data(), pool.get());
  std::copy(o.begin(), o.end(), out.begin() + m * vd);
  out.insert(out.end(), state.begin(), state.end());
  return WriteAll(a.out, out.data(), static_cast<int64_t>(out.size()) * 4) ? 0 : 1;
}

int RunKernel(const KernelArgs& a) {
  if (a.op == "gdn") return RunGdn(a);
  DType type;
  if (!ParseDType(a.dtype, &type) || type == DType::kI32 || type == DType::kI64) {
    std::fprintf(stderr, "error: --dtype: unsupported weight type '%s'\n", a.dtype.c_str());
    return 2;
  }
  if (a.k <= 0 || a.n <= 0 || a.m <= 0) {
    std::fprintf(stderr, "error: --k, --n and --m must be positive\n");
    return 2;
  }
  const int64_t row_bytes = DTypeRowBytes(type, a.k);
  if (row_bytes < 0) {
    std::fprintf(stderr, "error: --k: %lld is not a multiple of the %s block (%lld)\n",
                 static_cast<long long>(a.k), a.dtype.c_str(),
                 static_cast<long long>(DTypeBlockElems(type)));
    return 2;
  }
  if (a.op == "quantize") {
    std::vector<uint8_t> x;
    if (!IsQuantized(type)) {
      std::fprintf(stderr, "error: --dtype: quantize needs a quantized type, got '%s'\n", a.dtype.c_str());
      return 2;
    }
    if (!ReadExact("x", a.x, a.n * a.k * 4, &x)) return 2;
    std::vector<float> xf(a.n * a.k);
    std::memcpy(xf.data(), x.data(), x.size());
    std::vector<uint8_t> out(row_bytes * a.n);
    for (int64_t r = 0; r < a.n; ++r) QuantizeRow(xf.data() + r * a.k, a.k, type, out.data() + r * row_bytes);
    return WriteAll(a.out, out.data(), row_bytes * a.n) ? 0 : 1;
  }
  std::vector<uint8_t> w;
  if (!ReadExact("weights", a.weights, row_bytes * a.n, &w)) return 2;
  if (a.op == "dequantize") {
    std::vector<float> out(a.n * a.k);
    kernels::cpu::ConvertToF32(w.data(), type, a.n * a.k, out.data());
    return WriteAll(a.out, out.data(), a.n * a.k * 4) ? 0 : 1;
  }
  std::vector<uint8_t> x, bias;
  if (!ReadExact("x", a.x, a.m * a.k * 4, &x)) return 2;
  if (!a.bias.empty() && !ReadExact("bias", a.bias, a.n * 4, &bias)) return 2;
  std::vector<float> xf(a.m * a.k), bf(a.n), y(a.m * a.n);
  std::memcpy(xf.data(), x.data(), x.size());
  if (!bias.empty()) std::memcpy(bf.data(), bias.data(), bias.size());
  std::unique_ptr<ThreadPool> pool = a.threads > 1 ? std::make_unique<ThreadPool>(a.threads) : nullptr;
  kernels::cpu::Linear(xf.data(), a.m, a.k, w.data(), type, a.n, bias.empty() ? nullptr : bf.data(),
                       y.data(), a.n, pool.get());
  return WriteAll(a.out, y.data(), a.m * a.n * 4) ? 0 : 1;
}

}  // namespace

void AddKernelCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<KernelArgs>();
  CLI::App* cmd = app.add_subcommand("kernel", "Run one CPU kernel on raw files (test oracle)");
  cmd->add_option("--op", args->op, "linear | dequantize | quantize | gdn")
      ->required()
      ->check(CLI::IsMember({"linear", "dequantize", "quantize", "gdn"}));
  cmd->add_option("--dtype", args->dtype,
                  "Weight type: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4 "
                  "(all but gdn)");
  cmd->add_option("--k", args->k, "Elements per weight row (all but gdn)");
  cmd->add_option("--n", args->n, "Weight rows (output columns) (all but gdn)");
  cmd->add_option("--m", args->m, "Activation rows (linear), tokens (gdn)")->capture_default_str();
  cmd->add_option("--gdn-dims", args->gdn_dims, "gdn: Hk,Hv,dk,dv,K")->delimiter(',');
  cmd->add_option("--gdn-calls", args->gdn_calls, "gdn: token counts at which each call ends")->delimiter(',');
  cmd->add_flag("--gdn-tiled", args->gdn_tiled, "gdn: v-head h reads k-head h mod Hk (qwen35 GGUF order)");
  cmd->add_option("--eps", args->eps, "gdn: the gated RMSNorm's epsilon")->capture_default_str();
  cmd->add_option("--weights", args->weights, "Raw weight bytes, n rows (linear, dequantize)");
  cmd->add_option("--x", args->x, "Raw f32 activations [m, k] (linear), or the [n, k] rows to quantize");
  cmd->add_option("--bias", args->bias, "Raw f32 bias [n] (linear, optional)");
  cmd->add_option("--threads", args->threads, "Kernel threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--out", args->out, "Raw f32 output")->required();
  cmd->callback([args, exit_code] {
    if (args->op != "dequantize" && args->x.empty()) {
      std::fprintf(stderr, "error: --x is required for --op %s\n", args->op.c_str());
      *exit_code = 2;
      return;
    }
    if (args->op != "gdn" && (args->dtype.empty() || args->k == 0 || args->n == 0)) {
      std::fprintf(stderr, "error: --dtype, --k and --n are required for --op %s\n", args->op.c_str());
      *exit_code = 2;
      return;
    }
    if (args->op != "quantize" && args->op != "gdn" && args->weights.empty()) {
      std::fprintf(stderr, "error: --weights is required for --op %s\n", args->op.c_str());
      *exit_code = 2;
      return;
    }
    *exit_code = RunKernel(*args);
  });
}

}  // namespace tessera
