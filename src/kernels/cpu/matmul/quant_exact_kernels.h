// File: quant_exact_kernels.h
// -----------------------------------------------------------------------------
// MatMul for quantized weights multiplied exactly (MatMulPrecision::kExact) from the packed layout
// of quant_exact_layout.h: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and MXFP4. Written once
// over a vector backend B (16 F32 lanes in matmul_quant_exact_avx512.cc, 8 in
// matmul_quant_exact_avx2.cc); both give the same bits.
//
// Arithmetic (reference::MatMulExactGrouped, bit for bit). A weight of group g (the elements that
// share a scale: 32, or 16 for Q6_K) is w = q dl - ml with q the unsigned integer code and dl, ml
// the F32 products the dequantizer forms (Q4_0: dl = d, ml = 8 d; Q5_0: ml = 16 d; Q4_1, Q5_1:
// ml = -m; Q6_K: q the stored 6 bits, ml = 32 dl; Q8_0: q signed, ml = 0). Every output is
//   acc = 0;  for each group g in k order:
//     P = 0;  for l in g in order:  P = fma(x_l, q_l, P)
//     acc = fma(dl_g, P, acc);  acc = fma(-ml_g, S_g, acc)   (S_g = Σ x_l over g, in order)
// the same sum as Σ w_l x_l up to F32 rounding (within 1e-5 of reference::MatMul), in one order
// whatever m, the rows beside it or the thread count: batch invariant by construction.
//
// Why this form. Converting a block to F32 weights costs a multiply and a subtract per element on
// top of the conversion; the decode kernel of the stored layout (avx2::MatMulStreaming) also
// unpacks the 6-bit scales and converts d per 32 elements, about 30 instructions per 18 bytes of
// Q4_K, where Q8_0 needs 14 per 34: Q4_K decode ran compute bound at half of Q8_0's bytes/s. Here
// a code becomes an F32 in one to three operations (widen, mask or shift, convert; a 4-bit code
// of the dword-lane lines in one or two, NibbleLine), the scales are applied per group with one
// FMA per vector of outputs, and the weight rows are the vector lanes (x is read as broadcasts),
// so nothing is summed across lanes.
//
// Kernels. Decode (m <= kStreamRows): each thread streams its pairs, kDecodeRows rows of a pair
// at a time (all 64 with 16 lanes: four chains per x row; 16 with 8 lanes, 32 when x is one row
// (Tuning::single_decode_rows), the other spans of the pair from L2), prefetching kPrefetchBytes
// or one record, whichever is more, ahead into L2 (1024 bytes ran Q4_K decode at half the read
// bandwidth on a Sapphire Rapids-class Xeon; 4096 at three quarters), or on AMD one record ahead
// into L1 (StreamPrefetch). Prefill: per k block of kPanelKc, each span of kPanelRows rows is
// converted once into an F32 panel of codes and scales, then every block of kPanelMr x rows runs
// a register-blocked micro-kernel over the group's panels (the conversions amortized over m), x
// read from a copy packed once per call with each block's rows interleaved (PackX).
//
// Include only from those two translation units, after <immintrin.h>: everything is in an
// anonymous namespace (see quant_exact_layout.h).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul/quant_exact_layout.h"
#include "kernels/dispatch.h"

