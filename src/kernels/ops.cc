#include "kernels/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <utility>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace uc::kernels {
namespace internal {
namespace {

std::atomic<KernelLevel> g_max_level{KernelLevel::kAvx512};
std::atomic<bool> g_force_bf16_dot{false};
std::atomic<bool> g_no_vbmi{false};

bool DetectAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang before 16 has no "f16c" for
  // __builtin_cpu_supports.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

bool DetectAvx512Vnni() {
#if defined(__x86_64__)
  if (!CpuSupportsAvx2()) return false;
  // CPUID leaf 7 subleaf 0: EBX has F (16), DQ (17), BW (30), VL (31); ECX has VNNI (11).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  constexpr unsigned kEbx = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
  constexpr unsigned kVnni = 1u << 11;
  if ((ebx & kEbx) != kEbx || (ecx & kVnni) == 0) return false;
  // The OS must save the state: OSXSAVE (leaf 1 ECX bit 27), then XCR0 bits 1-2 (SSE, AVX) and
  // 5-7 (opmask, upper halves of ZMM0-15, ZMM16-31).
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  constexpr unsigned kXcr0 = (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7);
  return (xcr0_lo & kXcr0) == kXcr0;
#else
  return false;
#endif
}

bool DetectAvx512Bf16() {
#if defined(__x86_64__)
  if (!CpuSupportsAvx512Vnni()) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || eax < 1) return false;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (eax & (1u << 5)) != 0;
#else
  return false;
#endif
}

bool DetectAvx512Vbmi() {
#if defined(__x86_64__)
  if (!CpuSupportsAvx512Vnni()) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 1)) != 0;  // AVX512_VBMI
#else
  return false;
#endif
}

bool DetectAmd() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  // The vendor string is EBX, EDX, ECX: "Auth" "enti" "cAMD".
  return ebx == 0x68747541u && edx == 0x69746E65u && ecx == 0x444D4163u;
#else
  return false;
#endif
}

KernelLevel MaxLevel() { return g_max_level.load(std::memory_order_relaxed); }

}  // namespace

bool CpuSupportsAvx2() {
  static const bool supported = DetectAvx2();
  return supported;
}

bool CpuSupportsAvx512Vnni() {
  static const bool supported = DetectAvx512Vnni();
  return supported;
}

bool CpuSupportsAvx512Bf16() {
  static const bool supported = DetectAvx512Bf16();
  return supported;
}

bool CpuSupportsAvx512Vbmi() {
  static const bool supported = DetectAvx512Vbmi();
  return supported;
}

bool CpuIsAmd() {
  static const bool amd = DetectAmd();
  return amd;
}

bool UseAvx2() { return CpuSupportsAvx2() && MaxLevel() >= KernelLevel::kAvx2; }

bool UseAvx512Vnni() { return CpuSupportsAvx512Vnni() && MaxLevel() >= KernelLevel::kAvx512; }

bool CpuPrefersBf16Dot() { return CpuSupportsAvx512Bf16() && CpuIsAmd(); }

bool Avx512Bf16Available() { return CpuSupportsAvx512Bf16() && MaxLevel() >= KernelLevel::kAvx512; }

bool UseAvx512Bf16() {
  return Avx512Bf16Available() &&
         (CpuPrefersBf16Dot() || g_force_bf16_dot.load(std::memory_order_relaxed));
}

bool UseAvx512Vbmi() {
  return UseAvx512Vnni() && CpuSupportsAvx512Vbmi() && !g_no_vbmi.load(std::memory_order_relaxed);
}

void ForceNoVbmiForTesting(bool force) { g_no_vbmi.store(force); }

void ForceBf16DotForTesting(bool force) { g_force_bf16_dot.store(force); }

void ForceLevelForTesting(KernelLevel level) { g_max_level.store(level); }

void ForcePortableForTesting(bool force) {
  ForceLevelForTesting(force ? KernelLevel::kPortable : KernelLevel::kAvx512);
}

}  // namespace internal

