#include "cli/reason.h"

#include <cstdio>
#include <string>

namespace idem::cli {

void PrintReason(std::string_view message) {
  std::string line = "idem: ";
  for (char c : message) line += (c == '\n' || c == '\r') ? ' ' : c;
  while (!line.empty() && line.back() == ' ') line.pop_back();
  line += '\n';
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace idem::cli
