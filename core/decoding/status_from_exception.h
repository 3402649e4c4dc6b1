// The error boundary between LibTorch and everything above the decoder:
// LibTorch reports failures by throwing (TORCH_CHECK, c10::Error, an
// allocator running out of memory); the decoding interface and the server
// report them as absl::Status. Every decoder entry point runs its body
// through StatusFromException so that no exception crosses the interface.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace performer::decoding {

// The status of an exception caught while doing `what`: ResourceExhausted
// for running out of memory (host or device), Internal for anything else,
// with the exception's message.
inline absl::Status ExceptionStatus(absl::string_view what, std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " ran out of device memory: ", e.what_without_backtrace()));
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " ran out of memory: ", e.what()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, " failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, " failed: ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, " failed with an unknown exception"));
  }
}

// Runs fn (returning absl::Status or absl::StatusOr<T>) and returns its
// result, or the ExceptionStatus of whatever it throws.
template <typename Fn>
auto StatusFromException(absl::string_view what, Fn&& fn) -> std::invoke_result_t<Fn> {
  try {
    return std::forward<Fn>(fn)();
  } catch (...) {
    return ExceptionStatus(what, std::current_exception());
  }
}

}  // namespace performer::decoding
