// The block streamer (models/streaming.h) and its plan, built with ThreadSanitizer: a data race
// between the reader thread and the compute fails the test. It checks, against numbers written
// out here:
// - the plan: which blocks stream for a budget (most compute per byte first, later block on a tie),
//   and the budget flag's sizes;
// - passes over the blocks with every plan: each block's weights are in place when the compute
//   enters it (the bytes equal the file's), never more than two streamed blocks are staged, the
//   next block is read while the current computes (prefetch), and the bytes read per pass;
// - a read that fails (a truncated file) fails the block's enter with its message;
// - an abort during a prefetch returns with the reader joined and nothing staged; the destructor
//   joins too.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "models/streaming.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
}

// A "file" of blocks and the staging slots the loads fill.
struct Blocks {
  std::vector<std::vector<uint8_t>> file, staged;
  std::atomic<int> staged_now{0}, staged_max{0};
  std::atomic<int> fail_block{-1};
  std::chrono::milliseconds read_time{0};
  explicit Blocks(int n) : file(n), staged(n) {
    for (int i = 0; i < n; ++i) file[i].assign(1000 + 100 * i, static_cast<uint8_t>(i * 37 + 1));
  }
  uint64_t load(int i) {
    if (i == fail_block.load()) throw fp8s::InputError("block " + std::to_string(i) + ": the file was truncated");
    std::this_thread::sleep_for(read_time);
    staged[i] = file[i];
    const int now = ++staged_now;
    int prev = staged_max.load();
    while (now > prev && !staged_max.compare_exchange_weak(prev, now)) {
    }
    return file[i].size();
  }
  void release(int i) {
    if (staged[i].empty()) return;
    staged[i].clear();
    staged[i].shrink_to_fit();
    --staged_now;
  }
};

void plan_cases() {
  using fp8s::BlockCost;
  // four blocks of 10, 20, 30, 40 bytes; block 1 computes twice as much per byte
  const std::vector<BlockCost> blocks{{"a", 10, 1.0}, {"b", 20, 2.0}, {"c", 30, 1.0}, {"d", 40, 1.0}};
  auto plan = fp8s::plan_residency(blocks, UINT64_MAX);
  check(plan.streamed_count() == 0 && plan.resident_bytes == 100, "an unlimited budget keeps every block");
  plan = fp8s::plan_residency(blocks, 80);  // 100 > 80: b (most compute per byte) streams, 80 remain
  check(plan.streamed == std::vector<bool>{false, true, false, false} && plan.resident_bytes == 80 &&
            plan.streamed_bytes == 20 && plan.largest_streamed == 20,
        "budget 80 streams block b");
  plan = fp8s::plan_residency(blocks, 30);  // then the later blocks on the tie: d (40 left), c (10 left)
  check(plan.streamed == std::vector<bool>{false, true, true, true} && plan.resident_bytes == 10 &&
            plan.streamed_bytes == 90 && plan.largest_streamed == 40,
        "budget 30 keeps block a only");
  plan = fp8s::plan_residency(blocks, 0);
  check(plan.streamed_count() == 4 && plan.resident_bytes == 0, "budget 0 streams every block");
  check(plan.describe() == "resident 0 of 4 blocks, 0.0 GB; streaming 4 blocks, 0.0 GB a step", plan.describe());
  check(!fp8s::parse_weight_budget("auto"), "auto is unset");
  check(*fp8s::parse_weight_budget("8G") == 8ull << 30, "8G");
  check(*fp8s::parse_weight_budget("512MB") == 512ull << 20, "512MB");
  check(*fp8s::parse_weight_budget("2.5G") == 5ull << 29, "2.5G");
  check(*fp8s::parse_weight_budget("0") == 0, "0");
  for (const char* bad : {"-1G", "8Q", "lots", "1e30G", ""}) {
    try {
      if (std::string(bad).empty()) continue;  // empty is auto
      fp8s::parse_weight_budget(bad);
      check(false, std::string("accepted ") + bad);
    } catch (const fp8s::InputError& e) {
      check(std::string(e.what()).find("--weight-budget") == 0, e.what());
    }
  }
}