namespace uc::kernels::quant_exact {
namespace {  // NOLINT(build/namespaces): see quant_exact_layout.h

// The backend B: F (kLanes F32 lanes), I (kLanes int32 lanes) and
//   WidenU8(p), WidenI8(p): kLanes bytes at p to I; LoadLanes(p): kLanes int32 at p (any
//   alignment); F16s(p): kLanes f16 at p to F;
//   ToF32(I); LowNibble(I) = ToF32(v & 15); And(I, int), Or(I, I), Srl(I, count),
//   SrlI<k>(I), SllI<k>(I); Zero(), Set1(float), Mul, Fma(a, b, c) = a b + c (one rounding),
//   FmaBroadcast(p, w, c) = Fma(Set1(*p), w, c); AnyNotEqual(a, b): some lane a != b (or NaN);
//   Load / Store (aligned), LoadCols(p, cols) / StoreCols(p, v, cols): lanes < cols only;
//   Prefetch(p) into L2, PrefetchL1(p) into L1.

// Optionally, codes built a whole decode span at a time in the byte domain (the types with high
// bits: Q5_0, Q5_1, Q5_K, Q6_K, whose widened form needs about twice the operations): B::Bytes
// (kByteLanes bytes, one per row), LoadBytes(p), AndB(Bytes, int32 mask), OrB, SrlB<k>, SllB<k>
// (shifts of wider lanes: every use masks the bits that cross a byte) and Chunk<c>(Bytes): its
// bytes c kLanes .. (c + 1) kLanes - 1 widened to I. Used where a span is kByteLanes rows.
template <typename B, int V>
constexpr bool kByteSpan = requires {
  typename B::Bytes;
}
&&V* B::kLanes == B::kByteLanes;

// w[h] = the F32 codes of bytes h kLanes .. of e, h < V.
template <typename B, int V, int... kH>
[[gnu::always_inline]] inline void WidenSpan(typename B::Bytes e, typename B::F* w,
                                             std::integer_sequence<int, kH...>) {
  ((w[kH] = B::ToF32(B::template Chunk<kH>(e))), ...);
}
template <typename B, int V>
[[gnu::always_inline]] inline void WidenSpan(typename B::Bytes e, typename B::F* w) {
  WidenSpan<B, V>(e, w, std::make_integer_sequence<int, V>());
}

// Each type: its layout and
//   Decode2<V, kHigh16>(rec, g, s, r0, w): elements 2 s and 2 s + 1 of group g for pair rows
//     r0 .. r0 + V kLanes - 1 as F32 codes, w[e][h] for element e, rows r0 + kLanes h ...; with
//     kHigh16 (types with kHigh16Codes only) element 2 s + 1 as 16 q (see NibbleLine);
//   Scales<V>(rec, g, r0, dl, nml): dl and -ml of group g for those rows.

// Lanes of a kDwordLanes nibble line (DwordLanePos): read at byte offset 4 (row % 16) + row / 16
// of their first row, kLanes int32 lanes hold their rows' bytes in their low bytes (the other
// bytes are other rows', ignored), so a code needs no widening shuffle: the low nibble is
// LowNibble's (vpermps reads an index's low four bits at AVX-512), the high one LowNibble of the
// lanes shifted by 4 or, kHigh16, the F32 of the lanes & 0xF0 — 16 q, multiplied by an x
// element divided by 16 (OddElementsOver16): fma(x / 16, 16 q, p) is fma(x, q, p) bit for bit
// wherever x / 16 is exact, with no shift. On a Zen 4, whose zmm operations issue two a cycle
// whatever they are, the Q4_K decode step (128 weights) takes 20 of them instead of 24 (widen,
// permute, shift, convert): 11.1 cycles instead of 14.6 in registers, 12.4 without kHigh16.
template <typename B, int V, bool kHigh16>
[[gnu::always_inline]] inline void NibbleLine(const uint8_t* line, int r0,
                                              typename B::F (&w)[2][V]) {
#pragma GCC unroll 4
  for (int h = 0; h < V; ++h) {
    const typename B::I v = B::LoadLanes(line + DwordLanePos(r0 + B::kLanes * h));
    w[0][h] = B::LowNibble(v);
    if constexpr (kHigh16) {
      w[1][h] = B::ToF32(B::And(v, 0xF0));
    } else {
      w[1][h] = B::LowNibble(B::template SrlI<4>(v));
    }
  }
}

// The two elements of a nibble line with their fifth bits, bits `shift` and `shift` + 1 of the
// high line's bytes.
// FifthBitPair in the byte domain, kShift = shift: the fifth bits moved to bit 4 of each byte.
template <typename B, int V, int kShift>
[[gnu::always_inline]] inline void FifthBitBytes(const uint8_t* line, const uint8_t* high,
                                                 typename B::F (&w)[2][V]) {
  using Bytes = typename B::Bytes;
  const Bytes v = B::LoadBytes(line);
  const Bytes b = B::LoadBytes(high);
  constexpr int32_t k4 = 0x10101010, kLow = 0x0F0F0F0F;
  Bytes b0, b1;  // bit kShift, kShift + 1 of b at bit 4
  if constexpr (kShift == 0) {
    b0 = B::template SllB<4>(b);
    b1 = B::template SllB<3>(b);
  } else if constexpr (kShift == 2) {
    b0 = B::template SllB<2>(b);
    b1 = B::template SllB<1>(b);
  } else if constexpr (kShift == 4) {
    b0 = b;
    b1 = B::template SrlB<1>(b);
  } else {
    b0 = B::template SrlB<2>(b);
    b1 = B::template SrlB<3>(b);
  }
  WidenSpan<B, V>(B::OrB(B::AndB(v, kLow), B::AndB(b0, k4)), w[0]);
  WidenSpan<B, V>(B::OrB(B::AndB(B::template SrlB<4>(v), kLow), B::AndB(b1, k4)), w[1]);
}

template <typename B, int V>
[[gnu::always_inline]] inline void FifthBitPair(const uint8_t* line, const uint8_t* high, int shift,
                                                typename B::F (&w)[2][V]) {
  if constexpr (kByteSpan<B, V>) {
    switch (shift) {
      case 0:
        return FifthBitBytes<B, V, 0>(line, high, w);
      case 2:
        return FifthBitBytes<B, V, 2>(line, high, w);
      case 4:
        return FifthBitBytes<B, V, 4>(line, high, w);
      default:
        return FifthBitBytes<B, V, 6>(line, high, w);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < V; ++h) {
    const typename B::I v = B::WidenU8(line + B::kLanes * h);
    const typename B::I b = B::Srl(B::WidenU8(high + B::kLanes * h), shift);
    const typename B::I b0 = B::And(B::template SllI<4>(b), 16);
    const typename B::I b1 = B::And(B::template SllI<3>(b), 16);
    w[0][h] = B::ToF32(B::Or(B::And(v, 15), b0));
    w[1][h] = B::ToF32(B::Or(B::template SrlI<4>(v), b1));
  }
}

template <typename B>
struct Q8_0 : LayoutQ8_0 {
  static constexpr bool kHigh16Codes = false;
  template <int V, bool kHigh16 = false>
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int /*g*/, int s, int r0,
                                             typename B::F (&w)[2][V]) {
    const uint8_t* line = rec + kLines + 2 * s * kLine + r0;
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      w[0][h] = B::ToF32(B::WidenI8(line + B::kLanes * h));
      w[1][h] = B::ToF32(B::WidenI8(line + kLine + B::kLanes * h));
    }
  }
  template <int V>
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int /*g*/, int r0,
                                            typename B::F* dl, typename B::F* nml) {
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      dl[h] = B::F16s(rec + kD + 2 * (r0 + B::kLanes * h));
      // An offset of zero keeps the kernels those of Q4_0 (GCC 12 spilled a weight vector in
      // every FMA of the AVX-512 prefill kernel without the offset term: 1.5x slower).
      nml[h] = B::Zero();
    }
  }
};

