// Block scheduler of the CUDA emulator: one fiber per CUDA thread (see emu.h).
// Not a general fiber library: fibers of one block run on the calling OS thread
// and switch only at barriers. Per-OS-thread state; launches from different OS
// threads are independent.
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/emu/runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_EMU_ASAN 1
#endif
#endif
#if defined(TESSERA_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace tessera::emu {

thread_local uint3 g_thread_idx{0, 0, 0};
thread_local uint3 g_block_idx{0, 0, 0};
thread_local dim3 g_block_dim;
thread_local dim3 g_grid_dim;

namespace {

// Minimal context switch. glibc's swapcontext makes a signal-mask system call per
// switch, and under ASan its interceptor clears the target stack's shadow each
// time (50 us per switch); on x86-64 we switch callee-saved registers ourselves.
#if defined(__x86_64__)
extern "C" void tessera_emu_switch(void** save_sp, void* load_sp);
asm(R"(
.text
.globl tessera_emu_switch
.type tessera_emu_switch,@function
tessera_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size tessera_emu_switch, .-tessera_emu_switch
)");

struct Context {
  void* sp = nullptr;
};
void InitContext(Context* c, char* stack, size_t size, void (*entry)()) {
  auto* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack + size) & ~uintptr_t{15});
  uint64_t* sp = top - 9;  // [mxcsr|fpcw], r15, r14, r13, r12, rbx, rbp, entry, fake return address
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  sp[0] = mxcsr | (uint64_t{fpcw} << 32);
  for (int i = 1; i <= 6; ++i) sp[i] = 0;
  sp[7] = reinterpret_cast<uint64_t>(entry);
  sp[8] = 0;
  c->sp = sp;
}
inline void SwitchContext(Context* from, Context* to) { tessera_emu_switch(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
};
void InitContext(Context* c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}
inline void SwitchContext(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

enum class State : uint8_t { kReady, kWaitBlock, kWaitWarp, kDone };

struct Fiber {
  Context ctx;
  char* stack = nullptr;  // usable stack (a PROT_NONE guard page sits below it)
  State state = State::kDone;
  unsigned mask = 0;      // lanes of its warp it waits for (kWaitWarp)
  uint32_t exchanges = 0; // warp exchanges done: selects the slot parity
  uint3 tid{0, 0, 0};
  void* fake_stack = nullptr;  // ASan bookkeeping
};

size_t StackBytes() {
  static const size_t bytes = [] {
    const char* kb = std::getenv("TESSERA_EMU_STACK_KB");
    size_t v = kb != nullptr ? static_cast<size_t>(std::atoll(kb)) : 0;
#if defined(TESSERA_EMU_ASAN)
    if (v == 0) v = 512;
#else
    if (v == 0) v = 128;
#endif
    return v * 1024;
  }();
  return bytes;
}

// The running block of this OS thread.
struct BlockState {
  std::vector<Fiber> fibers;
  int n = 0;
  int current = -1;
  Context scheduler;
  const std::function<void()>* body = nullptr;
  const char* kernel = "";
  std::vector<uint64_t> slots;  // [warp][parity][lane]
  std::vector<unsigned char> smem;
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
  void* scheduler_fake_stack = nullptr;

  ~BlockState() {
    for (Fiber& f : fibers) {
      if (f.stack != nullptr) munmap(f.stack - 4096, StackBytes() + 4096);
    }
  }
};

thread_local BlockState* t_block = nullptr;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "cuda emulator: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

Fiber& Current() {
  if (t_block == nullptr || t_block->current < 0) Die("device function called outside a kernel");
  return t_block->fibers[t_block->current];
}

// Fiber -> scheduler, and back when the scheduler resumes this fiber.
void Yield(bool finished) {
  BlockState& b = *t_block;
  Fiber& f = b.fibers[b.current];
#if defined(TESSERA_EMU_ASAN)
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.fake_stack, b.main_stack_bottom, b.main_stack_size);
#endif
  SwitchContext(&f.ctx, &b.scheduler);
  if (finished) Die("a finished fiber was resumed");
#if defined(TESSERA_EMU_ASAN)
  __sanitizer_finish_switch_fiber(f.fake_stack, &b.main_stack_bottom, &b.main_stack_size);
#endif
}

void FiberEntry() {
  BlockState& b = *t_block;
#if defined(TESSERA_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &b.main_stack_bottom, &b.main_stack_size);
#endif
  (*b.body)();
  b.fibers[b.current].state = State::kDone;
  Yield(/*finished=*/true);
}

void Resume(BlockState& b, int i) {
  Fiber& f = b.fibers[i];
  b.current = i;
  g_thread_idx = f.tid;
#if defined(TESSERA_EMU_ASAN)
  __sanitizer_start_switch_fiber(&b.scheduler_fake_stack, f.stack, StackBytes());
#endif
  SwitchContext(&b.scheduler, &f.ctx);
#if defined(TESSERA_EMU_ASAN)
  __sanitizer_finish_switch_fiber(b.scheduler_fake_stack, nullptr, nullptr);
#endif
  b.current = -1;
}

const char* StateName(State s) {
  switch (s) {
    case State::kReady: return "ready";
    case State::kWaitBlock: return "__syncthreads";
    case State::kWaitWarp: return "warp sync";
    case State::kDone: return "exited";
  }
  return "?";
}

// Lanes of warp w that exist in a block of n threads.
unsigned ExistingLanes(int w, int n) {
  const int count = std::min(32, n - 32 * w);
  return count >= 32 ? 0xffffffffu : ((1u << count) - 1u);
}

[[noreturn]] void Deadlock(const BlockState& b, const std::string& why) {
  std::string msg = "kernel " + std::string(b.kernel) + " block (" + std::to_string(g_block_idx.x) + "," +
                    std::to_string(g_block_idx.y) + "," + std::to_string(g_block_idx.z) + "): " + why + "; threads:";
  int shown = 0;
  for (int i = 0; i < b.n && shown < 64; ++i, ++shown) {
    msg += " " + std::to_string(i) + "=" + StateName(b.fibers[i].state);
    if (b.fibers[i].state == State::kWaitWarp) {
      char m[16];
      std::snprintf(m, sizeof m, "(%08x)", b.fibers[i].mask);
      msg += m;
    }
  }
  Die(msg);
}

// Releases every group of warp-waiting lanes whose whole mask has arrived.
bool ReleaseWarps(BlockState& b) {
  bool released = false;
  for (int i = 0; i < b.n; ++i) {
    Fiber& f = b.fibers[i];
    if (f.state != State::kWaitWarp) continue;
    const int w = i / 32;
    const unsigned need = f.mask & ExistingLanes(w, b.n);
    bool all = true;
    for (int l = 0; l < 32 && all; ++l) {
      if (!(need & (1u << l))) continue;
      const Fiber& o = b.fibers[32 * w + l];
      if (o.state == State::kDone) {
        Deadlock(b, "a warp-synchronous call names lane " + std::to_string(l) + " of warp " +
                        std::to_string(w) + ", which has exited");
      }
      if (o.state != State::kWaitWarp || o.mask != f.mask) all = false;
    }
    if (!all) continue;
    for (int l = 0; l < 32; ++l) {
      if (need & (1u << l)) b.fibers[32 * w + l].state = State::kReady;
    }
    released = true;
  }
  return released;
}

void RunBlock(BlockState& b) {
  const dim3 bd = g_block_dim;
  for (int i = 0; i < b.n; ++i) {
    Fiber& f = b.fibers[i];
    f.state = State::kReady;
    f.exchanges = 0;
    f.mask = 0;
    f.fake_stack = nullptr;
    f.tid = {static_cast<unsigned>(i) % bd.x, (static_cast<unsigned>(i) / bd.x) % bd.y,
             static_cast<unsigned>(i) / (bd.x * bd.y)};
#if defined(TESSERA_EMU_ASAN)
    // Frames a finished fiber left live (FiberEntry, Yield) sit at the top of its
    // stack; deeper frames returned and cleared their own poison.
    ASAN_UNPOISON_MEMORY_REGION(f.stack + StackBytes() - 16384, 16384);
#endif
    InitContext(&f.ctx, f.stack, StackBytes(), FiberEntry);
  }
  for (;;) {
    bool live = false;
    for (int i = 0; i < b.n; ++i) {
      if (b.fibers[i].state == State::kReady) Resume(b, i);
    }
    bool any_block_wait = false, any_warp_wait = false;
    for (int i = 0; i < b.n; ++i) {
      const State s = b.fibers[i].state;
      live |= s != State::kDone;
      any_block_wait |= s == State::kWaitBlock;
      any_warp_wait |= s == State::kWaitWarp;
    }
    if (!live) return;
    if (any_warp_wait && ReleaseWarps(b)) continue;
    if (!any_warp_wait && any_block_wait) {
      for (int i = 0; i < b.n; ++i) {
        if (b.fibers[i].state == State::kWaitBlock) b.fibers[i].state = State::kReady;
      }
      continue;
    }
    Deadlock(b, "no barrier can be released (divergent __syncthreads or warp sync?)");
  }
}

BlockState& PrepareBlockState(int n, size_t smem) {
  static thread_local BlockState state;
  BlockState& b = state;
  const size_t stack = StackBytes();
  while (static_cast<int>(b.fibers.size()) < n) {
    b.fibers.emplace_back();
    void* map = mmap(nullptr, stack + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) Die("cannot map a fiber stack");
    mprotect(map, 4096, PROT_NONE);  // overflow faults instead of corrupting a neighbour
    b.fibers.back().stack = static_cast<char*>(map) + 4096;
  }
  b.n = n;
  b.slots.assign(static_cast<size_t>((n + 31) / 32) * 64, 0);
  if (b.smem.size() < smem) b.smem.resize(smem);
  return b;
}

}  // namespace

