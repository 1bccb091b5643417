#include "store/write_stage.h"

namespace idem::store {

namespace internal {
std::atomic<WriteStageHook> g_write_stage_hook{nullptr};
}  // namespace internal

void SetWriteStageHook(WriteStageHook hook) {
  internal::g_write_stage_hook.store(hook, std::memory_order_relaxed);
}

}  // namespace idem::store
