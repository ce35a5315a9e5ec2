#include "runtime/sim/fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

namespace tessera::sim {
namespace {

constexpr int kFeatures = 6;  // LinearCoefficientKeys()' order

std::array<double, kFeatures> Features(const StepShape& s) {
  return {1.0,
          static_cast<double>(s.prefill_tokens),
          static_cast<double>(s.prefill_attention),
          static_cast<double>(s.num_decode_seqs),
          static_cast<double>(s.decode_tokens),
          static_cast<double>(s.decode_context)};
}

// Solves the n x n system a x = b in place (Gaussian elimination, partial
// pivoting); false when a pivot falls below `tiny` (a dependent column).
bool Solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>* x, double tiny) {
  const size_t n = b.size();
  for (size_t col = 0; col < n; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < n; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[piv][col])) piv = r;
    }
    if (!(std::abs(a[piv][col]) > tiny)) return false;
    std::swap(a[piv], a[col]);
    std::swap(b[piv], b[col]);
    for (size_t r = col + 1; r < n; ++r) {
      const double f = a[r][col] / a[col][col];
      for (size_t c = col; c < n; ++c) a[r][c] -= f * a[col][c];
      b[r] -= f * b[col];
    }
  }
  x->assign(n, 0);
  for (size_t i = n; i-- > 0;) {
    double v = b[i];
    for (size_t c = i + 1; c < n; ++c) v -= a[i][c] * (*x)[c];
    (*x)[i] = v / a[i][i];
  }
  return true;
}

double Median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? static_cast<double>(v[m]) : (static_cast<double>(v[m - 1]) + static_cast<double>(v[m])) / 2;
}

}  // namespace

