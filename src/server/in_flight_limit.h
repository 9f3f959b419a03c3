#pragma once
// Bounds the engine requests in flight (the queue bound behind 503): a slot is taken before a request goes to the
// engine and given back when its Generation ends, whichever way it ends.
#include <atomic>
#include <optional>
#include <utility>

namespace nanovllm::server {

class InFlightLimit {
 public:
  explicit InFlightLimit(int limit) : limit_(limit) {}

  // Holds `count` requests' places; movable, gives them back when destroyed.
  class Slot {
   public:
    Slot() = default;
    Slot(InFlightLimit* owner, int count) : owner_(owner), count_(count) {}
    Slot(Slot&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)), count_(other.count_) {}
    Slot& operator=(Slot&& other) noexcept {
      if (this != &other) {
        release();
        owner_ = std::exchange(other.owner_, nullptr);
        count_ = other.count_;
      }
      return *this;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { release(); }

   private:
    void release() {
      if (owner_) owner_->in_flight_.fetch_sub(count_);
      owner_ = nullptr;
    }
    InFlightLimit* owner_ = nullptr;
    int count_ = 0;
  };

  // Places for `count` more requests, or nothing when they would go over the limit.
  std::optional<Slot> try_acquire(int count) {
    int now = in_flight_.load();
    do {
      if (now + count > limit_) return std::nullopt;
    } while (!in_flight_.compare_exchange_weak(now, now + count));
    return Slot(this, count);
  }
  int in_flight() const { return in_flight_.load(); }

 private:
  const int limit_;
  std::atomic<int> in_flight_{0};
};

}  // namespace nanovllm::server