void SyncThreads() {
  Fiber& f = Current();
  f.state = State::kWaitBlock;
  Yield(false);
}

void SyncWarp(unsigned mask) {
  Fiber& f = Current();
  f.state = State::kWaitWarp;
  f.mask = mask;
  Yield(false);
}

int LaneId() {
  Current();
  return t_block->current % 32;
}

uint64_t WarpExchange(unsigned mask, uint64_t bits, int src_lane) {
  BlockState& b = *t_block;
  Fiber& f = Current();
  const int i = b.current, w = i / 32, lane = i % 32;
  const uint32_t parity = f.exchanges++ & 1u;
  uint64_t* slots = &b.slots[static_cast<size_t>(w) * 64 + parity * 32];
  slots[lane] = bits;
  SyncWarp(mask);
  if (src_lane < 0 || src_lane >= 32 || 32 * w + src_lane >= b.n) return bits;
  return slots[src_lane];
}

unsigned WarpBallot(unsigned mask, bool pred) {
  BlockState& b = *t_block;
  Fiber& f = Current();
  const int i = b.current, w = i / 32, lane = i % 32;
  const uint32_t parity = f.exchanges++ & 1u;
  uint64_t* slots = &b.slots[static_cast<size_t>(w) * 64 + parity * 32];
  slots[lane] = pred ? 1 : 0;
  SyncWarp(mask);
  unsigned out = 0;
  const unsigned existing = ExistingLanes(w, b.n);
  for (int l = 0; l < 32; ++l) {
    if ((mask & existing & (1u << l)) && slots[l] != 0) out |= 1u << l;
  }
  return out;
}

