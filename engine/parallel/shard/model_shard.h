// ModelShard: one rank's part of a parallel model (ShardPlan) and the hooks
// Model calls where its forward crosses ranks:
//   LoadMatrix/VectorRange  the rank's slice of a checkpoint tensor, reading only
//                           the slice's bytes (row slices: one contiguous range;
//                           column slices: one range per row)
//   ReduceSum               after row-parallel o_proj / down_proj / TP experts:
//                           all-reduce, ranks summed in order 0..N-1
//   Embed                   vocab-parallel embedding (other ranks' ids read a zero
//                           row) + all-reduce; exact, since one addend is nonzero
//   LmHead                  vocab-parallel logits + all-gather
//   MoeExperts              expert parallelism: (token, slot) pairs dispatched with
//                           all-to-all-v to the ranks holding their experts, the
//                           unweighted expert outputs returned the same way and
//                           combined per token in slot order by the one-rank
//                           kernel's combine (kernels/cpu MoeCombine): bitwise equal
//                           to one rank. With replicated hidden states (TP
//                           attention) each rank dispatches its slice of the tokens
//                           and the results are all-gathered.
//   EPLB                    with an expert map (shard/eplb.h) a rank holds
//                           physical slots; a pair of a replicated expert goes
//                           to the replica on the rank with the fewest pairs so
//                           far in this dispatch. Every replica has the same
//                           weights, so the output does not depend on the choice.
//   FinishStep              after every step, on every rank: per-slot pair counts
//                           all-gathered (the whole group's expert load, on every
//                           rank); every step_interval steps a rebalance: rank 0
//                           computes new maps from the window of load and
//                           broadcasts them, then expert weights move between
//                           ranks with one all-to-all per MoE layer. Requests in
//                           flight keep going: only that step is longer.
// Hooks return void like Backend ops; the first failure (a dead or missing rank)
// is kept and returned by TakeError(). After a failure the communicator is broken,
// so later hooks fail at once and no rank hangs.
// Runs on the CPU backend (activations in host memory, in-process or Gloo
// communicators). Thread safety: the rank's one forward thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/shard/eplb.h"
#include "engine/parallel/shard/shard_plan.h"
#include "engine/weight_source.h"

namespace tessera::parallel {

// What a model needs to run as one rank of a group.
struct ParallelSetup {
  ShardOptions shard;
  Communicator* comm = nullptr;  // not owned; outlives the model; rank/world must match shard
  bool record_reads = false;     // keep the byte ranges each weight load reads (tests)
};

// Bytes of a source tensor a rank read (offsets from the tensor's start).
struct ByteRange {
  int64_t begin = 0;
  int64_t end = 0;
};
struct TensorReads {
  std::string name;
  int64_t tensor_bytes = 0;
  std::vector<ByteRange> ranges;
};

class ModelShard {
 public:
  static StatusOr<std::unique_ptr<ModelShard>> Create(const ModelConfig& config, const ParallelSetup& setup,
                                                      Backend* backend);

  const ShardPlan& plan() const { return plan_; }
  const ModelConfig& local_config() const { return local_; }
  Communicator* comm() const { return comm_; }

  // The rank's part of matrix `spec` (global shape spec.shape) as a host view
  // (into `t` or into storage this shard owns), or an empty view when the rank
  // holds none of it. Vocab-parallel embeddings get one extra zero row.
  StatusOr<WeightView> LoadMatrix(const WeightSpec& spec, const SourceTensor& t);
  // Element range of vector `spec` this rank holds; count 0: none (the bias of
  // a row-parallel layer on ranks other than 0).
  Range VectorRange(const WeightSpec& spec) const;
  // Every byte range LoadMatrix read so far (for tests: a rank reads only its slice).
  const std::vector<TensorReads>& reads() const { return reads_; }