namespace {

// Calls avx2::name(...) when the AVX2 kernels are in use, else cpu::name(...). The AVX2 symbols
// exist only in x86-64 builds.
#if defined(__x86_64__)
#define UC_DISPATCH(name, ...) \
  (internal::UseAvx2() ? avx2::name(__VA_ARGS__) : cpu::name(__VA_ARGS__))
#else
#define UC_DISPATCH(name, ...) cpu::name(__VA_ARGS__)
#endif

const char* Name(DType dtype) { return DTypeName(dtype).data(); }

bool IsWeightDType(DType dtype) { return dtype != DType::kI32; }

[[maybe_unused]] bool IsHalfDType(DType dtype) {
  return dtype == DType::kF16 || dtype == DType::kBF16;
}

bool IsFloatDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

void CheckF32Matrix(const Tensor& t, const char* op, const char* what) {
  UC_CHECK(t.defined() && t.rank() == 2 && t.dtype() == DType::kF32,
           "%s: %s must be a defined 2-D F32 tensor, got %s %s", op, what, Name(t.dtype()),
           ShapeToString(t.shape()).c_str());
}

}  // namespace

namespace {

void CheckMatMulShapes(const Tensor& x, const Tensor& w, const Tensor& y) {
  CheckF32Matrix(x, "MatMul", "x");
  CheckF32Matrix(y, "MatMul", "y");
  UC_CHECK(w.defined() && w.rank() == 2 && IsWeightDType(w.dtype()),
           "MatMul: w must be a 2-D weight tensor, got %s %s", Name(w.dtype()),
           ShapeToString(w.shape()).c_str());
  UC_CHECK(x.dim(1) == w.dim(1) && y.dim(0) == x.dim(0) && y.dim(1) == w.dim(0),
           "MatMul: shapes x %s, w %s, y %s do not match y[m, n] = x[m, k] . w[n, k]^T",
           ShapeToString(x.shape()).c_str(), ShapeToString(w.shape()).c_str(),
           ShapeToString(y.shape()).c_str());
  UC_CHECK(y.raw() != x.raw() || x.numel() == 0, "MatMul: y must not alias x");
}

#if defined(__x86_64__)
// True when the AVX-512 integer MatMul (avx512::MatMulInt8 and its packed layout) takes a
// quantized w_dtype: on CPUs with it, every quantized type.
bool UseAvx512Int8(DType w_dtype) { return internal::UseAvx512Vnni() && DTypeIsQuantized(w_dtype); }
#endif

MatMulArgs ArgsOf(const Tensor& x, const Tensor& w, Tensor& y) {
  return MatMulArgs{x.data<float>(), x.dim(0), x.dim(1),      w.row(0),
                    w.dtype(),       w.dim(0), w.row_bytes(), y.data<float>()};
}

// MatMul, reading `packed_weight`'s copy (or none: null) where its kernel is in use.
void MatMulImpl(const Tensor& x, const Tensor& w, Tensor& y, ThreadPool* pool,
                const MatMulOptions& options, const PackedWeight* packed_weight) {
  CheckMatMulShapes(x, w, y);
  if (y.numel() == 0) return;
  if (x.dim(1) == 0) {
    std::fill_n(y.data<float>(), y.numel(), 0.0f);
    return;
  }
  MatMulArgs args = ArgsOf(x, w, y);
  [[maybe_unused]] const std::byte* const packed =
      packed_weight != nullptr ? packed_weight->packed() : nullptr;
  if (options.precision == MatMulPrecision::kInt8 && DTypeIsQuantized(w.dtype())) {
#if defined(__x86_64__)
    if (UseAvx512Int8(w.dtype())) {
      args.w_packed = packed;
      avx512::MatMulInt8(args, pool);
      return;
    }
#endif
#if defined(__x86_64__)
    if (internal::UseAvx2()) {
      // avx2::PackInt8's layout (Q8_0's and MXFP4's below AVX-512); a copy packed for
      // avx512::MatMulInt8 reads as the stored rows.
      if (packed != nullptr && !packed_weight->avx512_layout()) args.w_packed = packed;
      avx2::MatMulInt8(args, pool);
      return;
    }
#endif
    cpu::MatMulInt8(args, pool);
#if defined(__x86_64__)
  } else if (options.precision == MatMulPrecision::kInt8 && w.dtype() == DType::kBF16 &&
             internal::UseAvx512Bf16()) {
    args.w_packed = packed;
    avx512::MatMulBf16(args, pool);
  } else if (IsHalfDType(w.dtype()) && internal::UseAvx512Vnni()) {
    // F16, and BF16 multiplied exactly: one order for every m (batch invariant).
    args.w_packed = packed != nullptr && packed_weight->avx512_layout() ? packed : nullptr;
    avx512::MatMulHalf(args, pool);
  } else if (IsHalfDType(w.dtype()) && internal::UseAvx2()) {
    // The same order on 8 lanes, so the same bits; BF16 at kInt8 too (no vdpbf16ps here). The
    // two levels pack differently: a copy packed for the other reads as the stored rows.
    args.w_packed = packed != nullptr && !packed_weight->avx512_layout() ? packed : nullptr;
    avx2::MatMulHalf(args, pool);
  } else if (packed != nullptr && DTypeIsQuantized(w.dtype()) && internal::UseAvx2()) {
    // Packed at kExact: the grouped order, one for every m (batch invariant), the same bits at
    // both levels.
    args.w_packed = packed;
    if (internal::UseAvx512Vbmi()) {
      avx512::MatMulQuantExactVbmi(args, pool);
    } else if (internal::UseAvx512Vnni()) {
      avx512::MatMulQuantExact(args, pool);
    } else {
      avx2::MatMulQuantExact(args, pool);
    }
#endif
  } else if (options.batch_invariant) {
    // The portable MatMul sums every row in one order for any m.
    UC_DISPATCH(MatMulBatchInvariant, args, pool);
  } else {
#if defined(__x86_64__)
    if (internal::UseAvx512Vnni() && args.m > avx2::kStreamingMaxRows) {
      avx512::MatMulTiled(args, pool);
      return;
    }
#endif
    UC_DISPATCH(MatMul, args, pool);
  }
}

void RunCausalAttention(const AttentionArgs& args, ThreadPool* pool) {
#if defined(__x86_64__)
  if (internal::UseAvx512Vnni()) {
    avx512::CausalAttention(args, pool);
    return;
  }
#endif
  UC_DISPATCH(CausalAttention, args, pool);
}

}  // namespace