template <typename B, bool kMin, bool kFifthBit>
struct Block32 : LayoutBlock32<kMin, kFifthBit> {
  using L = LayoutBlock32<kMin, kFifthBit>;
  static constexpr bool kHigh16Codes = L::kDwordLanes;
  template <int V, bool kHigh16 = false>
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int /*g*/, int s, int r0,
                                             typename B::F (&w)[2][V]) {
    const uint8_t* line = rec + L::kLines + s * kLine;
    if constexpr (kFifthBit) {
      FifthBitPair<B, V>(line + r0, rec + L::kHigh + (s / 4) * kLine + r0, 2 * (s % 4), w);
    } else {
      NibbleLine<B, V, kHigh16>(line, r0, w);
    }
  }
  template <int V>
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int /*g*/, int r0,
                                            typename B::F* dl, typename B::F* nml) {
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      const int64_t rows = 2 * (r0 + B::kLanes * h);
      dl[h] = B::F16s(rec + L::kD + rows);
      // Q4_0: w = d (q - 8) = d q - 8 d; Q5_0: d (q - 16); Q4_1 and Q5_1: w = d q + m.
      if constexpr (kMin) {
        nml[h] = B::F16s(rec + L::kM + rows);
      } else {
        nml[h] = B::Mul(dl[h], B::Set1(kFifthBit ? -16.0f : -8.0f));
      }
    }
  }
};

// Backends with MXFP4: E8M0s(p) (kLanes E8M0 bytes at p as E8M0HalfToF32 gives them) and either
// LookUp(v) (each byte of v, at most 15, replaced by that entry of kMxfp4Lookup: a byte shuffle;
// AVX2) or LookUpF32(v) (entry v & 15 of kMxfp4Lookup as F32, lane by lane: a permute of a
// table of F32s; AVX-512).
template <typename B>
constexpr bool kHasLookUpF32 = requires(typename B::I v) {
  B::LookUpF32(v);
};
template <typename B>
constexpr bool kHasMxfp4 = requires(typename B::I v, const uint8_t* p) {
  B::E8M0s(p);
}
&&(kHasLookUpF32<B> || requires(typename B::I v) { B::LookUp(v); });

// MXFP4's q by stored nibble (the code XOR 15, LayoutMxfp4): entry i = kMxfp4Values[i ^ 15] + 12,
// so entry 0 (code 15, -12) is 0, and a lane holding one nibble in its low byte (the others 0)
// looks up to the int32 q in one byte shuffle.
alignas(16) constexpr auto kMxfp4Lookup = [] {
  std::array<uint8_t, 16> t{};
  for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(kMxfp4Values[i ^ 15] + 12);
  return t;
}();

// MXFP4: q = kMxfp4Values[code] + 12 (0 .. 24), dl = E8M0HalfToF32(e), ml = 12 dl: Q4_0's form,
// with one byte shuffle a code for the table.
template <typename B>
struct Mxfp4 : LayoutMxfp4 {
  static constexpr bool kHigh16Codes = false;
  // The lanes as NibbleLine reads them; LookUp's byte shuffle takes every byte of a lane, so the
  // other rows' bytes are masked off first (entry 0 is 0).
  template <int V, bool kHigh16 = false>
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int /*g*/, int s, int r0,
                                             typename B::F (&w)[2][V]) {
    const uint8_t* line = rec + kLines + s * kLine;
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      const typename B::I v = B::LoadLanes(line + DwordLanePos(r0 + B::kLanes * h));
      if constexpr (kHasLookUpF32<B>) {
        w[0][h] = B::LookUpF32(v);
        w[1][h] = B::LookUpF32(B::template SrlI<4>(v));
      } else {
        w[0][h] = B::ToF32(B::LookUp(B::And(v, 15)));
        w[1][h] = B::ToF32(B::LookUp(B::And(B::template SrlI<4>(v), 15)));
      }
    }
  }
  template <int V>
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int /*g*/, int r0,
                                            typename B::F* dl, typename B::F* nml) {
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      dl[h] = B::E8M0s(rec + kE + r0 + B::kLanes * h);
      nml[h] = B::Mul(dl[h], B::Set1(-12.0f));
    }
  }
};

