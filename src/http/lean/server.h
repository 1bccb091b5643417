// The lean HTTP/1.1 engine of Server (server/server.h, HttpEngine::kLean): a
// run-to-completion design. io_threads event loops, each with an epoll descriptor
// of its own, share one listening socket (EPOLLEXCLUSIVE wakes one loop per new
// connection); a connection stays on the loop that accepted it. The loop reads
// every ready connection, parses its requests with http_parser, decides each on
// that thread when the Handler can (AnswerWithoutBlocking), renders the answers
// into the connection's write buffer and writes each connection once per loop
// turn. What blocks goes to the worker pool (Answer, Waiting::Poll) or is started
// (StartAsync); its Reply comes back to the owning loop through the loop's queue
// and eventfd, so a loop never waits for anything but epoll.
//
// Timers are coarse: each connection keeps its deadlines (idle, header, body,
// write, a waiting claim's next poll, the drain after a close), and the loop scans
// its connections when the earliest one is due, instead of a timer per request.
//
// The behaviour is the Beast engine's (server.h): the connection cap and the
// reserve descriptor, authentication before the body (BeforeBody), 100-continue,
// 408/413/431, HEAD, keep-alive, pipelining answered in order, graceful Shutdown.
//
// Thread safety: as Server's.
#pragma once

#include <memory>

#include "http/server/engine.h"
#include "http/server/handler.h"
#include "http/server/server.h"

namespace idem::http {

// A lean engine for `handler` (which must outlive it), not started.
std::unique_ptr<ServerEngine> MakeLeanServer(Handler& handler, ServerOptions options);

}  // namespace idem::http