void MatMul(const Tensor& x, const Tensor& w, Tensor& y, ThreadPool* pool,
            const MatMulOptions& options) {
  MatMulImpl(x, w, y, pool, options, nullptr);
}

PackedWeight::PackedWeight(Tensor source, const MatMulOptions& options, int64_t bytes,
                           bool avx512_layout)
    : source_(std::move(source)),
      options_(options),
      avx512_layout_(avx512_layout),
      data_(static_cast<size_t>(bytes)) {}

std::shared_ptr<const PackedWeight> PackedWeight::Pack(const Tensor& w,
                                                       const MatMulOptions& options,
                                                       ThreadPool* pool) {
#if defined(__x86_64__)
  if (!internal::UseAvx2() || !w.defined() || w.rank() != 2 || w.numel() == 0) {
    return nullptr;
  }
  // The layout of the kernel MatMulImpl picks for (dtype, precision) on this CPU.
  enum class Layout { kNone, kInt8, kInt8Avx2, kBf16, kHalf, kQuantExact };
  const bool int8 = options.precision == MatMulPrecision::kInt8;
  const bool avx512 = internal::UseAvx512Vnni();
  Layout layout = Layout::kNone;
  if (int8 && UseAvx512Int8(w.dtype())) {
    layout = Layout::kInt8;
  } else if (int8 && avx2::PackedInt8Bytes(w.dtype(), w.dim(0), w.dim(1)) > 0) {
    layout = Layout::kInt8Avx2;  // Q8_0 and MXFP4 below AVX-512
  } else if (int8 && w.dtype() == DType::kBF16 && internal::UseAvx512Bf16()) {
    layout = Layout::kBf16;
  } else if (IsHalfDType(w.dtype())) {
    layout = Layout::kHalf;  // avx512::PackHalf's, or below AVX-512 avx2::PackHalf's
  } else if (!int8 && DTypeIsQuantized(w.dtype())) {
    layout = Layout::kQuantExact;  // AVX2 or AVX-512
  }
  const int64_t n = w.dim(0);
  const int64_t k = w.dim(1);
  const int64_t bytes = layout == Layout::kInt8       ? avx512::PackedInt8Bytes(w.dtype(), n, k)
                        : layout == Layout::kInt8Avx2 ? avx2::PackedInt8Bytes(w.dtype(), n, k)
                        : layout == Layout::kBf16     ? avx512::PackedBf16Bytes(n, k)
                        : layout == Layout::kHalf
                            ? (avx512 ? avx512::PackedHalfBytes(n, k) : avx2::PackedHalfBytes(n, k))
                        : layout == Layout::kQuantExact
                            ? avx2::PackedQuantExactBytes(w.dtype(), n, k)
                            : 0;
  if (bytes == 0) return nullptr;
  // Every layout but the AVX2 ones for F16 and BF16 and avx2::MatMulInt8's is read by an AVX-512
  // kernel (the exact quantized one by both levels alike).
  const bool avx512_layout = layout != Layout::kInt8Avx2 && (avx512 || layout != Layout::kHalf);
  std::shared_ptr<PackedWeight> packed(new PackedWeight(w, options, bytes, avx512_layout));
  const MatMulArgs args{nullptr, 0, k, w.row(0), w.dtype(), n, w.row_bytes(), nullptr};
  std::byte* const out = packed->data_.data();
  if (layout == Layout::kInt8) {
    avx512::PackInt8(args, out, pool);
  } else if (layout == Layout::kInt8Avx2) {
    avx2::PackInt8(args, out, pool);
  } else if (layout == Layout::kBf16) {
    avx512::PackBf16(args, out, pool);
  } else if (layout == Layout::kQuantExact) {
    if (avx512) {
      avx512::PackQuantExact(args, out, pool);
    } else {
      avx2::PackQuantExact(args, out, pool);
    }
  } else if (avx512) {
    avx512::PackHalf(args, out, pool);
  } else {
    avx2::PackHalf(args, out, pool);
  }
  return packed;
#else
  (void)w;
  (void)options;
  (void)pool;
  return nullptr;
#endif
}