template <typename B, bool kFifthBit>
struct KScaleMin : LayoutKScaleMin<kFifthBit> {
  using L = LayoutKScaleMin<kFifthBit>;
  static constexpr bool kHigh16Codes = L::kDwordLanes;
  template <int V, bool kHigh16 = false>
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int g, int s, int r0,
                                             typename B::F (&w)[2][V]) {
    const uint8_t* line = rec + L::kLines + (16 * g + s) * kLine;
    if constexpr (kFifthBit) {
      // Elements 2 s and 2 s + 1 are bits 2 (s % 4) and 2 (s % 4) + 1 of high line 4 g + s / 4.
      FifthBitPair<B, V>(line + r0, rec + L::kHigh + (4 * g + s / 4) * kLine + r0, 2 * (s % 4), w);
    } else {
      NibbleLine<B, V, kHigh16>(line, r0, w);
    }
  }
  template <int V>
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int g, int r0, typename B::F* dl,
                                            typename B::F* nml) {
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      const int64_t row = r0 + B::kLanes * h;
      dl[h] = B::Mul(B::F16s(rec + L::kD + 2 * row),
                     B::ToF32(B::WidenU8(rec + L::kScale + g * kPairRows + row)));
      const typename B::F neg_dmin = B::Sub(B::Zero(), B::F16s(rec + L::kDmin + 2 * row));
      nml[h] = B::Mul(neg_dmin, B::ToF32(B::WidenU8(rec + L::kMin + g * kPairRows + row)));
    }
  }
};

template <typename B>
struct Q6_K : LayoutQ6_K {
  static constexpr bool kHigh16Codes = false;
  template <int V, bool kHigh16 = false>
  [[gnu::always_inline]] static void Decode2(const uint8_t* rec, int g, int s, int r0,
                                             typename B::F (&w)[2][V]) {
    const uint8_t* line = rec + kLines + (8 * g + s) * kLine + r0;
    // Elements 2 s, 2 s + 1: bits 4 (s % 2) .. 4 (s % 2) + 3 of high line 4 g + s / 2.
    const uint8_t* high = rec + kHigh + (4 * g + s / 2) * kLine + r0;
    const int shift = 4 * (s % 2);
    if constexpr (kByteSpan<B, V>) {
      using Bytes = typename B::Bytes;
      constexpr int32_t k6 = 0x30303030, kLow = 0x0F0F0F0F;
      const Bytes v = B::LoadBytes(line);
      const Bytes b = B::LoadBytes(high);
      // The high bits of the two elements at bits 4 and 5 of each byte.
      const Bytes b0 = shift ? b : B::template SllB<4>(b);
      const Bytes b1 = shift ? B::template SrlB<2>(b) : B::template SllB<2>(b);
      WidenSpan<B, V>(B::OrB(B::AndB(v, kLow), B::AndB(b0, k6)), w[0]);
      WidenSpan<B, V>(B::OrB(B::AndB(B::template SrlB<4>(v), kLow), B::AndB(b1, k6)), w[1]);
      return;
    }
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      const typename B::I v = B::WidenU8(line + B::kLanes * h);
      const typename B::I b = B::Srl(B::WidenU8(high + B::kLanes * h), shift);
      w[0][h] = B::ToF32(B::Or(B::And(v, 15), B::And(B::template SllI<4>(b), 48)));
      w[1][h] = B::ToF32(B::Or(B::template SrlI<4>(v), B::And(B::template SllI<2>(b), 48)));
    }
  }
  template <int V>
  [[gnu::always_inline]] static void Scales(const uint8_t* rec, int g, int r0, typename B::F* dl,
                                            typename B::F* nml) {
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      const int64_t row = r0 + B::kLanes * h;
      dl[h] = B::Mul(B::F16s(rec + kD + 2 * row),
                     B::ToF32(B::WidenI8(rec + kScale + g * kPairRows + row)));
      nml[h] = B::Mul(dl[h], B::Set1(-32.0f));
    }
  }
};

// The end of a group for MR x rows: acc = fma(dl, P, acc), then acc = fma(nml, S, acc), S the
// row's group sum (at xs[r * ldxs]). The one place both kernels apply the scales.
template <typename B, int MR, int V>
[[gnu::always_inline]] inline void ApplyGroup(const typename B::F (&dl)[V],
                                              const typename B::F (&nml)[V],
                                              const typename B::F (&p)[MR][V], const float* xs,
                                              int64_t ldxs, typename B::F (&acc)[MR][V]) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const typename B::F s = B::Set1(xs[r * ldxs]);
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      acc[r][h] = B::Fma(dl[h], p[r][h], acc[r][h]);
      acc[r][h] = B::Fma(nml[h], s, acc[r][h]);
    }
  }
}

// y rows r < MR, columns < cols = acc.
template <typename B, int MR, int V>
[[gnu::always_inline]] inline void StoreRows(const typename B::F (&acc)[MR][V], float* y,
                                             int64_t ldy, int cols) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      B::StoreCols(y + r * ldy + B::kLanes * h, acc[r][h], cols - B::kLanes * h);
    }
  }
}

// How the decode stream asks for what it reads next. kL2: kPrefetchBytes or one record ahead,
// whichever is more, into L2. kL1Record: one record ahead into L1; the one-row decode on AMD
// (a Zen 4, kernels_benchmark BM_MatMulPrecision, one token, weights cold, old and new binaries
// alternating: AVX-512 1.05-1.09x per matmul at one thread on Q4_0, Q4_K, Q6_K, Q5_K, MXFP4 and
// 1.12x on Q8_0, 1.0-1.08x at two; the AVX2 kernels 1.0-1.08x). Intel keeps kL2: not measured
// there.
enum class StreamPrefetch { kL2, kL1Record };

