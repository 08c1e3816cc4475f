// The weight budget and block streaming (docs/architecture.md, "Weight budget and streaming"):
// a network's blocks either stay resident or stream, block by block, from the model file through
// two staging slots, the next block read on a reader thread while the current one computes
// (Forge's async swap, ComfyUI's partial loading). The plan is made once at load; the networks call
// BlockHooks::enter/leave around each block.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/cancel.h"

namespace fp8s {

class SafetensorsFile;

// What a network calls around each of its blocks (numbered in its execution order).
class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  virtual void enter(int block) = 0;  // returns when the block's weights are in place
  virtual void leave(int block) = 0;
  // The pass ended early (cancel, error): no read stays in flight, nothing stays staged.
  virtual void abort() = 0;
};

// Calls enter/leave around one block (no hooks: nothing), and abort when the pass unwinds.
class BlockScope {
 public:
  // Every network's block loop passes here: it is also the cancel point inside a step or an encode.
  BlockScope(BlockHooks* hooks, int block) : hooks_(hooks), block_(block) {
    cancel_point();
    if (hooks_) hooks_->enter(block_);
  }
  ~BlockScope() {
    if (!hooks_) return;
    if (std::uncaught_exceptions() > uncaught_) hooks_->abort();
    else hooks_->leave(block_);
  }
  BlockScope(const BlockScope&) = delete;
  BlockScope& operator=(const BlockScope&) = delete;

 private:
  BlockHooks* hooks_;
  int block_;
  int uncaught_ = std::uncaught_exceptions();
};

// One block of a network as the plan sees it.
struct BlockCost {
  std::string name;  // "double_blocks.3", "input_blocks.4"
  uint64_t bytes = 0;  // its streamable weights in the storage type
  // Its compute per byte of weights, relative (a UNet block at 1/4 of the tokens: 1/4): the blocks
  // whose transfer the compute hides best stream first.
  double compute_per_byte = 1.0;
};

struct ResidencyPlan {
  std::vector<BlockCost> blocks;  // the network's blocks in execution order
  uint64_t fixed_bytes = 0;  // the streamable layers outside the blocks: resident, counted against the budget first
  std::vector<bool> streamed;  // per block
  uint64_t resident_bytes = 0;  // the resident blocks' weights
  uint64_t streamed_bytes = 0;  // the streamed blocks' weights: what one pass reads
  uint64_t largest_streamed = 0;  // the largest streamed block (a staging slot's size)
  int streamed_count() const;
  bool any() const { return streamed_count() > 0; }
  // "resident 31 of 57 blocks, 9.8 GB; streaming 26 blocks, 13.9 GB a step"
  std::string describe() const;
};

// Keeps blocks resident within `budget` bytes, of which `fixed` (the layers outside the blocks)
// come first (UINT64_MAX: all resident; at most `fixed`: every block streams), streaming first the
// blocks with the most compute per byte (ties: the later block first).
ResidencyPlan plan_residency(const std::vector<BlockCost>& blocks, uint64_t budget, uint64_t fixed = 0);

// The budget a `--weight-budget` value names: "auto" (unset), or a size ("8G", "512M", "2.5GB",
// "0"). InputError for anything else.
std::optional<uint64_t> parse_weight_budget(const std::string& text);

struct StreamStats {
  uint64_t bytes_read = 0;  // weights staged from the file
  uint64_t loads = 0;       // blocks staged
  double read_ms = 0;       // the reader's time staging them
  double wait_ms = 0;       // the compute's time waiting for a block
  StreamStats& operator+=(const StreamStats& o) {  // two networks' streaming (a denoiser and its text encoder)
    bytes_read += o.bytes_read;
    loads += o.loads;
    read_ms += o.read_ms;
    wait_ms += o.wait_ms;
    return *this;
  }
};

// The CPU transport: the streamed blocks' weights stay in the file; a reader thread stages the
// next streamed block (`load(i)`, which returns the bytes it read) while the current computes, and
// `release(i)` drops a block after use. At most two streamed blocks are staged at once.
class BlockStreamer : public BlockHooks {
 public:
  BlockStreamer(std::vector<bool> streamed, std::function<uint64_t(int)> load, std::function<void(int)> release);
  ~BlockStreamer() override;  // cancels, joins the reader, releases what is staged
  BlockStreamer(const BlockStreamer&) = delete;
  BlockStreamer& operator=(const BlockStreamer&) = delete;

  void enter(int block) override;
  void leave(int block) override;
  void abort() override;

  StreamStats stats() const;
  void reset_stats();
  bool reader_running() const;  // the reader thread exists (it ends on abort and destruction)

 private:
  enum class State { Idle, Queued, Loading, Ready };
  void run();
  void queue_locked(int block);
  int next_streamed(int after) const;
  void stop_reader();

  std::vector<bool> streamed_;
  std::function<uint64_t(int)> load_;
  std::function<void(int)> release_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<State> state_;
  std::vector<std::exception_ptr> error_;
  std::vector<int> queue_;
  bool stop_ = false;
  std::thread reader_;
  StreamStats stats_;
};

// A network's streaming as its model holds it: the plan, the transport (none: all resident) and
// the file its blocks stream from (kept open while they do; may be unset when the model holds it).
struct NetworkStreaming {
  ResidencyPlan plan;
  std::unique_ptr<BlockStreamer> streamer;
  std::shared_ptr<const SafetensorsFile> file;
  StreamStats stats() const { return streamer ? streamer->stats() : StreamStats{}; }
  void reset_stats() {
    if (streamer) streamer->reset_stats();
  }
  void end() {  // after sampling: no read in flight, nothing staged
    if (streamer) streamer->abort();
  }
  void clear() {  // the streamer first: its reader joins before the blocks go
    streamer.reset();
    file.reset();
    plan = {};
  }
};

}  // namespace fp8s