void MatMul(const Tensor& x, const PackedWeight& w, Tensor& y, ThreadPool* pool) {
  MatMulImpl(x, w.source(), y, pool, w.options(), &w);
}

void MatMulMany(const Tensor& x, std::span<const MatMulOperand> operands, ThreadPool* pool) {
  for (const MatMulOperand& op : operands) {
    UC_CHECK(op.w != nullptr && op.y != nullptr, "MatMulMany: an operand without w or y");
    UC_CHECK(op.packed == nullptr || op.packed->options().precision == op.options.precision,
             "MatMulMany: packed for another precision");
  }
#if defined(__x86_64__)
  // One pass over x for the integer kernel; everything else is MatMul per operand.
  bool together = internal::UseAvx512Vnni() && operands.size() > 1 &&
                  operands.size() <= static_cast<size_t>(avx512::kMaxMatMulSegments) &&
                  x.defined() && x.rank() == 2 && x.numel() > 0;
  for (const MatMulOperand& op : operands) {
    together = together && op.options.precision == MatMulPrecision::kInt8 && op.w->defined() &&
               op.w->dtype() == operands[0].w->dtype() && UseAvx512Int8(op.w->dtype()) &&
               op.y->numel() > 0;
  }
  if (together) {
    MatMulArgs args[avx512::kMaxMatMulSegments];
    for (size_t i = 0; i < operands.size(); ++i) {
      const MatMulOperand& op = operands[i];
      CheckMatMulShapes(x, *op.w, *op.y);
      args[i] = ArgsOf(x, *op.w, *op.y);
      args[i].w_packed = op.packed != nullptr ? op.packed->packed() : nullptr;
    }
    avx512::MatMulInt8Many({args, operands.size()}, pool);
    return;
  }
#endif
  for (const MatMulOperand& op : operands) {
    MatMulImpl(x, *op.w, *op.y, pool, op.options, op.packed);
  }
}

void AddBias(const Tensor& bias, Tensor& y) {
  CheckF32Matrix(y, "AddBias", "y");
  UC_CHECK(
      bias.defined() && bias.rank() == 1 && IsFloatDType(bias.dtype()) && bias.dim(0) == y.dim(1),
      "AddBias: bias must be [%lld] F32/F16/BF16, got %s %s", static_cast<long long>(y.dim(1)),
      Name(bias.dtype()), ShapeToString(bias.shape()).c_str());
  if (y.numel() == 0) return;
  cpu::AddBias(bias.raw(), bias.dtype(), y.dim(0), y.dim(1), y.data<float>());
}