// y[r, c] (+)= x[r, 0..records * kRecordElems) · pair rows r0 .. r0 + V kLanes - 1 of the pair
// whose records start at `rec`, for r < MR and c < cols (columns past cols untouched). xs: the
// group sums of the x rows (ldxs apart) from the same k. kHigh16: x's odd elements divided by 16
// (OddElementsOver16) for Decode2's 16 q.
template <typename B, typename T, int V, int MR, StreamPrefetch kPrefetch, int64_t kPrefetchBytes,
          bool kHigh16>
void StreamKernel(const float* x, int64_t ldx, const float* xs, int64_t ldxs, const uint8_t* rec,
                  int r0, int64_t records, float* y, int64_t ldy, int cols) {
  using F = typename B::F;
  constexpr int kGroups = T::kRecordElems / T::kGroup;
  constexpr int kSteps = T::kGroup / 2;
  F acc[MR][V];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) acc[r][h] = B::Zero();
  }
  for (int64_t rr = 0; rr < records; ++rr, rec += T::kRecordBytes) {
    for (int g = 0; g < kGroups; ++g) {
      const int64_t e0 = rr * T::kRecordElems + g * T::kGroup;
      F p[MR][V];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
        for (int h = 0; h < V; ++h) p[r][h] = B::Zero();
      }
#pragma GCC unroll 2
      for (int s = 0; s < kSteps; ++s) {
        // The stream kAhead ahead of this step's share of the record: at least a record, so
        // that a record's high-bit lines, which follow all its nibble lines, are in cache before
        // its first step (Q5_K and Q6_K decode ran 1.3x faster on a Zen 4 than 4096 ahead).
        constexpr bool kL1 = kPrefetch == StreamPrefetch::kL1Record;
        constexpr int64_t kStride = T::kRecordBytes / (kGroups * kSteps);
        constexpr int64_t kAhead =
            kL1 ? T::kRecordBytes : std::max<int64_t>(kPrefetchBytes, T::kRecordBytes);
        const char* ahead =
            reinterpret_cast<const char*>(rec) + kAhead + (g * kSteps + s) * kStride;
#pragma GCC unroll 4
        for (int64_t b = 0; b < kStride + kLine - 1; b += kLine) {
          if constexpr (kL1) {
            B::PrefetchL1(ahead + b);
          } else {
            B::Prefetch(ahead + b);
          }
        }
        F w[2][V];
        T::template Decode2<V, kHigh16>(rec, g, s, r0, w);
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) {
            const float* xe = x + r * ldx + e0 + 2 * s + e;
#pragma GCC unroll 4
            for (int h = 0; h < V; ++h) p[r][h] = B::FmaBroadcast(xe, w[e][h], p[r][h]);
          }
        }
      }
      const int64_t gi = rr * kGroups + g;
      F dl[V], nml[V];
      T::template Scales<V>(rec, g, r0, dl, nml);
      ApplyGroup<B, MR, V>(dl, nml, p, xs + gi, ldxs, acc);
    }
  }
  StoreRows<B, MR, V>(acc, y, ldy, cols);
}

// One span of R rows of a k block for the prefill kernel, as F32: the codes of element kk of the
// block for the span's rows at codes[kk * R], and each group's dl and nml for them.
constexpr int64_t kPanelKc = 256;  // one K-quant record
template <int R>
struct Panel {
  alignas(64) float codes[kPanelKc * R];
  alignas(64) float dl[kPanelKc / 16][R];
  alignas(64) float nml[kPanelKc / 16][R];
};

// Pair rows r0 .. r0 + R - 1 of records [rec, rec + kc / kRecordElems) into `panel`, with the
// decode kernel's own conversions (so the codes and scales are the same F32 values).
template <typename B, typename T, int R>
void FillPanel(const uint8_t* rec, int r0, int64_t kc, Panel<R>& panel) {
  constexpr int V = R / B::kLanes;
  constexpr int kGroups = T::kRecordElems / T::kGroup;
  for (int64_t rr = 0; rr < kc / T::kRecordElems; ++rr, rec += T::kRecordBytes) {
    for (int g = 0; g < kGroups; ++g) {
      const int64_t gi = rr * kGroups + g;
      for (int s = 0; s < T::kGroup / 2; ++s) {
        typename B::F w[2][V];
        T::template Decode2<V>(rec, g, s, r0, w);
        float* out = panel.codes + (gi * T::kGroup + 2 * s) * R;
        for (int h = 0; h < V; ++h) {
          B::Store(out + B::kLanes * h, w[0][h]);
          B::Store(out + R + B::kLanes * h, w[1][h]);
        }
      }
      typename B::F dl[V], nml[V];
      T::template Scales<V>(rec, g, r0, dl, nml);
      for (int h = 0; h < V; ++h) {
        B::Store(panel.dl[gi] + B::kLanes * h, dl[h]);
        B::Store(panel.nml[gi] + B::kLanes * h, nml[h]);
      }
    }
  }
}