// Runs `passes` passes over the blocks as a network does, checking each streamed block's bytes.
void run_passes(fp8s::BlockStreamer& s, Blocks& b, const std::vector<bool>& streamed, int passes) {
  const int n = static_cast<int>(streamed.size());
  for (int p = 0; p < passes; ++p) {
    for (int i = 0; i < n; ++i) {
      const fp8s::BlockScope scope(&s, i);
      if (streamed[i]) check(b.staged[i] == b.file[i], "block " + std::to_string(i) + " in place when entered");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the block's compute
    }
  }
}

void streaming_cases() {
  const int n = 6;
  const std::vector<std::vector<bool>> plans{{true, true, true, true, true, true},
                                             {false, true, true, true, true, true},
                                             {true, false, false, false, false, false},
                                             {false, false, true, false, true, false}};
  for (const auto& streamed : plans) {
    Blocks b(n);
    b.read_time = std::chrono::milliseconds(2);
    {
      fp8s::BlockStreamer s(streamed, [&](int i) { return b.load(i); }, [&](int i) { b.release(i); });
      run_passes(s, b, streamed, 3);
      uint64_t per_pass = 0;
      for (int i = 0; i < n; ++i) per_pass += streamed[i] ? b.file[i].size() : 0;
      const auto stats = s.stats();
      // three passes read each streamed block three times (the last pass's prefetch of the first
      // streamed block for a next pass may have started too)
      check(stats.bytes_read >= 3 * per_pass && stats.bytes_read <= 3 * per_pass + b.file[0].size() + 1000,
            "bytes read: " + std::to_string(stats.bytes_read) + " for " + std::to_string(per_pass) + " a pass");
      check(b.staged_max.load() <= 2, "at most two blocks staged, saw " + std::to_string(b.staged_max.load()));
    }
    check(b.staged_now.load() == 0, "the destructor released what was staged");
  }
  // prefetch: with reads as long as the compute, the compute waits for (about) the first read only
  {
    const std::vector<bool> all(n, true);
    Blocks b(n);
    b.read_time = std::chrono::milliseconds(20);
    fp8s::BlockStreamer s(all, [&](int i) { return b.load(i); }, [&](int i) { b.release(i); });
    for (int i = 0; i < n; ++i) {
      const fp8s::BlockScope scope(&s, i);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    const auto stats = s.stats();
    check(stats.wait_ms < 20.0 * n / 2, "prefetch hides the reads: waited " + std::to_string(stats.wait_ms) + " ms");
    s.abort();
  }
  // a failed read fails the block's enter with its message; the next pass reads it again
  {
    const std::vector<bool> all(n, true);
    Blocks b(n);
    b.fail_block = 3;
    fp8s::BlockStreamer s(all, [&](int i) { return b.load(i); }, [&](int i) { b.release(i); });
    std::string message;
    try {
      run_passes(s, b, all, 1);
    } catch (const fp8s::InputError& e) {
      message = e.what();
    }
    check(message == "block 3: the file was truncated", "the read's error: '" + message + "'");
    check(!s.reader_running() && b.staged_now.load() == 0, "the failed pass aborted: reader joined, nothing staged");
    b.fail_block = -1;
    run_passes(s, b, all, 1);
  }
  // an abort during a prefetch: the read in flight finishes, the reader ends, nothing stays staged
  {
    const std::vector<bool> all(n, true);
    Blocks b(n);
    b.read_time = std::chrono::milliseconds(50);
    fp8s::BlockStreamer s(all, [&](int i) { return b.load(i); }, [&](int i) { b.release(i); });
    try {
      const fp8s::BlockScope scope(&s, 0);  // block 1's read starts now
      throw std::runtime_error("cancelled");
    } catch (const std::runtime_error&) {
    }
    check(!s.reader_running(), "no reader thread after the abort");
    check(b.staged_now.load() == 0, "nothing staged after the abort");
  }
}

}  // namespace

int main() {
  plan_cases();
  streaming_cases();
  if (failures) {
    std::fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  std::printf("block streamer: all cases passed\n");
  return 0;
}
