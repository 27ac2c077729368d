// The kernels' worker threads: `Parallel(pool, n, alone, work)` runs work(0 .. n-1) on the calling
// thread and on helper threads, and returns when every item is done.
//
// Why a crew of its own: a decode step makes about four weight calls and one attention call per
// layer, each of a few dozen microseconds at batch 1. Handing such a call to a sleeping thread of
// XLA's pool costs a futex wake-up (6-30 us on a VM, measured with a condition-variable ping-pong),
// so the helper often arrived after the caller had done most of the work: two cores decoded only
// 1.3x faster than one. The crew's threads instead spin for a short while after each call
// (MEMLOOP_KERNEL_SPIN_US, default 1000 us; 0 sleeps at once) and see the next call within a
// fraction of a microsecond, the way llama.cpp's own thread pool waits between operations. After
// the spin they sleep on a condition variable, so an idle engine costs nothing.
//
// Safety: the caller claims items too and waits only for items that were claimed, so a call never
// depends on a helper being awake, present (a forked child has none) or free. One call uses the
// crew at a time; a call that finds it in use (two engines in one process) goes to XLA's pool
// instead. A claim is one 64-bit word (generation, item count, next item) changed by
// compare-and-swap, so a late helper can never take an item of the wrong call: the call's fields
// are read only after a successful claim of an item below its count, and the caller does not move
// on until every such item is done.
#pragma once

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace memloop_kernels {

namespace ffi = xla::ffi;

class Crew {
 public:
  // The process's crew, created on first use with `helpers` threads (XLA's pool size - 1) and kept
  // for the life of the process (its threads are detached, so exit never waits for them).
  static Crew& Get(int64_t helpers) {
    static Crew* crew = new Crew(helpers);
    return *crew;
  }

  // Runs call(ctx, i) for i in [0, n) on the caller and the crew. False (nothing run) if another
  // call holds the crew or n does not fit a claim word.
  bool Run(int64_t n, void (*call)(void*, int64_t), void* ctx) {
    if (n < 1 || n > kMaxItems || helpers_ == 0) return false;
    std::unique_lock<std::mutex> own(busy_, std::try_to_lock);
    if (!own.owns_lock()) return false;
    call_ = call;
    ctx_ = ctx;
    done_.store(0, std::memory_order_relaxed);
    gen_ = (gen_ + 1) & kMask;
    claim_.store((gen_ << 40) | (static_cast<uint64_t>(n) << 20), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_.notify_all();
    }
    Work();
    while (done_.load(std::memory_order_acquire) < n) _mm_pause();
    return true;
  }

  // Holds the crew as a running call does until *release is set, having set *held once it holds it:
  // calls made meanwhile find it in use, which is otherwise a matter of timing (tests, diagnostics).
  void Hold(int32_t* held, const int32_t* release) {
    std::lock_guard<std::mutex> own(busy_);
    __atomic_store_n(held, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(release, __ATOMIC_ACQUIRE) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

 private:
  static constexpr uint64_t kMask = (uint64_t{1} << 20) - 1;
  static constexpr int64_t kMaxItems = static_cast<int64_t>(kMask);

  explicit Crew(int64_t helpers) : helpers_(std::max<int64_t>(0, helpers)) {
    const char* spin = std::getenv("MEMLOOP_KERNEL_SPIN_US");
    spin_us_ = spin != nullptr ? std::max(0L, std::strtol(spin, nullptr, 10)) : 1000;
    for (int64_t t = 0; t < helpers_; ++t) std::thread([this] { Serve(); }).detach();
  }

  static bool Open(uint64_t c) { return (c & kMask) < ((c >> 20) & kMask); }

  // Claims and runs items of the current call until none are left.
  void Work() {
    uint64_t c = claim_.load(std::memory_order_acquire);
    while (Open(c)) {
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      call_(ctx_, static_cast<int64_t>(c & kMask));
      done_.fetch_add(1, std::memory_order_release);
      c = claim_.load(std::memory_order_acquire);
    }
  }

  void Serve() {
    for (;;) {
      Work();
      if (Spin()) continue;
      std::unique_lock<std::mutex> lock(sleep_mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [this] { return Open(claim_.load(std::memory_order_seq_cst)); });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  // Waits up to spin_us_ for a call with open items; true if one came.
  bool Spin() {
    if (spin_us_ == 0) return false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    for (int round = 0;; ++round) {
      for (int i = 0; i < 64; ++i) {
        if (Open(claim_.load(std::memory_order_acquire))) return true;
        _mm_pause();
      }
      if ((round & 3) == 3) {
        // Give the core to any other runnable thread (XLA's pool running the ops between two
        // kernel calls, in parallel at large batch): a spinning thread would otherwise hold it
        // until the scheduler's time slice ends. With nothing else runnable this returns at once.
        sched_yield();
        if (std::chrono::steady_clock::now() >= until) return false;
      }
    }
  }

  const int64_t helpers_;
  long spin_us_ = 1000;
  std::mutex busy_;                 // held by the call that uses the crew
  uint64_t gen_ = 0;                // the last call's generation (under busy_)
  std::atomic<uint64_t> claim_{0};  // generation << 40 | items << 20 | next item
  std::atomic<int64_t> done_{0};
  void (*call_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

// Calls split so far, by who helped: the crew, XLA's pool, nobody (memloop_kernel_splits reads them).
inline std::atomic<int64_t> split_calls[3] = {};
enum Split { kByCrew = 0, kByPool = 1, kAlone = 2 };

// Who helps the calling thread with a call's items.
enum class Helpers {
  kNone,  // nobody: the call is too small to split
  kCrew,  // the crew if it is free, else nobody: too small to pay for waking a sleeping pool thread
  kAny,   // the crew if it is free, else XLA's pool
};

// Runs work(0 .. n-1) on the calling thread and its helpers; returns when all are done.
template <typename F>
void Parallel(ffi::ThreadPool& pool, int64_t n, Helpers helpers, F work) {
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  auto alone = [&] {
    for (int64_t i = 0; i < n; ++i) work(i);
  };
  if (helpers == Helpers::kNone || n < 2 || threads < 2) return alone();
  auto call = [](void* ctx, int64_t i) { (*static_cast<F*>(ctx))(i); };
  if (Crew::Get(threads - 1).Run(n, call, &work)) {
    split_calls[kByCrew].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (helpers == Helpers::kCrew) {
    split_calls[kAlone].fetch_add(1, std::memory_order_relaxed);
    return alone();
  }
  split_calls[kByPool].fetch_add(1, std::memory_order_relaxed);
  struct Shared {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  // Pool tasks may start after this call returned: they hold the counters, and find no items.
  auto shared = std::make_shared<Shared>();
  auto run = [shared, n, work] {
    for (int64_t i; (i = shared->next.fetch_add(1)) < n;) {
      work(i);
      shared->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 0; t < std::min(threads, n) - 1; ++t) pool.Schedule([run] { run(); });
  run();
  while (shared->done.load(std::memory_order_acquire) < n) _mm_pause();
}

}  // namespace memloop_kernels