// y[r, c] (+)= x[r, 0..kc) · the panel's span for r < MR, c < cols: StreamKernel's operations in
// its order, the codes read from the panel instead of converted again. `xq` is the x block packed
// by PackX: element l of row r at xq[l * kXq + r] (kXq >= MR), so the MR broadcasts of one step
// read one cache line rather than MR rows a row stride apart (10% faster on a Sapphire Rapids-
// class Xeon: the layout BLIS packs its A panels in).
template <typename B, int kGroup, int R, int MR, int kXq>
void PanelKernel(const float* xq, const float* xs, int64_t ldxs, const Panel<R>& panel, int64_t kc,
                 float* y, int64_t ldy, int cols, bool accumulate) {
  using F = typename B::F;
  constexpr int V = R / B::kLanes;
  F acc[MR][V];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      acc[r][h] =
          accumulate ? B::LoadCols(y + r * ldy + B::kLanes * h, cols - B::kLanes * h) : B::Zero();
    }
  }
  for (int64_t gi = 0; gi < kc / kGroup; ++gi) {
    F p[MR][V];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int h = 0; h < V; ++h) p[r][h] = B::Zero();
    }
    const float* xg = xq + gi * kGroup * kXq;
    const float* codes = panel.codes + gi * kGroup * R;
#pragma GCC unroll 4
    for (int l = 0; l < kGroup; ++l) {
      F w[V];
#pragma GCC unroll 4
      for (int h = 0; h < V; ++h) w[h] = B::Load(codes + l * R + B::kLanes * h);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const F xb = B::Set1(xg[l * kXq + r]);
#pragma GCC unroll 4
        for (int h = 0; h < V; ++h) p[r][h] = B::Fma(xb, w[h], p[r][h]);
      }
    }
    F dl[V], nml[V];
#pragma GCC unroll 4
    for (int h = 0; h < V; ++h) {
      dl[h] = B::Load(panel.dl[gi] + B::kLanes * h);
      nml[h] = B::Load(panel.nml[gi] + B::kLanes * h);
    }
    ApplyGroup<B, MR, V>(dl, nml, p, xs + gi, ldxs, acc);
  }
  StoreRows<B, MR, V>(acc, y, ldy, cols);
}

// The group sums S_g of every x row: xs[i * (k / kGroup) + g], each summed in element order.
template <int kGroup>
const float* GroupSums(const MatMulArgs& a) {
  thread_local std::vector<float> sums;
  const int64_t groups = a.k / kGroup;
  sums.resize(static_cast<size_t>(a.m * groups));
  for (int64_t i = 0; i < a.m; ++i) {
    const float* row = a.x + i * a.k;
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.0f;
      for (int l = 0; l < kGroup; ++l) s += row[g * kGroup + l];
      sums[static_cast<size_t>(i * groups + g)] = s;
    }
  }
  return sums.data();
}

// x with its odd elements divided by 16, for the decode of kHigh16 codes (NibbleLine); null where
// that is inexact for some element (x / 16 subnormal with bits lost: 16 (x / 16) != x), and the
// kernel takes the codes unscaled. The buffer is the calling thread's, valid until its next call.
// In vectors: the calling thread runs it while the others wait (scalar, it was 1% of a 1.1B
// model's decode at two threads).
template <typename B>
const float* OddElementsOver16(const MatMulArgs& a) {
  alignas(64) static constexpr float kDown[16] = {1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f,
                                                  1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f};
  alignas(64) static constexpr float kUp[16] = {1, 16, 1, 16, 1, 16, 1, 16,
                                                1, 16, 1, 16, 1, 16, 1, 16};
  static_assert(B::kLanes % 2 == 0 && B::kLanes <= 16);
  thread_local std::vector<float> scaled;
  const int64_t n = a.m * a.k;  // k is even: a lane's parity is its element's in the row
  scaled.resize(static_cast<size_t>(n));
  const typename B::F down = B::Load(kDown), up = B::Load(kUp);
  for (int64_t i = 0; i < n; i += B::kLanes) {
    const int cols = static_cast<int>(std::min<int64_t>(B::kLanes, n - i));
    const typename B::F x = B::LoadCols(a.x + i, cols);
    const typename B::F s = B::Mul(x, down);
    if (B::AnyNotEqual(B::Mul(s, up), x)) return nullptr;  // lanes past cols: 0 == 0
    B::StoreCols(scaled.data() + i, s, cols);
  }
  return scaled.data();
}

// x packed for the prefill kernel: per k block of kPanelKc (the last may be shorter) and per
// block of `mr` rows, element l of row r at l * mr + r; block (k0, i0) starts at
// k0 * m_pad + i0 * kc (m_pad: m rounded up to mr; rows past m are zero). One pass over x,
// split over k blocks on `pool`; the buffer is the calling thread's, valid until its next call.
inline const float* PackX(const MatMulArgs& a, int mr, ThreadPool* pool) {
  thread_local std::vector<float> packed;
  const int64_t m_pad = (a.m + mr - 1) / mr * mr;
  packed.resize(static_cast<size_t>(m_pad * a.k));
  float* const out = packed.data();
  const int64_t blocks = (a.k + kPanelKc - 1) / kPanelKc;
  ParallelFor(
      pool, blocks,
      [&](int64_t b_begin, int64_t b_end) {
        for (int64_t b = b_begin; b < b_end; ++b) {
          const int64_t k0 = b * kPanelKc;
          const int64_t kc = std::min(kPanelKc, a.k - k0);
          for (int64_t i0 = 0; i0 < m_pad; i0 += mr) {
            float* block = out + k0 * m_pad + i0 * kc;
            for (int r = 0; r < mr; ++r) {
              const int64_t i = i0 + r;
              const float* row = a.x + i * a.k + k0;
              for (int64_t l = 0; l < kc; ++l) block[l * mr + r] = i < a.m ? row[l] : 0.0f;
            }
          }
        }
      },
      1);
  return out;
}

