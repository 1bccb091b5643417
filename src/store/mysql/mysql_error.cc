#include "store/mysql/mysql_error.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "idem/store.h"
#include "store/absl_compat.h"
#include "store/backend.h"

namespace idem::mysql {

bool IsConnectionError(unsigned int err) {
  switch (err) {
    case 1040:  // ER_CON_COUNT_ERROR: too many connections (at connect)
    case 1053:  // ER_SERVER_SHUTDOWN
    case 1152:  // ER_ABORTING_CONNECTION
    case 1153:  // ER_NET_PACKET_TOO_LARGE
    case 1154:  // ER_NET_READ_ERROR_FROM_PIPE
    case 1155:  // ER_NET_FCNTL_ERROR
    case 1156:  // ER_NET_PACKETS_OUT_OF_ORDER
    case 1157:  // ER_NET_UNCOMPRESS_ERROR
    case 1158:  // ER_NET_READ_ERROR
    case 1159:  // ER_NET_READ_INTERRUPTED
    case 1160:  // ER_NET_ERROR_ON_WRITE
    case 1161:  // ER_NET_WRITE_INTERRUPTED
    case 1927:  // ER_CONNECTION_KILLED (MariaDB)
    case 2002:  // CR_CONNECTION_ERROR
    case 2003:  // CR_CONN_HOST_ERROR
    case 2006:  // CR_SERVER_GONE_ERROR
    case 2013:  // CR_SERVER_LOST
    case 2014:  // CR_COMMANDS_OUT_OF_SYNC: the protocol state is unknown
    case 2026:  // CR_SSL_CONNECTION_ERROR
    case 2055:  // CR_SERVER_LOST_EXTENDED
    case 3169:  // ER_SESSION_WAS_KILLED (MySQL 8)
    case 4031:  // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8): idle session closed
      return true;
    default:
      return false;
  }
}

absl::Status ToStatus(unsigned int err, std::string_view sqlstate, std::string_view message,
                      std::string_view context) {
  const std::string text =
      absl::StrCat(AV(context), ": mysql error ", err, " (", AV(sqlstate), "): ", AV(message));
  switch (err) {
    // A missing or wrong schema, or no privilege on a table: the store's fault
    //, whatever the statement.
    case 1146:  // ER_NO_SUCH_TABLE
    case 1054:  // ER_BAD_FIELD_ERROR
    case 1142:  // ER_TABLEACCESS_DENIED_ERROR
    case 1143:  // ER_COLUMNACCESS_DENIED_ERROR
    case 1036:  // ER_OPEN_AS_READONLY
    // A full disk.
    case 1021:  // ER_DISK_FULL
    case 1114:  // ER_RECORD_FILE_FULL
    // Transient server states: a failover (read-only), a busy or restarting server,
    // an interrupted query.
    case 1203:  // ER_TOO_MANY_USER_CONNECTIONS
    case 1290:  // ER_OPTION_PREVENTS_STATEMENT (--read-only)
    case 1317:  // ER_QUERY_INTERRUPTED
    case 1615:  // ER_NEED_REPREPARE
    case 1637:  // ER_TOO_MANY_CONCURRENT_TRXS
    case 1792:  // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
    case 1836:  // ER_READ_ONLY_MODE
    case 1180:  // ER_ERROR_DURING_COMMIT
    case 1181:  // ER_ERROR_DURING_ROLLBACK
    case 1030:  // ER_GET_ERRNO from the storage engine
      return StoreFaultError(text);
    // Constraint violations and bad data are final: retrying the same
    // statement cannot succeed.
    case 1022:  // ER_DUP_KEY
    case 1062:  // ER_DUP_ENTRY
    case 1169:  // ER_DUP_UNIQUE
    case 1586:  // ER_DUP_ENTRY_WITH_KEY_NAME
      return MarkUniqueViolation(absl::InvalidArgumentError(text));
    case 1216:  // ER_NO_REFERENCED_ROW
    case 1217:  // ER_ROW_IS_REFERENCED
    case 1451:  // ER_ROW_IS_REFERENCED_2
    case 1452:  // ER_NO_REFERENCED_ROW_2
    case 1048:  // ER_BAD_NULL_ERROR
    case 1364:  // ER_NO_DEFAULT_FOR_FIELD
    case 3819:  // ER_CHECK_CONSTRAINT_VIOLATED (MySQL 8)
    case 4025:  // ER_CONSTRAINT_FAILED (MariaDB)
    case 1264:  // ER_WARN_DATA_OUT_OF_RANGE
    case 1265:  // WARN_DATA_TRUNCATED
    case 1292:  // ER_TRUNCATED_WRONG_VALUE
    case 1366:  // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
    case 1406:  // ER_DATA_TOO_LONG
    // The SQL itself is wrong.
    case 1064:  // ER_PARSE_ERROR
    case 1149:  // ER_SYNTAX_ERROR
    case 1210:  // ER_WRONG_ARGUMENTS
    case 1295:  // ER_UNSUPPORTED_PS
    case 1050:  // ER_TABLE_EXISTS_ERROR
    case 1051:  // ER_BAD_TABLE_ERROR
    case 1060:  // ER_DUP_FIELDNAME
    case 1061:  // ER_DUP_KEYNAME
    case 1101:  // ER_BLOB_CANT_HAVE_DEFAULT
    case 1136:  // ER_WRONG_VALUE_COUNT_ON_ROW
    case 1170:  // ER_BLOB_KEY_WITHOUT_LENGTH
    case 1242:  // ER_SUBQUERY_NO_1_ROW
      return absl::InvalidArgumentError(text);
    case 1213:  // ER_LOCK_DEADLOCK: InnoDB rolled the whole transaction back
      return absl::AbortedError(absl::StrCat(text, " (the transaction was rolled back; retry it)"));
    case 1020:  // ER_CHECKREAD: record changed since last read
    case 1412:  // ER_TABLE_DEF_CHANGED
      return absl::AbortedError(text);
    case 1205: {  // ER_LOCK_WAIT_TIMEOUT
      absl::Status s = absl::UnavailableError(absl::StrCat(
          text, " (another transaction holds the row lock, e.g. a live claim of the same key)"));
      s.SetPayload(AV(kLockWaitTimeoutPayload), absl::Cord("1205"));
      return s;
    }
    case 1045:  // ER_ACCESS_DENIED_ERROR
    case 1044:  // ER_DBACCESS_DENIED_ERROR
    case 1095:  // ER_KILL_DENIED_ERROR
    case 1227:  // ER_SPECIFIC_ACCESS_DENIED_ERROR
    case 1370:  // ER_PROCACCESS_DENIED_ERROR
    case 1698:  // ER_ACCESS_DENIED_NO_PASSWORD_ERROR
      return absl::PermissionDeniedError(text);
    case 1049:  // ER_BAD_DB_ERROR: someone has to create the database
      return absl::FailedPreconditionError(text);
    case 1037:  // ER_OUTOFMEMORY
    case 1038:  // ER_OUT_OF_SORTMEMORY
    case 1041:  // ER_OUT_OF_RESOURCES
    case 1135:  // ER_CANT_CREATE_THREAD
    case 1226:  // ER_USER_LIMIT_REACHED
      return absl::ResourceExhaustedError(text);
    case 1969:  // ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
    case 3024:  // ER_QUERY_TIMEOUT (MySQL max_execution_time)
      return absl::DeadlineExceededError(text);
    case 2014:  // CR_COMMANDS_OUT_OF_SYNC: a bug in this adapter
      return absl::InternalError(text);
    default:
      break;
  }
  if (IsConnectionError(err) || (err >= 2000 && err < 3000)) return StoreFaultError(text);
  const std::string_view cls = sqlstate.substr(0, 2);
  if (cls == "23" || cls == "22" || cls == "42" || cls == "21") {
    return absl::InvalidArgumentError(text);
  }
  if (cls == "40") return absl::AbortedError(text);
  if (cls == "08") return StoreFaultError(text);
  if (cls == "28") return absl::PermissionDeniedError(text);
  // Unclassified: not retried automatically, but not called the caller's fault.
  return absl::UnknownError(text);
}

}  // namespace idem::mysql
