#include "engine/parallel/shard/shard_plan.h"

#include "engine/parallel/communicator.h"

namespace tessera::parallel {
namespace {

Range Slice(int64_t count, int world, int rank) {
  return {SliceBegin(count, world, rank), SliceCount(count, world, rank)};
}
Range All(int64_t count) { return {0, count}; }

}  // namespace

int ShardPlan::OwnerOfExpert(int64_t e, int64_t num_experts) const {
  const int world = options.world_size;
  if (!expert_parallel()) return options.rank;
  for (int r = 0; r < world; ++r) {
    if (e < SliceBegin(num_experts, world, r) + SliceCount(num_experts, world, r)) return r;
  }
  return world - 1;
}

bool ShardPlan::HoldsExpert(int64_t e) const {
  if (!expert_map()) return experts.Contains(e);
  for (int64_t x : slot_experts) {
    if (x == e) return true;
  }
  return false;
}

ModelConfig ShardPlan::LocalConfig(const ModelConfig& global) const {
  ModelConfig c = global;
  c.num_q_heads = q_heads.count;
  c.num_kv_heads = kv_heads.count;
  c.intermediate_size = inter.count;
  c.moe.expert_inter = expert_inter.count;
  c.moe.shared_inter = shared_inter.count;
  return c;
}

StatusOr<ShardPlan> MakeShardPlan(const ModelConfig& c, const ShardOptions& o) {
  const int n = o.world_size, r = o.rank;
  if (n < 1 || r < 0 || r >= n) {
    return InvalidArgument("shard plan: rank " + std::to_string(r) + " of world size " + std::to_string(n));
  }
  if (o.expert_parallel && !c.is_moe()) {
    return InvalidArgument("expert parallelism needs an MoE model; " + c.architecture + " has no experts");
  }
  if (o.data_parallel_attention && !o.expert_parallel) {
    return InvalidArgument(
        "data-parallel attention inside one group needs expert parallelism (--enable-expert-parallel); "
        "for plain data parallelism run separate instances");
  }
  if (o.expert_parallel && c.moe.num_experts < n) {
    return InvalidArgument("expert parallelism over " + std::to_string(n) + " ranks needs at least as many experts; " +
                           c.architecture + " has " + std::to_string(c.moe.num_experts));
  }
  ShardPlan p;
  p.options = o;
  const bool tp = n > 1 && !o.data_parallel_attention;
  if (tp) {
    if (c.num_q_heads % n != 0) {
      return InvalidArgument("tensor parallelism: " + std::to_string(c.num_q_heads) +
                             " attention heads do not split over " + std::to_string(n) + " ranks");
    }
    if (c.num_kv_heads % n != 0 && n % c.num_kv_heads != 0) {
      return InvalidArgument("tensor parallelism: " + std::to_string(c.num_kv_heads) + " KV heads neither split over " +
                             std::to_string(n) + " ranks nor replicate evenly on them");
    }
    p.q_heads = Slice(c.num_q_heads, n, r);
    if (c.num_kv_heads % n == 0) {
      p.kv_heads = Slice(c.num_kv_heads, n, r);
    } else {
      // Fewer KV heads than ranks: each rank holds the one KV head of its q heads.
      const int64_t group = c.num_q_heads / c.num_kv_heads;
      p.kv_heads = {p.q_heads.begin / group, 1};
    }
    p.inter = Slice(c.intermediate_size, n, r);
    p.vocab = Slice(c.vocab_size, n, r);
    p.vocab_stride = SliceCount(c.vocab_size, n, 0);
    p.shared_inter = o.expert_parallel ? All(c.moe.shared_inter) : Slice(c.moe.shared_inter, n, r);
    p.expert_inter = o.expert_parallel ? All(c.moe.expert_inter) : Slice(c.moe.expert_inter, n, r);
  } else {
    p.q_heads = All(c.num_q_heads);
    p.kv_heads = All(c.num_kv_heads);
    p.inter = All(c.intermediate_size);
    p.vocab = All(c.vocab_size);
    p.vocab_stride = c.vocab_size;
    p.shared_inter = All(c.moe.shared_inter);
    p.expert_inter = All(c.moe.expert_inter);
  }
  p.experts = p.expert_parallel() ? Slice(c.moe.num_experts, n, r) : All(c.moe.num_experts);
  if (o.eplb.uses_map() && !p.expert_parallel()) {
    return InvalidArgument("expert load balancing (--enable-eplb, --num-redundant-experts) needs expert parallelism "
                           "(--enable-expert-parallel) over more than one rank");
  }
  if (p.expert_map()) {
    StatusOr<ExpertMap> m = ExpertMap::Initial(n, c.moe.num_experts, o.eplb.num_redundant_experts);
    if (!m.ok()) {
      return InvalidArgument("expert parallelism with " + std::to_string(o.eplb.num_redundant_experts) +
                             " redundant experts: " + c.architecture + " has " + std::to_string(c.moe.num_experts) +
                             " experts per MoE layer, and experts + redundant experts must be a multiple of the " +
                             std::to_string(n) + " ranks (" + m.status().message() + ")");
    }
    for (int64_t j = 0; j < m->slots_per_rank(); ++j) p.slot_experts.push_back(m->logical(r * m->slots_per_rank() + j));
  } else {
    for (int64_t e = p.experts.begin; e < p.experts.end(); ++e) p.slot_experts.push_back(e);
  }
  return p;
}

TensorSlice SliceFor(const ShardPlan& p, const ModelConfig& c, const WeightSpec& spec) {
  using R = WeightRole;
  using K = TensorSlice::Kind;
  const int64_t d = c.head_dim;
  auto rows = [](Range x) { return TensorSlice{K::kRows, x, false}; };
  auto cols = [](Range x) { return TensorSlice{K::kCols, x, false}; };
  const TensorSlice whole{};
  const TensorSlice skip{K::kSkip, {}, false};
  if (spec.IsExpert()) {
    if (!p.HoldsExpert(spec.expert)) return skip;
    if (p.expert_inter.count == c.moe.expert_inter) return whole;
    // Split experts with biases are refused by ModelShard::Create.
    return spec.role == R::kExpertDown ? cols(p.expert_inter) : rows(p.expert_inter);
  }
  if (!p.tensor_parallel()) return whole;
  const Range q{p.q_heads.begin * d, p.q_heads.count * d};
  const Range kv{p.kv_heads.begin * d, p.kv_heads.count * d};
  const bool rank0 = p.options.rank == 0;
  switch (spec.role) {
    case R::kEmbed: return TensorSlice{K::kRows, p.vocab, true};
    case R::kLmHead: return rows(p.vocab);
    case R::kQ: case R::kQBias: return rows(q);
    case R::kSinks: return rows(p.q_heads);  // one per q head
    case R::kK: case R::kV: case R::kKBias: case R::kVBias: return rows(kv);
    case R::kO: return cols(q);
    case R::kGate: case R::kUp: case R::kGateBias: case R::kUpBias: return rows(p.inter);
    case R::kDown: return cols(p.inter);
    // Row-parallel biases are added once, on rank 0, before the all-reduce.
    case R::kOBias: case R::kDownBias: return rank0 ? whole : skip;
    case R::kSharedGate: case R::kSharedUp:
      return p.shared_inter.count == c.moe.shared_inter ? whole : rows(p.shared_inter);
    case R::kSharedDown: return p.shared_inter.count == c.moe.shared_inter ? whole : cols(p.shared_inter);
    default: return whole;  // norms, router, shared expert gate
  }
}

}  // namespace tessera::parallel
