// Internal: recorded plans by key, the least recently used dropped beyond a
// bound, so that memory stays bounded whatever shapes a caller runs. A Plan
// owns its recorder as `rec`; the recordings of dropped plans are still
// counted (recordings()). Used by the model's forwards and sequences, the
// block facade and the GLA layer facade.
#pragma once

#include <algorithm>
#include <cstddef>
#include <list>
#include <memory>
#include <utility>

namespace vkgate::nn {

template <typename Key, typename Plan>
class PlanCache {
 public:
  explicit PlanCache(size_t capacity = 4) : capacity_(capacity) {}

  // The plan of `key`, now the most recently used; null when there is none.
  Plan* find(const Key& key) {
    auto it = std::find_if(plans_.begin(), plans_.end(), [&](const Entry& e) { return e.first == key; });
    if (it == plans_.end()) return nullptr;
    plans_.splice(plans_.begin(), plans_, it);
    return plans_.front().second.get();
  }
  // Adds the plan of `key` (not present), dropping the least recently used beyond the bound.
  Plan& add(const Key& key, std::unique_ptr<Plan> plan) {
    if (plans_.size() == capacity_) {
      dropped_recordings_ += plans_.back().second->rec->recordings();
      plans_.pop_back();
    }
    plans_.emplace_front(key, std::move(plan));
    return *plans_.front().second;
  }
  // Drops the plans whose key satisfies `pred`.
  template <typename Pred>
  void drop_if(Pred pred) {
    for (auto it = plans_.begin(); it != plans_.end();) {
      if (pred(it->first)) {
        dropped_recordings_ += it->second->rec->recordings();
        it = plans_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void clear() {
    drop_if([](const Key&) { return true; });
  }
  // Calls f(key, plan) for each plan, the most recently used first.
  template <typename F>
  void for_each(F f) const {
    for (const Entry& e : plans_) f(e.first, *e.second);
  }
  template <typename F>
  void for_each(F f) {
    for (Entry& e : plans_) f(e.first, *e.second);
  }
  size_t size() const { return plans_.size(); }
  // Command buffers recorded by every plan, the dropped ones' included.
  size_t recordings() const {
    size_t n = dropped_recordings_;
    for (const Entry& e : plans_) n += e.second->rec->recordings();
    return n;
  }

 private:
  using Entry = std::pair<Key, std::unique_ptr<Plan>>;
  size_t capacity_;
  std::list<Entry> plans_;
  size_t dropped_recordings_ = 0;
};

}  // namespace vkgate::nn
