// File: dispatch.h
// -----------------------------------------------------------------------------
// Run-time choice between the AVX2+FMA+F16C kernels (kernels/cpu/*_avx2.cc) and the portable
// ones (kernels/cpu/*.cc). The CPU is asked once; the answer is cached. Tests force the portable
// path to check it on machines that have AVX2, so both paths are compared with the reference.
//
// Internal to kernels/ and its tests; layers call the ops in kernels/ops.h.
#pragma once

namespace uc::kernels::internal {

// True when the CPU (and the build) supports the AVX2 kernels. Cached; thread-safe.
bool CpuSupportsAvx2();

// True when ops dispatch to the AVX2 kernels: CpuSupportsAvx2() and not forced portable.
bool UseAvx2();

// Makes every op use the portable kernels (force = true) or the best available (false).
// For tests and benchmarks only; must not race with ops running on other threads.
void ForcePortableForTesting(bool force);

}  // namespace uc::kernels::internal