  // --- Forward hooks (x, out: backend = host memory).
  void ReduceSum(float* x, int64_t n);
  // out[t, :] = embedding rows of host_ids; `table` is the rank's slice + zero row.
  void Embed(const WeightView& table, const int32_t* host_ids, int64_t t, float* out);
  // logits[rows, vocab] from x[rows, hidden] with the rank's lm_head slice.
  void LmHead(const float* x, int64_t rows, const WeightView& lm_head, float* logits);
  // out[t, :] = MoE routed-expert output (see top) of MoE layer `moe_layer`
  // (index among MoE layers); `local` holds this rank's slots' experts
  // (local[j] = SlotExperts(moe_layer)[j]).
  void MoeExperts(int64_t moe_layer, const float* x, int64_t t, const int32_t* ids, const float* weights,
                  const MoeExpertWeights& local, float* out);
  // Logical expert of each of this rank's physical slots in MoE layer `moe_layer`.
  std::vector<int64_t> SlotExperts(int64_t moe_layer) const;

  // --- Expert load and EPLB (expert parallelism only; no-ops otherwise).
  // Collective, every rank after every step: gathers the step's per-slot pair
  // counts and adds them to the totals. Sets *rebalance when this step ends
  // an EPLB interval (the same answer on every rank).
  void FinishStep(bool* rebalance);
  // Collective, every rank: new maps (rank 0 computes them from the window and
  // broadcasts), expert weights moved so that tables[l] holds every expert of
  // this rank's new slots in MoE layer l; replicas this rank received earlier
  // and no longer holds are freed (the experts loaded at start stay).
  Status Rebalance(const std::vector<MoeExpertWeights*>& tables);
  // Since load: pairs of each logical expert computed anywhere, [moe layer][expert];
  // the same by computing rank, [moe layer][expert][rank]; rebalances done.
  const std::vector<int64_t>& expert_totals() const { return expert_totals_; }
  const std::vector<int64_t>& expert_rank_totals() const { return expert_rank_totals_; }
  int64_t rebalances() const { return rebalances_; }
  int64_t experts_moved() const { return experts_moved_; }  // expert copies sent between ranks
  // max / mean over ranks of the pairs computed in the last step (1 = balanced; 0: none).
  double last_step_imbalance() const { return last_imbalance_; }
  // Collective time of the hooks since construction (seconds).
  double collective_seconds() const { return collective_seconds_; }

  Status TakeError();

 private:
  ModelShard() = default;
  void Fail(const Status& s);
  // Times a collective; records failure.
  template <class Fn>
  bool Collective(Fn&& fn);
  void DispatchCombine(int64_t moe_layer, const float* x, int64_t t, const int32_t* ids, const float* weights,
                       const MoeExpertWeights& local, float* out);
  int64_t SlotsPerRank() const;  // physical slots of the fullest rank
  int64_t LogicalOfSlot(int64_t moe_layer, int rank, int64_t slot) const;  // -1: no such slot
  StatusOr<std::vector<ExpertMap>> BroadcastMaps();

  ShardPlan plan_;
  ModelConfig config_, local_;
  Communicator* comm_ = nullptr;
  Backend* backend_ = nullptr;
  Status error_;
  double collective_seconds_ = 0;
  bool record_reads_ = false;
  std::vector<TensorReads> reads_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> owned_;  // sliced weights; views point here
  // Scratch reused across steps.
  std::vector<int32_t> local_ids_;
  std::vector<float> lm_local_, lm_all_, gather_out_, send_x_, recv_x_, y_in_, y_back_, ones_;
  std::vector<int32_t> send_e_, recv_e_, pos_;
  std::vector<int64_t> send_counts_, recv_counts_, scratch_counts_;
  // Expert load (EP). slot_pairs_: this step's pairs per [moe layer][local slot].
  int64_t num_moe_layers_ = 0;
  std::vector<int64_t> slot_pairs_, expert_totals_, expert_rank_totals_;
  // EPLB: one map per MoE layer (empty without); the load at start; the window.
  std::vector<ExpertMap> maps_;
  std::unique_ptr<ExpertMap> initial_;
  std::vector<std::vector<int64_t>> window_;  // ring of per-step [moe layer][expert] loads
  std::vector<int64_t> window_sum_;
  int64_t steps_ = 0, rebalances_ = 0, experts_moved_ = 0;
  double last_imbalance_ = 0;
  std::vector<std::vector<std::shared_ptr<void>>> received_;  // [moe layer][expert]: moved-in weights
};

}  // namespace tessera::parallel
