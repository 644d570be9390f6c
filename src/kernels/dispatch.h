// File: dispatch.h
// -----------------------------------------------------------------------------
// Run-time choice between the kernel levels: AVX-512 (F/BW/VL/DQ + VNNI, kernels/cpu/*_avx512.cc;
// so far only MatMul, whose BF16 kernel also needs AVX512_BF16), AVX2+FMA+F16C
// (kernels/cpu/*_avx2.cc) and portable (kernels/cpu/*.cc). The CPU is asked once; the answers
// are cached. Tests force lower levels to check them on machines that have the higher ones, so
// every path is compared with the reference.
//
// Internal to kernels/ and its tests; layers call the ops in kernels/ops.h.
#pragma once

namespace uc::kernels::internal {

// True when the CPU (and the build) supports the AVX2 kernels. Cached; thread-safe.
bool CpuSupportsAvx2();

// True when the CPU, the OS (XCR0 enables the ZMM and opmask state) and the build support the
// AVX-512 kernels: AVX-512 F, BW, VL, DQ and VNNI, besides CpuSupportsAvx2(). Cached;
// thread-safe.
bool CpuSupportsAvx512Vnni();

// True when CpuSupportsAvx512Vnni() and the CPU has AVX512_BF16 (vdpbf16ps; CPUID leaf 7
// subleaf 1, EAX bit 5). Cached; thread-safe.
bool CpuSupportsAvx512Bf16();

// True on AMD CPUs (CPUID vendor "AuthenticAMD"). Kernels that stream many weight rows side by
// side prefetch differently there (matmul_int8_avx512.cc); the arithmetic, and so the bits, do
// not depend on it. Cached; thread-safe.
bool CpuIsAmd();

// The kernel levels, lowest first.
enum class KernelLevel { kPortable, kAvx2, kAvx512 };

// True when ops dispatch to the AVX2 kernels: CpuSupportsAvx2() and the forced level (if any)
// is at least kAvx2. Ops without an AVX-512 version use AVX2 at level kAvx512.
bool UseAvx2();

// True when the ops that have an AVX-512 version use it: CpuSupportsAvx512Vnni() and no level
// below kAvx512 is forced.
bool UseAvx512Vnni();

// True when BF16 weights at MatMulPrecision::kInt8 use avx512::MatMulBf16:
// CpuSupportsAvx512Bf16() and no level below kAvx512 is forced.
bool UseAvx512Bf16();

// Caps the level ops use at `level` (they still never use one the CPU lacks), until the next
// call; ForceLevelForTesting(KernelLevel::kAvx512) restores the best available. For tests and
// benchmarks only; must not race with ops running on other threads.
void ForceLevelForTesting(KernelLevel level);

// ForceLevelForTesting(kPortable) when force, else ForceLevelForTesting(kAvx512).
void ForcePortableForTesting(bool force);

}  // namespace uc::kernels::internal
