#include "models/streaming.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace fp8s {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

int ResidencyPlan::streamed_count() const {
  return static_cast<int>(std::count(streamed.begin(), streamed.end(), true));
}

std::string ResidencyPlan::describe() const {
  const int n = static_cast<int>(streamed.size()), s = streamed_count();
  return "resident " + std::to_string(n - s) + " of " + std::to_string(n) + " blocks, " + gb(resident_bytes) +
         "; streaming " + std::to_string(s) + " blocks, " + gb(streamed_bytes) + " a step";
}

ResidencyPlan plan_residency(const std::vector<BlockCost>& blocks, uint64_t budget_in, uint64_t fixed) {
  const uint64_t budget = budget_in > fixed ? budget_in - fixed : 0;
  ResidencyPlan plan;
  plan.blocks = blocks;
  plan.fixed_bytes = fixed;
  plan.streamed.assign(blocks.size(), false);
  for (const auto& b : blocks) plan.resident_bytes += b.bytes;
  // the order blocks go to streaming in: most compute per byte first, the later block on a tie
  std::vector<std::size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (blocks[a].compute_per_byte != blocks[b].compute_per_byte) return blocks[a].compute_per_byte > blocks[b].compute_per_byte;
    return a > b;
  });
  for (const std::size_t i : order) {
    if (plan.resident_bytes <= budget) break;
    plan.streamed[i] = true;
    plan.resident_bytes -= blocks[i].bytes;
    plan.streamed_bytes += blocks[i].bytes;
    plan.largest_streamed = std::max(plan.largest_streamed, blocks[i].bytes);
  }
  return plan;
}

std::optional<uint64_t> parse_weight_budget(const std::string& text) {
  if (text.empty() || text == "auto") return std::nullopt;
  const auto bad = [&] {
    return InputError("--weight-budget " + text + ": give a size such as 8G, 512M or 0 (stream every block), or auto");
  };
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit = text.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b') && unit.size() > 1) unit.pop_back();
  double scale = 1;
  if (unit == "K" || unit == "k") scale = 1ull << 10;
  else if (unit == "M" || unit == "m") scale = 1ull << 20;
  else if (unit == "G" || unit == "g") scale = 1ull << 30;
  else if (unit == "T" || unit == "t") scale = 1ull << 40;
  else if (!unit.empty() && unit != "B" && unit != "b") throw bad();
  if (!std::isfinite(value) || value < 0 || value * scale > 1e18) throw bad();
  return static_cast<uint64_t>(value * scale);
}

BlockStreamer::BlockStreamer(std::vector<bool> streamed, std::function<uint64_t(int)> load,
                             std::function<void(int)> release)
    : streamed_(std::move(streamed)), load_(std::move(load)), release_(std::move(release)),
      state_(streamed_.size(), State::Idle), error_(streamed_.size()) {}

BlockStreamer::~BlockStreamer() {
  stop_reader();
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (state_[i] == State::Ready) release_(static_cast<int>(i));
  }
}

void BlockStreamer::stop_reader() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    for (const int b : queue_) state_[b] = State::Idle;
    queue_.clear();
  }
  cv_.notify_all();
  if (reader_.joinable()) reader_.join();
}

int BlockStreamer::next_streamed(int after) const {
  const int n = static_cast<int>(streamed_.size());
  for (int k = 1; k < n; ++k) {
    const int j = (after + k) % n;
    if (streamed_[j]) return j == after ? -1 : j;
  }
  return -1;
}

void BlockStreamer::queue_locked(int block) {
  state_[block] = State::Queued;
  queue_.push_back(block);
  if (!reader_.joinable()) {
    stop_ = false;
    reader_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
}

void BlockStreamer::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const int b = queue_.front();
    queue_.erase(queue_.begin());
    state_[b] = State::Loading;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t bytes = 0;
    std::exception_ptr error;
    try {
      bytes = load_(b);
    } catch (...) {
      error = std::current_exception();
    }
    const double ms = ms_since(t0);
    lock.lock();
    state_[b] = State::Ready;
    error_[b] = error;
    stats_.bytes_read += bytes;
    stats_.loads += error ? 0 : 1;
    stats_.read_ms += ms;
    cv_.notify_all();
  }
}

void BlockStreamer::enter(int block) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (streamed_[block]) {
    if (state_[block] == State::Idle) queue_locked(block);
    if (state_[block] != State::Ready) {
      const auto t0 = std::chrono::steady_clock::now();
      cv_.wait(lock, [&] { return state_[block] == State::Ready; });
      stats_.wait_ms += ms_since(t0);
    }
    if (error_[block]) {  // the pass ends here: the reader stops, what is staged goes
      const auto error = error_[block];
      lock.unlock();
      abort();
      std::rethrow_exception(error);
    }
  }
  // the next streamed block: staged while this one computes (two slots: this one and that one)
  const int next = next_streamed(block);
  if (next >= 0 && state_[next] == State::Idle) queue_locked(next);
}

void BlockStreamer::leave(int block) {
  if (!streamed_[block]) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  release_(block);
  state_[block] = State::Idle;
}

void BlockStreamer::abort() {
  stop_reader();  // a read in flight finishes; nothing queued starts; the reader thread ends
  const std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (state_[i] == State::Ready) release_(static_cast<int>(i));
    state_[i] = State::Idle;
    error_[i] = nullptr;
  }
}

StreamStats BlockStreamer::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void BlockStreamer::reset_stats() {
  const std::lock_guard<std::mutex> lock(mutex_);
  stats_ = {};
}

bool BlockStreamer::reader_running() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return reader_.joinable();
}

}  // namespace fp8s