// fn(begin, end) over rows [0, m) of n elements each: on `pool`'s threads when each gets
// kParallelRowOpElements at least, else inline.
template <typename Fn>
void ForRows(int64_t m, int64_t n, ThreadPool* pool, const Fn& fn) {
  if (pool == nullptr || pool->num_threads() == 1 || m * n < 2 * kParallelRowOpElements) {
    fn(0, m);
    return;
  }
  pool->ParallelFor(m, fn, std::max<int64_t>(1, kParallelRowOpElements / std::max<int64_t>(n, 1)));
}

void AddInPlace(const Tensor& x, Tensor& y, ThreadPool* pool) {
  UC_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32 && x.shape() == y.shape() &&
               x.defined() && y.defined(),
           "AddInPlace: x %s %s and y %s %s must be F32 of equal shape", Name(x.dtype()),
           ShapeToString(x.shape()).c_str(), Name(y.dtype()), ShapeToString(y.shape()).c_str());
  if (y.numel() == 0) return;
  // Elementwise over any shape: the flat range, split into runs of single elements.
  ForRows(y.numel(), 1, pool, [&](int64_t begin, int64_t end) {
    cpu::AddInPlace(x.data<float>() + begin, end - begin, y.data<float>() + begin);
  });
}

void RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, ThreadPool* pool) {
  CheckF32Matrix(x, "RmsNorm", "x");
  CheckF32Matrix(out, "RmsNorm", "out");
  UC_CHECK(out.shape() == x.shape(), "RmsNorm: out %s must have the shape of x %s",
           ShapeToString(out.shape()).c_str(), ShapeToString(x.shape()).c_str());
  UC_CHECK(weight.defined() && weight.rank() == 1 && IsFloatDType(weight.dtype()) &&
               weight.dim(0) == x.dim(1),
           "RmsNorm: weight must be [%lld] F32/F16/BF16, got %s %s",
           static_cast<long long>(x.dim(1)), Name(weight.dtype()),
           ShapeToString(weight.shape()).c_str());
  UC_CHECK(eps >= 0.0f, "RmsNorm: eps must be non-negative, got %g", static_cast<double>(eps));
  if (x.numel() == 0) return;
  const int64_t h = x.dim(1);
  ForRows(x.dim(0), h, pool, [&](int64_t begin, int64_t end) {
    UC_DISPATCH(RmsNorm, x.data<float>() + begin * h, weight.raw(), weight.dtype(), end - begin, h,
                eps, out.data<float>() + begin * h);
  });
}

void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
               ThreadPool* pool) {
  CheckF32Matrix(x, "LayerNorm", "x");
  CheckF32Matrix(out, "LayerNorm", "out");
  UC_CHECK(out.shape() == x.shape(), "LayerNorm: out %s must have the shape of x %s",
           ShapeToString(out.shape()).c_str(), ShapeToString(x.shape()).c_str());
  for (const Tensor* t : {&weight, &bias}) {
    UC_CHECK(t->defined() && t->rank() == 1 && t->dtype() == DType::kF32 && t->dim(0) == x.dim(1),
             "LayerNorm: weight and bias must be [%lld] F32, got %s %s",
             static_cast<long long>(x.dim(1)), Name(t->dtype()), ShapeToString(t->shape()).c_str());
  }
  UC_CHECK(eps >= 0.0f, "LayerNorm: eps must be non-negative, got %g", static_cast<double>(eps));
  if (x.numel() == 0) return;
  const int64_t h = x.dim(1);
  const float* w = weight.data<float>();
  const float* b = bias.data<float>();
  ForRows(x.dim(0), h, pool, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x.data<float>() + r * h;
      float* o = out.data<float>() + r * h;
      double sum = 0.0;
      for (int64_t j = 0; j < h; ++j) sum += in[j];
      const double mean = sum / static_cast<double>(h);
      double var = 0.0;
      for (int64_t j = 0; j < h; ++j) var += (in[j] - mean) * (in[j] - mean);
      const double inv = 1.0 / std::sqrt(var / static_cast<double>(h) + eps);
      for (int64_t j = 0; j < h; ++j) {
        o[j] = static_cast<float>((in[j] - mean) * inv) * w[j] + b[j];
      }
    }
  });
}

