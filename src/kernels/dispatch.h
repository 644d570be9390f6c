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

// True when CpuSupportsAvx512Vnni() and the CPU has AVX512_VBMI (vpermb; CPUID leaf 7 ECX bit
// 1). Cached; thread-safe.
bool CpuSupportsAvx512Vbmi();

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

// True where vdpbf16ps multiplies BF16 weights faster than F32 FMAs on the widened weights, by a
// fixed table of CPUs, never a measurement at start-up (a timing race could flip the kernel, and
// so a request's bits, between two runs on one machine): AMD CPUs with AVX512_BF16 (Zen 4 and
// later, where one vdpbf16ps does 32 products at the zmm FMA's issue rate; BF16 prefill ~1.9x
// faster than on F32 FMAs), and not Intel ones (a Sapphire Rapids-class Xeon measured vdpbf16ps
// zmm at 83-87 GOP/s a core against 172-175 for F32 FMA: BF16 prefill 1.44x faster on F32 FMAs).
// `llm_bench --compute-only` prints both peaks for a CPU outside the table. Cached; thread-safe.
bool CpuPrefersBf16Dot();

// True when the vdpbf16ps kernel can run: CpuSupportsAvx512Bf16() and no level below kAvx512
// is forced (UseAvx512Bf16() says whether BF16 weights take it).
bool Avx512Bf16Available();

// True when BF16 weights at MatMulPrecision::kInt8 use avx512::MatMulBf16 (vdpbf16ps):
// Avx512Bf16Available(), and CpuPrefersBf16Dot() or ForceBf16DotForTesting(true). Otherwise
// they take the exact F32 MatMul.
bool UseAvx512Bf16();

// True when the kernels with an AVX512_VBMI variant (the exact quantized MatMul) use it:
// UseAvx512Vnni(), CpuSupportsAvx512Vbmi() and not ForceNoVbmiForTesting(true). The variant
// gives the same bits.
bool UseAvx512Vbmi();

// Keeps the AVX512_VBMI variants out (true) until the next call, so the plain AVX-512 kernels
// are tested on CPUs that have it. For tests and benchmarks only; must not race with ops running
// on other threads.
void ForceNoVbmiForTesting(bool force);

// Lets BF16 weights at kInt8 use vdpbf16ps on every CPU that has it (true), or only where
// CpuPrefersBf16Dot() (false, the default), so the vdpbf16ps kernel is tested on CPUs that do
// not prefer it. For tests and benchmarks only; must not race with ops running on other threads,
// and a PackedWeight must be used under the setting it was packed with.
void ForceBf16DotForTesting(bool force);

// Caps the level ops use at `level` (they still never use one the CPU lacks), until the next
// call; ForceLevelForTesting(KernelLevel::kAvx512) restores the best available. For tests and
// benchmarks only; must not race with ops running on other threads.
void ForceLevelForTesting(KernelLevel level);

// ForceLevelForTesting(kPortable) when force, else ForceLevelForTesting(kAvx512).
void ForcePortableForTesting(bool force);

}  // namespace uc::kernels::internal
