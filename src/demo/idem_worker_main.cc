// idem-worker: `idem worker …` (src/demo/worker.cc), the step worker of
// the refund example's operations, a program of its own so that the product binary
// does not link the example. Your own operation types run under idem::Worker in
// your own program (include/idem/steps.h).
#include "demo/refund_main.h"

int main(int argc, char** argv) {
  return idem::cli::RunAsSubcommand("worker", &idem::cli::AddWorkerCommand, argc, argv);
}
