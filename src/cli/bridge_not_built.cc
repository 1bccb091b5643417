// `idem bridge` in a build without librdkafka (IDEM_WITH_KAFKA=OFF, or AUTO without
// librdkafka-dev): the subcommand is still there, takes any options, and says that
// it was not compiled in (exit status 1), so a script learns why rather than
// meeting an unknown subcommand.
#include <memory>

#include "CLI/CLI.hpp"
#include "cli/commands.h"
#include "cli/reason.h"

namespace idem::cli {

CommandFn AddBridgeCommand(CLI::App& root) {
  CLI::App* bridge = root.add_subcommand(
      "bridge",
      "Deliver messages to an HTTP endpoint once per event (not compiled into this build)");
  bridge->require_subcommand(1);
  CLI::App* sub = bridge->add_subcommand(
      "kafka", "Not compiled into this build of idem (it was built without librdkafka)");
  // Any options, kept here (not passed up to the root, which refuses unknown ones).
  sub->fallthrough(false);
  sub->allow_extras();
  return [sub]() -> int {
    if (!sub->parsed()) return kExitUsage;
    PrintReason(
        "bridge kafka: Kafka is not compiled into this build of idem (rebuild with librdkafka-dev "
        "and -DIDEM_WITH_KAFKA=ON)");
    return kExitFailure;
  };
}

}  // namespace idem::cli