// The tuning of one backend: rows per decode call (a multiple of kLanes dividing 64), x rows per
// decode pass, rows per panel (a multiple of kLanes dividing 64), panels sharing a block of x
// rows, x rows per panel micro-kernel, how far ahead the decode stream prefetches.
struct Tuning {
  int decode_rows;
  int stream_rows;
  int panel_rows;
  int panels_per_group;
  int panel_mr;
  int64_t prefetch_bytes;
  // Rows per decode call when x has one row (0: decode_rows): more rows are more independent
  // chains and fewer passes over a pair, where one x row leaves the registers for them.
  int single_decode_rows = 0;
};

template <typename B, typename T, Tuning kT>
struct Driver {
  static constexpr int kDecodeV = kT.decode_rows / B::kLanes;
  static constexpr int kSingleRows =
      kT.single_decode_rows > 0 ? kT.single_decode_rows : kT.decode_rows;
  static_assert(kSingleRows % B::kLanes == 0 && kPairRows % kSingleRows == 0);
  using StreamFn = void (*)(const float*, int64_t, const float*, int64_t, const uint8_t*, int,
                            int64_t, float*, int64_t, int);
  using PanelFn = void (*)(const float*, const float*, int64_t, const Panel<kT.panel_rows>&,
                           int64_t, float*, int64_t, int, bool);

  template <bool kHigh16, int... kRows>
  static constexpr auto StreamTable(std::integer_sequence<int, kRows...>) {
    return std::array<StreamFn, sizeof...(kRows) + 1>{
        nullptr, StreamKernel<B, T, kDecodeV, kRows + 1, StreamPrefetch::kL2, kT.prefetch_bytes,
                              kHigh16>...};
  }
  template <int... kRows>
  static constexpr auto PanelTable(std::integer_sequence<int, kRows...>) {
    return std::array<PanelFn, sizeof...(kRows) + 1>{
        nullptr, PanelKernel<B, T::kGroup, kT.panel_rows, kRows + 1, kT.panel_mr>...};
  }

  // Decode: pairs [p_begin, p_end), decode_rows rows at a time, passes of up to stream_rows x
  // rows. kHigh16: a.x as OddElementsOver16 gives it. l1: one x row streams with kL1Record (more
  // rows pass over a span again from L2, where a stream into L1 only evicts: sixteen rows of Q5_K
  // and Q6_K ran 2-5% slower with it on a Zen 4).
  template <bool kHigh16>
  static void StreamPairs(const MatMulArgs& a, const float* xs, int64_t p_begin, int64_t p_end,
                          bool l1) {
    static constexpr auto kKernels =
        StreamTable<kHigh16>(std::make_integer_sequence<int, kT.stream_rows>());
    const int64_t groups = a.k / T::kGroup;
    const auto* packed = reinterpret_cast<const uint8_t*>(a.w_packed);
    const int span = a.m == 1 ? kSingleRows : kT.decode_rows;
    for (int64_t p = p_begin; p < p_end; ++p) {
      const uint8_t* rec = packed + p * PairBytes<T>(a.k);
      for (int r0 = 0; r0 < kPairRows; r0 += span) {
        const int64_t j0 = p * kPairRows + r0;
        if (j0 >= a.n) break;
        const int cols = static_cast<int>(std::min<int64_t>(span, a.n - j0));
        if (a.m == 1) {
          constexpr int kV = kSingleRows / B::kLanes;
          const int64_t records = a.k / T::kRecordElems;
          if (l1) {
            StreamKernel<B, T, kV, 1, StreamPrefetch::kL1Record, kT.prefetch_bytes, kHigh16>(
                a.x, a.k, xs, groups, rec, r0, records, a.y + j0, a.n, cols);
          } else {
            StreamKernel<B, T, kV, 1, StreamPrefetch::kL2, kT.prefetch_bytes, kHigh16>(
                a.x, a.k, xs, groups, rec, r0, records, a.y + j0, a.n, cols);
          }
          continue;
        }
        for (int64_t i0 = 0; i0 < a.m; i0 += kT.stream_rows) {
          const int rows = static_cast<int>(std::min<int64_t>(kT.stream_rows, a.m - i0));
          kKernels[rows](a.x + i0 * a.k, a.k, xs + i0 * groups, groups, rec, r0,
                         a.k / T::kRecordElems, a.y + i0 * a.n + j0, a.n, cols);
        }
      }
    }
  }

