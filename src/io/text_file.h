// File: text_file.h
// -----------------------------------------------------------------------------
// Reading a file that is taken whole (a spec, a prompts file, a chat template): only a regular
// file (after symlinks) up to a size limit. A FIFO would block the reader forever, a device
// such as /dev/zero would grow the string until memory runs out; both are refused at once,
// naming the path and what it is.
//
//   UC_ASSIGN_OR_RETURN(std::string text, io::ReadTextFile(path, 16 << 20, "spec file"));
//
// Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "base/status.h"

namespace uc::io {

// The whole contents of `path`. NotFound when it does not exist; InvalidArgument when it is not
// a regular file ("...: is a FIFO, not a regular file") or is larger than `max_bytes`;
// Unavailable when it cannot be read. `what` names the file's role in messages ("spec file").
StatusOr<std::string> ReadTextFile(const std::filesystem::path& path, int64_t max_bytes,
                                   const std::string& what);

}  // namespace uc::io