void Rope(std::span<const int32_t> positions, std::span<const float> inv_freq, int num_heads,
          int head_dim, RopeStyle style, Tensor& x, ThreadPool* pool) {
  CheckF32Matrix(x, "Rope", "x");
  UC_CHECK(num_heads > 0 && head_dim > 0 && x.dim(1) == int64_t{num_heads} * head_dim,
           "Rope: x %s is not [m, num_heads (%d) * head_dim (%d)]",
           ShapeToString(x.shape()).c_str(), num_heads, head_dim);
  UC_CHECK(static_cast<int64_t>(positions.size()) == x.dim(0),
           "Rope: %zu positions for %lld tokens", positions.size(),
           static_cast<long long>(x.dim(0)));
  UC_CHECK(2 * static_cast<int64_t>(inv_freq.size()) <= head_dim,
           "Rope: rotary_dim 2 * %zu exceeds head_dim %d", inv_freq.size(), head_dim);
  if (x.numel() == 0 || inv_freq.empty()) return;
  const int64_t n = x.dim(1);
  ForRows(x.dim(0), n, pool, [&](int64_t begin, int64_t end) {
    cpu::Rope(positions.data() + begin, end - begin, inv_freq.data(),
              static_cast<int64_t>(inv_freq.size()), num_heads, head_dim, style,
              x.data<float>() + begin * n);
  });
}

void SiluAndMul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool* pool) {
  CheckF32Matrix(gate, "SiluAndMul", "gate");
  UC_CHECK(up.dtype() == DType::kF32 && out.dtype() == DType::kF32 && up.shape() == gate.shape() &&
               out.shape() == gate.shape(),
           "SiluAndMul: gate %s, up %s %s and out %s %s must be F32 of equal shape",
           ShapeToString(gate.shape()).c_str(), Name(up.dtype()), ShapeToString(up.shape()).c_str(),
           Name(out.dtype()), ShapeToString(out.shape()).c_str());
  if (out.numel() == 0) return;
  const int64_t n = out.dim(1);
  ForRows(out.dim(0), n, pool, [&](int64_t begin, int64_t end) {
    UC_DISPATCH(SiluAndMul, gate.data<float>() + begin * n, up.data<float>() + begin * n,
                (end - begin) * n, out.data<float>() + begin * n);
  });
}

void GeluTanhAndMul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool* pool) {
  CheckF32Matrix(gate, "GeluTanhAndMul", "gate");
  UC_CHECK(up.dtype() == DType::kF32 && out.dtype() == DType::kF32 && up.shape() == gate.shape() &&
               out.shape() == gate.shape(),
           "GeluTanhAndMul: gate %s, up %s %s and out %s %s must be F32 of equal shape",
           ShapeToString(gate.shape()).c_str(), Name(up.dtype()), ShapeToString(up.shape()).c_str(),
           Name(out.dtype()), ShapeToString(out.shape()).c_str());
  if (out.numel() == 0) return;
  const int64_t n = out.dim(1);
  ForRows(out.dim(0), n, pool, [&](int64_t begin, int64_t end) {
    UC_DISPATCH(GeluTanhAndMul, gate.data<float>() + begin * n, up.data<float>() + begin * n,
                (end - begin) * n, out.data<float>() + begin * n);
  });
}

void GeluTanh(Tensor& x, ThreadPool* pool) {
  UC_CHECK(x.dtype() == DType::kF32, "GeluTanh: x must be F32");
  if (x.numel() == 0) return;
  float* p = x.data<float>();
  ForRows(x.numel(), 1, pool,
          [&](int64_t begin, int64_t end) { UC_DISPATCH(GeluTanh, p + begin, end - begin); });
}

void Gelu(Tensor& x, ThreadPool* pool) {
  UC_CHECK(x.dtype() == DType::kF32, "Gelu: x must be F32");
  if (x.numel() == 0) return;
  float* p = x.data<float>();
  ForRows(x.numel(), 1, pool, [&](int64_t begin, int64_t end) {
    constexpr float kInvSqrt2 = 0.7071067811865476f;
    for (int64_t i = begin; i < end; ++i) p[i] = 0.5f * p[i] * (1.0f + std::erf(p[i] * kInvSqrt2));
  });
}

void SoftCap(float cap, Tensor& x) {
  UC_CHECK(x.dtype() == DType::kF32 && cap > 0.0f, "SoftCap: x must be F32 and cap positive");
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = cap * std::tanh(p[i] / cap);
}