StatusOr<CostFit> FitLinearCostModel(const std::vector<StepSample>& samples) {
  if (samples.empty()) return InvalidArgument("cost model fit: no step samples");
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  std::map<Key, size_t> index;
  std::vector<StepShape> shapes;
  std::vector<std::vector<int64_t>> times;
  for (const StepSample& s : samples) {
    if (s.ns <= 0) return InvalidArgument("cost model fit: a step sample's time is not positive");
    const StepShape& h = s.shape;
    const Key key{h.num_prefill_seqs, h.prefill_tokens, h.prefill_attention, h.num_decode_seqs, h.decode_tokens,
                  h.decode_context};
    auto [it, fresh] = index.emplace(key, shapes.size());
    if (fresh) {
      shapes.push_back(h);
      shapes.back().ordinal = 0;
      times.emplace_back();
    }
    times[it->second].push_back(s.ns);
  }
  const size_t n = shapes.size();
  std::vector<std::array<double, kFeatures>> x(n);
  std::vector<double> y(n);  // ms
  for (size_t i = 0; i < n; ++i) {
    x[i] = Features(shapes[i]);
    y[i] = Median(times[i]) / 1e6;
  }
  // Relative error: row i scaled by 1/y_i, so the target is 1. Columns are
  // scaled to unit norm for the solves' conditioning.
  std::array<double, kFeatures> norm{};
  for (size_t i = 0; i < n; ++i) {
    for (int f = 0; f < kFeatures; ++f) norm[f] += (x[i][f] / y[i]) * (x[i][f] / y[i]);
  }
  for (double& v : norm) v = std::sqrt(v);

  // The scaled design matrix: row i of feature f.
  auto a = [&](size_t i, int f) { return x[i][f] / y[i] / norm[f]; };
  // Least squares of `target` (a column, or -1: the all-ones target) on
  // `cols`; false when they are dependent.
  auto fit_on = [&](const std::vector<int>& cols, int target, std::vector<double>* sol) {
    const size_t k = cols.size();
    std::vector<std::vector<double>> ata(k, std::vector<double>(k, 0));
    std::vector<double> atb(k, 0);
    for (size_t i = 0; i < n; ++i) {
      const double t = target < 0 ? 1.0 : a(i, target);
      for (size_t p = 0; p < k; ++p) {
        atb[p] += a(i, cols[p]) * t;
        for (size_t q = 0; q < k; ++q) ata[p][q] += a(i, cols[p]) * a(i, cols[q]);
      }
    }
    return Solve(std::move(ata), std::move(atb), sol, 1e-10);
  };

  // Which coefficients the data determine, in key order: a feature that is
  // zero throughout or a combination of the ones before it is left 0 (with
  // no speculative drafts, decode tokens are the decode count).
  CostFit fit;
  const auto& keys = LinearCoefficientKeys();
  std::vector<int> kept;
  for (int f = 0; f < kFeatures; ++f) {
    bool independent = norm[f] > 0;
    std::vector<double> sol;
    if (independent && !kept.empty() && fit_on(kept, f, &sol)) {
      double r = 0;
      for (size_t i = 0; i < n; ++i) {
        double v = a(i, f);
        for (size_t p = 0; p < kept.size(); ++p) v -= sol[p] * a(i, kept[p]);
        r += v * v;
      }
      independent = r > 1e-9;
    }
    if (independent) {
      kept.push_back(f);
    } else {
      fit.undetermined.push_back(keys[static_cast<size_t>(f)].key);
    }
  }
  // kept <= n always (a rank); with as many shapes as coefficients every fit
  // is exact and its error says nothing.
  if (n <= kept.size()) {
    return InvalidArgument("cost model fit: " + std::to_string(n) + " distinct step shapes for " +
                           std::to_string(kept.size()) + " coefficients; run more step compositions");
  }

  // Non-negative least squares by support: the best non-negative
  // unconstrained optimum over every subset of the kept features.
  double best = std::numeric_limits<double>::infinity();
  std::array<double, kFeatures> best_c{};
  for (unsigned mask = 0; mask < (1u << kept.size()); ++mask) {
    std::vector<int> cols;
    for (size_t p = 0; p < kept.size(); ++p) {
      if (mask >> p & 1) cols.push_back(kept[p]);
    }
    std::array<double, kFeatures> c{};
    std::vector<double> sol;
    if (!cols.empty() && !fit_on(cols, -1, &sol)) continue;
    bool feasible = true;
    for (size_t p = 0; p < cols.size(); ++p) {
      c[cols[p]] = sol[p] / norm[cols[p]];
      feasible = feasible && sol[p] >= 0;
    }
    if (!feasible) continue;
    double res = 0;
    for (size_t i = 0; i < n; ++i) {
      double pred = 0;
      for (int f = 0; f < kFeatures; ++f) pred += c[f] * x[i][f];
      res += (pred / y[i] - 1) * (pred / y[i] - 1);
    }
    if (res < best) {
      best = res;
      best_c = c;
    }
  }
  for (int f = 0; f < kFeatures; ++f) fit.coefficients.*keys[static_cast<size_t>(f)].field = best_c[f];

  double mean = 0;
  for (double v : y) mean += v / static_cast<double>(n);
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < n; ++i) {
    FitPoint p;
    p.shape = shapes[i];
    p.samples = static_cast<int64_t>(times[i].size());
    p.measured_ms = y[i];
    for (int f = 0; f < kFeatures; ++f) p.predicted_ms += best_c[f] * x[i][f];
    p.relative_error = (p.predicted_ms - y[i]) / y[i];
    ss_res += (p.predicted_ms - y[i]) * (p.predicted_ms - y[i]);
    ss_tot += (y[i] - mean) * (y[i] - mean);
    fit.mape += std::abs(p.relative_error) / static_cast<double>(n);
    fit.max_abs_relative_error = std::max(fit.max_abs_relative_error, std::abs(p.relative_error));
    fit.points.push_back(p);
  }
  fit.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : (ss_res == 0 ? 1.0 : 0.0);
  return fit;
}

}  // namespace tessera::sim