  // Prefill: pairs [p_begin, p_end) in groups of panels_per_group spans, k blocks of kPanelKc;
  // xq: x as PackX(a, panel_mr) packed it.
  static void TiledPairs(const MatMulArgs& a, const float* xs, const float* xq, int64_t p_begin,
                         int64_t p_end) {
    constexpr int R = kT.panel_rows;
    constexpr int kSpansPerPair = kPairRows / R;
    static constexpr auto kKernels = PanelTable(std::make_integer_sequence<int, kT.panel_mr>());
    thread_local std::vector<Panel<R>> panels(kT.panels_per_group);
    const int64_t groups = a.k / T::kGroup;
    const int64_t m_pad = (a.m + kT.panel_mr - 1) / kT.panel_mr * kT.panel_mr;
    const auto* packed = reinterpret_cast<const uint8_t*>(a.w_packed);
    const int64_t span_end =
        std::min(p_end * kSpansPerPair, (a.n + R - 1) / R);  // spans holding rows < n
    for (int64_t g0 = p_begin * kSpansPerPair; g0 < span_end; g0 += kT.panels_per_group) {
      const int64_t g_end = std::min<int64_t>(span_end, g0 + kT.panels_per_group);
      for (int64_t k0 = 0; k0 < a.k; k0 += kPanelKc) {
        const int64_t kc = std::min(kPanelKc, a.k - k0);
        for (int64_t sp = g0; sp < g_end; ++sp) {
          const uint8_t* rec = packed + (sp / kSpansPerPair) * PairBytes<T>(a.k) + PairBytes<T>(k0);
          FillPanel<B, T, R>(rec, static_cast<int>(sp % kSpansPerPair) * R, kc, panels[sp - g0]);
        }
        for (int64_t i0 = 0; i0 < a.m; i0 += kT.panel_mr) {
          const int rows = static_cast<int>(std::min<int64_t>(kT.panel_mr, a.m - i0));
          for (int64_t sp = g0; sp < g_end; ++sp) {
            const int64_t j0 = sp * R;
            const int cols = static_cast<int>(std::min<int64_t>(R, a.n - j0));
            kKernels[rows](xq + k0 * m_pad + i0 * kc, xs + i0 * groups + k0 / T::kGroup, groups,
                           panels[sp - g0], kc, a.y + i0 * a.n + j0, a.n, cols, k0 > 0);
          }
        }
      }
    }
  }

  static void Run(const MatMulArgs& args, ThreadPool* pool) {
    const float* xs = GroupSums<T::kGroup>(args);
    const int64_t num_pairs = (args.n + kPairRows - 1) / kPairRows;
    const bool stream = args.m <= kT.stream_rows;
    const float* xq = stream ? nullptr : PackX(args, kT.panel_mr, pool);
    MatMulArgs high16 = args;
    high16.x = stream && T::kHigh16Codes ? OddElementsOver16<B>(args) : nullptr;
    const bool amd = internal::CpuIsAmd();
    const int64_t min_pairs = std::max<int64_t>(1, MinRowsPerChunk(args.m * args.k) / kPairRows);
    ParallelForDynamic(
        pool, num_pairs,
        [&](int64_t begin, int64_t end) {
          if (!stream) {
            TiledPairs(args, xs, xq, begin, end);
          } else if (high16.x != nullptr) {
            if constexpr (T::kHigh16Codes) StreamPairs<true>(high16, xs, begin, end, amd);
          } else {
            StreamPairs<false>(args, xs, begin, end, amd);
          }
        },
        min_pairs);
  }
};

// Calls f(T{}) with T the kernel type of `dtype` on backend B; false for a dtype without one.
template <typename B, typename Fn>
bool VisitType(DType dtype, Fn&& f) {
  switch (dtype) {
    case DType::kQ8_0:
      f(Q8_0<B>{});
      return true;
    case DType::kQ4_0:
      f(Block32<B, false, false>{});
      return true;
    case DType::kQ4_1:
      f(Block32<B, true, false>{});
      return true;
    case DType::kQ5_0:
      f(Block32<B, false, true>{});
      return true;
    case DType::kQ5_1:
      f(Block32<B, true, true>{});
      return true;
    case DType::kQ4_K:
      f(KScaleMin<B, false>{});
      return true;
    case DType::kQ5_K:
      f(KScaleMin<B, true>{});
      return true;
    case DType::kQ6_K:
      f(Q6_K<B>{});
      return true;
    case DType::kMXFP4:
      if constexpr (kHasMxfp4<B>) {
        f(Mxfp4<B>{});
        return true;
      }
      return false;
    default:
      return false;
  }
}

// The pairs, then one line of zeros: the decode of kDwordLanes lines reads up to three bytes past
// a line (NibbleLine).
template <typename B>
int64_t PackedBytes(DType dtype, int64_t n, int64_t k) {
  int64_t bytes = 0;
  VisitType<B>(dtype, [&](auto t) {
    using T = decltype(t);
    if (k % T::kRecordElems == 0) {
      bytes = (n + kPairRows - 1) / kPairRows * PairBytes<T>(k) + kLine;
    }
  });
  return bytes;
}

template <typename B>
void Pack(const MatMulArgs& args, std::byte* out, ThreadPool* pool) {
  const bool known = VisitType<B>(args.w_dtype, [&](auto t) {
    using T = decltype(t);
    PackPairs<T>(args, out, pool);
    std::memset(out + (args.n + kPairRows - 1) / kPairRows * PairBytes<T>(args.k), 0, kLine);
  });
  UC_CHECK(known, "PackQuantExact: no packed exact layout for %s",
           std::string(DTypeName(args.w_dtype)).c_str());
}

template <typename B, Tuning kT>
void MatMul(const MatMulArgs& args, ThreadPool* pool) {
  UC_CHECK(args.w_packed != nullptr, "MatMulQuantExact: needs PackQuantExact's layout");
  const bool known =
      VisitType<B>(args.w_dtype, [&](auto t) { Driver<B, decltype(t), kT>::Run(args, pool); });
  UC_CHECK(known, "MatMulQuantExact: no packed exact layout for %s",
           std::string(DTypeName(args.w_dtype)).c_str());
}

}  // namespace
}  // namespace uc::kernels::quant_exact
