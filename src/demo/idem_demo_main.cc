// idem-demo: `idem demo …` (examples/refund/cli/demo.cc), a program of its own so
// that the product binary does not link the refund example.
#include "refund/cli/refund_main.h"

int main(int argc, char** argv) {
  return idem::cli::RunAsSubcommand("demo", &idem::cli::AddDemoCommand, argc, argv);
}