unsigned ActiveMask() {
  BlockState& b = *t_block;
  Current();
  const int w = b.current / 32;
  unsigned out = 0;
  for (int l = 0; l < 32 && 32 * w + l < b.n; ++l) {
    if (b.fibers[32 * w + l].state != State::kDone) out |= 1u << l;
  }
  return out;
}

void* DynamicSmem() {
  Current();
  return t_block->smem.data();
}

void ThreadFence() { std::atomic_signal_fence(std::memory_order_seq_cst); }

// Runs a whole grid now, on this OS thread.
void RunGrid(const LaunchConfig& c, const std::function<void()>& body) {
  if (t_block != nullptr && t_block->current >= 0) Die("kernel launched from inside a kernel");
  const int n = static_cast<int>(c.block.x * c.block.y * c.block.z);
  BlockState& b = PrepareBlockState(n, c.smem);
  b.body = &body;
  b.kernel = c.name;
  t_block = &b;
  g_block_dim = c.block;
  g_grid_dim = c.grid;
  for (unsigned z = 0; z < c.grid.z; ++z) {
    for (unsigned y = 0; y < c.grid.y; ++y) {
      for (unsigned x = 0; x < c.grid.x; ++x) {
        g_block_idx = {x, y, z};
        RunBlock(b);
      }
    }
  }
  t_block = nullptr;
}

void Launch(const LaunchConfig& c, std::function<void()> body) {
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
      c.grid.y > 65535 || c.grid.z > 65535 || c.grid.x > 0x7fffffffu || c.smem > 227 * 1024) {
    std::fprintf(stderr, "cuda emulator: kernel %s: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n",
                 c.name, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.smem);
    SetError(cudaErrorInvalidConfiguration);
    return;
  }
  const LaunchConfig config = c;
  const cudaError_t e = EnqueueOnStream(
      static_cast<cudaStream_t>(c.stream), [config, body = std::move(body)]() { RunGrid(config, body); }, c.name);
  if (e != cudaSuccess) SetError(e);
}

}  // namespace tessera::emu
