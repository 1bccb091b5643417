// FileIdentity: the file or directory an embedded store opened, by identity (device
// and inode), not by name. A database deleted or replaced under a running store (rm,
// a restore copied over it, another volume mounted there) would otherwise take
// writes into an unlinked inode that vanishes at exit, or mix two databases, and the
// next start would acquire completed keys again: a duplicate effect. So a store
// checks its identity before it acknowledges anything (the store's fault,
// 503, nothing acknowledged). Used by sqlite:// (its file) and rocksdb:// (its
// directory).
//
// Thread safety: immutable after Of(); Check() may be called concurrently.
#pragma once

#include <sys/stat.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "idem/store.h"
#include "store/backend.h"

namespace idem::store {

class FileIdentity {
 public:
  // The identity of `path` now; `what` names it in messages ("sqlite database").
  // For an empty path (no file: ":memory:") Check() always answers OK.
  static absl::StatusOr<FileIdentity> Of(const std::string& path, std::string what) {
    FileIdentity id;
    id.path_ = path;
    id.what_ = std::move(what);
    if (path.empty()) return id;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return StoreFaultError(absl::StrCat(id.what_, " '", path, "' vanished while opening"));
    }
    id.dev_ = st.st_dev;
    id.ino_ = st.st_ino;
    id.file_ = true;
    return id;
  }

  // OK while the path still names what was opened; else a store fault: the store
  // stops acknowledging anything.
  absl::Status Check() const {
    if (!file_) return absl::OkStatus();
    struct stat st;
    if (stat(path_.c_str(), &st) != 0) {
      return StoreFaultError(absl::StrCat(
          what_, " '", path_, "' was deleted while idem had it open: nothing is "
          "acknowledged until it is back (restore it, then restart idem)"));
    }
    if (st.st_dev != dev_ || st.st_ino != ino_) {
      return StoreFaultError(absl::StrCat(
          what_, " '", path_, "' was replaced by another one while idem had it open: "
          "nothing is acknowledged (restart idem to open the new one)"));
    }
    return absl::OkStatus();
  }

 private:
  std::string path_;
  std::string what_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool file_ = false;
};

}  // namespace idem::store
