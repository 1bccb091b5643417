#include "store/turn.h"

namespace idem::store {
namespace {

thread_local Turn* current_turn = nullptr;

}  // namespace

Turn::Scope::Scope(Turn& turn) : previous_(current_turn) { current_turn = &turn; }

Turn::Scope::~Scope() { current_turn = previous_; }

Turn* Turn::Current() { return current_turn; }

bool Turn::RunDeferred() {
  bool ran = false;
  while (!work_.empty()) {
    ran = true;
    running_.swap(work_);
    for (const auto& [owner, work] : running_) work->AtTurnEnd();
    running_.clear();
  }
  return ran;
}

}  // namespace idem::store
