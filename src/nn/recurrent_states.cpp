// A sequence's recurrent states as a whole (recurrent_states.hpp).
#include "nn/recurrent_states.hpp"

namespace vkgate::nn {

void RecurrentStates::bind(const LayerCaches& caches) {
  caches_ = &caches;
  states_.clear();
  for (const auto& c : caches)
    for (const gpu::Buffer* b : c->states()) states_.push_back(b);
  clear_.reset();
  save_.reset();
  restore_.reset();
}

void RecurrentStates::clear() {
  if (!any()) return;
  if (!clear_) {
    clear_ = std::make_unique<gpu::Recorder>(vk_, tuning_);
    clear_->begin();
    for (const auto& c : *caches_) c->record_clear(*clear_);
    clear_->end();
  }
  clear_->submit("clearing the recurrent states of a sequence");
}

std::unique_ptr<gpu::Recorder> RecurrentStates::copies(bool saving) {
  if (saved_.empty())
    for (const gpu::Buffer* b : states_)
      saved_.push_back(vk_.allocator->allocate(b->size(), gpu::MemoryKind::device, b->name() + " (checkpoint)"));
  auto rec = std::make_unique<gpu::Recorder>(vk_, tuning_);
  rec->begin();
  for (size_t i = 0; i < states_.size(); ++i)
    if (saving) rec->copy(*states_[i], saved_[i], states_[i]->size());
    else rec->copy(saved_[i], *states_[i], states_[i]->size());
  rec->end();
  return rec;
}

void RecurrentStates::save() {
  if (!any()) return;
  if (!save_) save_ = copies(true);
  save_->submit("saving the recurrent states of a sequence (its checkpoint)");
}

void RecurrentStates::restore() {
  if (!any()) return;
  if (!restore_) restore_ = copies(false);
  restore_->submit("restoring the recurrent states of a sequence from its checkpoint");
}

uint64_t RecurrentStates::saved_bytes() const {
  uint64_t n = 0;
  for (const gpu::Buffer& b : saved_) n += b.size();
  return n;
}

}  // namespace vkgate::nn