void Scale(float factor, Tensor& x) {
  UC_CHECK(x.dtype() == DType::kF32, "Scale: x must be F32");
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] *= factor;
}

void CausalAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     std::span<const int32_t> positions, const AttentionShape& shape, Tensor& out,
                     ThreadPool* pool) {
  CheckF32Matrix(q, "CausalAttention", "q");
  CheckF32Matrix(k_cache, "CausalAttention", "k_cache");
  CheckF32Matrix(v_cache, "CausalAttention", "v_cache");
  CheckF32Matrix(out, "CausalAttention", "out");
  UC_CHECK(shape.num_heads > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0 &&
               shape.num_heads % shape.num_kv_heads == 0,
           "CausalAttention: %d heads are not a multiple of %d KV heads (head_dim %d)",
           shape.num_heads, shape.num_kv_heads, shape.head_dim);
  const int64_t q_width = int64_t{shape.num_heads} * shape.head_dim;
  const int64_t kv_width = int64_t{shape.num_kv_heads} * shape.head_dim;
  UC_CHECK(q.dim(1) == q_width && out.shape() == q.shape(),
           "CausalAttention: q %s and out %s must be [m, %lld]", ShapeToString(q.shape()).c_str(),
           ShapeToString(out.shape()).c_str(), static_cast<long long>(q_width));
  UC_CHECK(k_cache.dim(1) == kv_width && v_cache.shape() == k_cache.shape(),
           "CausalAttention: k_cache %s and v_cache %s must be [capacity, %lld]",
           ShapeToString(k_cache.shape()).c_str(), ShapeToString(v_cache.shape()).c_str(),
           static_cast<long long>(kv_width));
  UC_CHECK(static_cast<int64_t>(positions.size()) == q.dim(0),
           "CausalAttention: %zu positions for %lld tokens", positions.size(),
           static_cast<long long>(q.dim(0)));
  for (const int32_t p : positions) {
    UC_CHECK(p >= 0 && p < k_cache.dim(0), "CausalAttention: position %d outside cache of %lld", p,
             static_cast<long long>(k_cache.dim(0)));
  }
  UC_CHECK(out.raw() != q.raw(), "CausalAttention: out must not alias q");
  if (q.numel() == 0) return;
  static constexpr int32_t kOneBlock[1] = {0};
  const AttentionArgs args{q.data<float>(),
                           k_cache.data<float>(),
                           v_cache.data<float>(),
                           positions.data(),
                           q.dim(0),
                           shape,
                           out.data<float>(),
                           k_cache.dim(0),
                           1,
                           kOneBlock,
                           nullptr};
  RunCausalAttention(args, pool);
}

void PagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const PagedKvLayout& layout, std::span<const int32_t> positions,
                    const AttentionShape& shape, Tensor& out, ThreadPool* pool) {
  CheckF32Matrix(q, "PagedAttention", "q");
  CheckF32Matrix(k_cache, "PagedAttention", "k_cache");
  CheckF32Matrix(v_cache, "PagedAttention", "v_cache");
  CheckF32Matrix(out, "PagedAttention", "out");
  UC_CHECK(shape.num_heads > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0 &&
               shape.num_heads % shape.num_kv_heads == 0,
           "PagedAttention: %d heads are not a multiple of %d KV heads (head_dim %d)",
           shape.num_heads, shape.num_kv_heads, shape.head_dim);
  const int64_t q_width = int64_t{shape.num_heads} * shape.head_dim;
  const int64_t kv_width = int64_t{shape.num_kv_heads} * shape.head_dim;
  UC_CHECK(q.dim(1) == q_width && out.shape() == q.shape(),
           "PagedAttention: q %s and out %s must be [m, %lld]", ShapeToString(q.shape()).c_str(),
           ShapeToString(out.shape()).c_str(), static_cast<long long>(q_width));
  UC_CHECK(k_cache.dim(1) == kv_width && v_cache.shape() == k_cache.shape(),
           "PagedAttention: k_cache %s and v_cache %s must be [rows, %lld]",
           ShapeToString(k_cache.shape()).c_str(), ShapeToString(v_cache.shape()).c_str(),
           static_cast<long long>(kv_width));
  const int64_t m = q.dim(0);
  UC_CHECK(static_cast<int64_t>(positions.size()) == m &&
               static_cast<int64_t>(layout.token_seq.size()) == m,
           "PagedAttention: %zu positions and %zu token sequences for %lld tokens",
           positions.size(), layout.token_seq.size(), static_cast<long long>(m));
  UC_CHECK(layout.block_size > 0 && layout.blocks_per_seq > 0 &&
               k_cache.dim(0) % layout.block_size == 0 &&
               layout.block_tables.size() % static_cast<size_t>(layout.blocks_per_seq) == 0,
           "PagedAttention: block_size %d, %d blocks per sequence, %zu table entries, cache %s",
           layout.block_size, layout.blocks_per_seq, layout.block_tables.size(),
           ShapeToString(k_cache.shape()).c_str());
  const int64_t num_blocks = k_cache.dim(0) / layout.block_size;
  const int64_t num_seqs = static_cast<int64_t>(layout.block_tables.size()) / layout.blocks_per_seq;
  for (int64_t i = 0; i < m; ++i) {
    const int32_t seq = layout.token_seq[i];
    const int32_t p = positions[i];
    UC_CHECK(seq >= 0 && seq < num_seqs, "PagedAttention: token %lld in sequence %d of %lld",
             static_cast<long long>(i), seq, static_cast<long long>(num_seqs));
    UC_CHECK(p >= 0 && p / layout.block_size < layout.blocks_per_seq,
             "PagedAttention: position %d outside %d blocks of %d", p, layout.blocks_per_seq,
             layout.block_size);
    // Blocks before the window are never read (the engine may have given them back).
    const auto first_block = static_cast<int32_t>(shape.FirstPosition(p) / layout.block_size);
    for (int32_t b = first_block; b <= p / layout.block_size; ++b) {
      const int32_t block = layout.block_tables[seq * layout.blocks_per_seq + b];
      UC_CHECK(block >= 0 && block < num_blocks, "PagedAttention: block id %d outside [0, %lld)",
               block, static_cast<long long>(num_blocks));
    }
  }
  UC_CHECK(out.raw() != q.raw(), "PagedAttention: out must not alias q");
  if (m == 0) return;
  const AttentionArgs args{q.data<float>(),
                           k_cache.data<float>(),
                           v_cache.data<float>(),
                           positions.data(),
                           m,
                           shape,
                           out.data<float>(),
                           layout.block_size,
                           layout.blocks_per_seq,
                           layout.block_tables.data(),
                           layout.token_seq.data()};
  RunCausalAttention(args, pool);
}

void EmbeddingLookup(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  UC_CHECK(table.defined() && table.rank() == 2 && IsWeightDType(table.dtype()),
           "EmbeddingLookup: table must be a 2-D weight tensor, got %s %s", Name(table.dtype()),
           ShapeToString(table.shape()).c_str());
  CheckF32Matrix(out, "EmbeddingLookup", "out");
  UC_CHECK(out.dim(0) == static_cast<int64_t>(ids.size()) && out.dim(1) == table.dim(1),
           "EmbeddingLookup: out %s must be [%zu, %lld]", ShapeToString(out.shape()).c_str(),
           ids.size(), static_cast<long long>(table.dim(1)));
  const int64_t vocab = table.dim(0);
  const int64_t h = table.dim(1);
  for (size_t i = 0; i < ids.size(); ++i) {
    UC_CHECK(ids[i] >= 0 && ids[i] < vocab, "EmbeddingLookup: id %d outside vocabulary of %lld",
             ids[i], static_cast<long long>(vocab));
    UC_DISPATCH(ConvertRow, table.dtype(), table.row(ids[i]), out.data<float>() + i * h, h);
  }
}

void Softmax(Tensor& x) {
  CheckF32Matrix(x, "Softmax", "x");
  if (x.numel() == 0) return;
  UC_DISPATCH(Softmax, x.data<float>(), x.dim(0), x.dim(1));
}

bool HasAvx2() { return internal::UseAvx2(); }

std::string_view MatMulArithmetic(DType dtype, MatMulPrecision precision) {
  if (precision != MatMulPrecision::kInt8) return "f32";
  if (DTypeIsQuantized(dtype)) return "int8";
  return dtype == DType::kBF16 && internal::UseAvx512Bf16() ? "bf16" : "f32";
}

}  // namespace uc::kernels
