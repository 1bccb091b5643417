// The memory:// store: the reference implementation of the Store contract, for
// unit tests and the conformance suite. Records live in a map; a transaction holds
// the store-wide lock from Begin() to Commit()/Rollback(), so transactions are
// serializable. It has no SQL: Transaction::Exec/Query answer kUnimplemented.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <memory>

#include "idem/store.h"

namespace idem {

std::unique_ptr<Store> NewMemoryStore();

}  // namespace idem
