// File: file_pages.h
// -----------------------------------------------------------------------------
// A registry of the read-only file mappings this process holds (io::MappedFile registers each
// one), so that code holding only a pointer into one — a weight Tensor viewing a checkpoint —
// can hand the pages of a range back to the kernel once it has copied them elsewhere (a packed
// weight layout): the copy and the mapping are otherwise both resident, and a model's RSS is
// twice its file.
//
//   kernels::PackedWeight packed = Pack(weight);
//   ReleaseFilePages(weight.raw(), weight.nbytes());  // no-op unless inside a file mapping
//
// Released pages stay valid: a later read faults them back from the page cache (the file is
// unchanged), so releasing is only ever a residency hint, never a correctness question. Memory
// that is not a registered read-only file mapping (heap, anonymous) is never touched.
//
// Thread-safe.
#pragma once

#include <cstddef>

namespace uc {

// Records [begin, begin + size) as a read-only, file-backed, page-aligned mapping.
void RegisterFileMapping(const void* begin, size_t size);
// Forgets the mapping starting at `begin` (before it is unmapped).
void UnregisterFileMapping(const void* begin);

// Drops the whole pages inside [p, p + n) from this process's resident set (MADV_DONTNEED)
// when the range lies inside one registered mapping; partial pages at either end are kept (a
// neighbouring tensor may still be read from them). Returns the bytes released (0 otherwise).
size_t ReleaseFilePages(const void* p, size_t n);

// This process's resident set in bytes now (/proc/self/statm); 0 where it cannot be read.
size_t ResidentSetBytes();

}  // namespace uc
