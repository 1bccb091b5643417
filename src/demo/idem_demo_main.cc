// idem-demo: `idem demo …` (src/demo/demo.cc), a program of its own so
// that the product binary does not link the refund example.
#include "demo/refund_main.h"

int main(int argc, char** argv) {
  return idem::cli::RunAsSubcommand("demo", &idem::cli::AddDemoCommand, argc, argv);
}
