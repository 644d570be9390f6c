// File: status.h
// -----------------------------------------------------------------------------
// Status and StatusOr<T>: the error currency at every boundary that depends on input or the
// environment (files, configs, specs, requests, MPI setup). Invariants use UC_CHECK instead.
//
//   StatusOr<Config> cfg = LoadConfig(path);
//   if (!cfg.ok()) return cfg.status();
//
// A Status is either OK or carries a code and a message. Messages name the file, field or
// tensor at fault and say how to fix it; callers add context with Annotate().
// Thread-compatible value types.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/check.h"

namespace uc {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input: file contents, flags, spec fields, request fields
  kNotFound,         // missing file, tensor, key
  kOutOfRange,       // truncated data, index past the end
  kUnimplemented,    // valid input we do not support (architecture, dtype)
  kFailedPrecondition,
  kInternal,
  kUnavailable,  // peer or service gone (dead rank, unreachable endpoint)
  kCancelled,
  kResourceExhausted,  // a budget ran out (steps, output size) on hostile or runaway input
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "context: message". OK stays OK.
  Status Annotate(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status OutOfRangeError(std::string message);
Status UnimplementedError(std::string message);
Status FailedPreconditionError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status CancelledError(std::string message);
Status ResourceExhaustedError(std::string message);

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    UC_CHECK(!status_.ok(), "StatusOr constructed from an OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & {
    UC_CHECK(ok(), "StatusOr::value() on error: %s", status_.ToString().c_str());
    return *value_;
  }
  const T& value() const& {
    UC_CHECK(ok(), "StatusOr::value() on error: %s", status_.ToString().c_str());
    return *value_;
  }
  T&& value() && {
    UC_CHECK(ok(), "StatusOr::value() on error: %s", status_.ToString().c_str());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace uc

#define UC_STATUS_CONCAT_INNER(a, b) a##b
#define UC_STATUS_CONCAT(a, b) UC_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define UC_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::uc::Status uc_status_tmp_ = (expr);            \
    if (!uc_status_tmp_.ok()) return uc_status_tmp_; \
  } while (0)

// `UC_ASSIGN_OR_RETURN(auto x, Foo());` declares x from a StatusOr or returns its error.
#define UC_ASSIGN_OR_RETURN(lhs, expr) \
  UC_ASSIGN_OR_RETURN_IMPL(UC_STATUS_CONCAT(uc_statusor_, __LINE__), lhs, expr)
#define UC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
