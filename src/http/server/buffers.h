// Strings a thread reuses for what each request makes and lets go (a claim's
// answer body, its key): a server's network thread takes one to build into
// (TakeStringBuffer: empty, with the capacity an earlier request left) and gives it
// back once done with it (KeepStringBuffer). Up to 64 are kept a thread (two for
// each request a loop's turn decides), each up to 4 KiB; past that they are let go. On a lean loop a claim then allocates nothing
// for them.
//
// Thread safety: each thread has its own.
#pragma once

#include <string>

namespace idem::http {

std::string TakeStringBuffer();
void KeepStringBuffer(std::string&& buffer);

}  // namespace idem::http
