#include "core/io/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace performer::io {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

absl::Status CheckStat(const std::string& path, const struct stat& st, uint64_t max_bytes) {
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", FileKind(st.st_mode), ", not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", st.st_size, " bytes, more than the limit of ", max_bytes));
  }
  return absl::OkStatus();
}

absl::Status StatError(const std::string& path, int error) {
  const std::string message = absl::StrCat(path, ": ", std::strerror(error));
  return error == ENOENT ? absl::NotFoundError(message) : absl::InvalidArgumentError(message);
}

}  // namespace

absl::StatusOr<uint64_t> RegularFileSize(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return StatError(path, errno);
  if (absl::Status s = CheckStat(path, st, max_bytes); !s.ok()) return s;
  return static_cast<uint64_t>(st.st_size);
}

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, uint64_t max_bytes) {
  // Checked by name first, so that a FIFO is refused without being opened
  // (opening one, even non-blocking, can wake a writer waiting on it).
  if (absl::StatusOr<uint64_t> size = RegularFileSize(path, max_bytes); !size.ok()) {
    return size.status();
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return StatError(path, errno);
  // The name may have been replaced between the stat and the open.
  struct stat st {};
  absl::Status status =
      ::fstat(fd, &st) == 0 ? CheckStat(path, st, max_bytes) : StatError(path, errno);
  std::string out;
  if (status.ok()) {
    out.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = StatError(path, errno);
        break;
      }
      if (n == 0) break;  // Shrunk while being read: keep what is there.
      done += static_cast<size_t>(n);
    }
    out.resize(done);
  }
  ::close(fd);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<nlohmann::json> ParseBoundedJson(std::string_view text, const std::string& what) {
  bool too_deep = false;
  // The callback sees the depth of every element as it is parsed; the
  // parser itself keeps its stack on the heap.
  nlohmann::json::parser_callback_t depth_check =
      [&too_deep](int depth, nlohmann::json::parse_event_t event, nlohmann::json& /*parsed*/) {
        if (depth > kMaxJsonDepth) too_deep = true;
        // Deeper elements are dropped as they come, so a hostile document
        // never builds a deep tree.
        return !too_deep || (event != nlohmann::json::parse_event_t::object_end &&
                             event != nlohmann::json::parse_event_t::array_end &&
                             event != nlohmann::json::parse_event_t::value);
      };
  nlohmann::json parsed = nlohmann::json::parse(text.begin(), text.end(), depth_check,
                                                /*allow_exceptions=*/false);
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": JSON nested deeper than ", kMaxJsonDepth, " levels"));
  }
  if (parsed.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON"));
  return parsed;
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadBoundedFile(path, kMaxJsonFileBytes);
  if (!text.ok()) return text.status();
  return ParseBoundedJson(*text, path);
}

}  // namespace performer::io
