// File: quant_exact_layout.h
// -----------------------------------------------------------------------------
// The packed layout of quantized weights multiplied exactly (MatMulPrecision::kExact), in scalar
// code: each type's record and the packer. quant_exact_kernels.h reads it; see there for the
// arithmetic.
//
// Pairs of 32-row tiles (64 rows, n rounded up, rows past n zero); a pair's k range is a run of
// records (256 elements for the K-quants, 32 for the others), each record the pair's scale
// fields and then 64-byte lines with one byte per row: row c of the pair is byte c, except in
// the nibble lines of the types without high bits (Q4_0, Q4_1, Q4_K, MXFP4: kDwordLanes), where
// row 16 b + j is byte 4 j + b (DwordLanePos), so that the lines read at byte offset b hold rows
// 16 b .. 16 b + 15 in the low bytes of their int32 lanes (see NibbleLine in
// quant_exact_kernels.h). Scale fields are in row order everywhere. Nibble lines
// hold elements 2 s (low nibble) and 2 s + 1 (high) of a group (MXFP4's FP4 codes too); Q8_0 lines
// one element; Q6_K's
// high-bit lines the top two bits of elements 4 s .. 4 s + 3 (bits 2 p, 2 p + 1 for element
// 4 s + p), Q5_0's, Q5_1's and Q5_K's the fifth bit of elements 8 s .. 8 s + 7 of a group. Every
// record is a whole number of lines, so a pair is one 64-byte-aligned stream. Scale fields are
// stored as in the blocks (f16 d, integer scales), so the layout is about the stored size.
//
// Include only from the kernel translation units (matmul_quant_exact_*.cc), after the SIMD
// headers: everything is in an anonymous namespace, so that each unit compiles its own copy with
// its own instruction set (no AVX-512 copy of an inline function can stand in for the AVX2 one).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "tensor/dtype.h"

namespace uc::kernels::quant_exact {
namespace {  // NOLINT(build/namespaces): see the header comment

constexpr int kPairRows = 64;  // rows per pair, bytes per line
constexpr int kLine = 64;      // bytes per line

// The byte of pair row c in a kDwordLanes nibble line.
constexpr int DwordLanePos(int c) { return 4 * (c % 16) + c / 16; }

// Each layout: kRecordElems, kGroup (elements sharing a scale), kRecordBytes, the offsets of its
// fields in bytes from the record's start, and PackRow(block, c, rec): the stored block of
// record `rec` of pair row c written into the record.

struct LayoutQ8_0 {
  static constexpr int kRecordElems = 32;
  static constexpr int kGroup = 32;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kLines = kD + 2 * kPairRows;
  static constexpr int64_t kRecordBytes = kLines + 32 * kLine;
  static constexpr bool kDwordLanes = false;
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(block);
    std::memcpy(rec + kD + 2 * c, &b->d, 2);
    for (int l = 0; l < 32; ++l) rec[kLines + l * kLine + c] = static_cast<uint8_t>(b->qs[l]);
  }
};

// Q4_0 and Q4_1 (kMin), and with kFifthBit Q5_0 and Q5_1: 32-element blocks of nibbles (element
// l < 16 the low nibble of qs[l], else the high nibble of qs[l - 16]); the fifth bits (bit l of
// qh, little-endian) in four lines of their own.
template <bool kMin, bool kFifthBit>
struct LayoutBlock32 {
  static constexpr int kRecordElems = 32;
  static constexpr int kGroup = 32;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kM = kD + 2 * kPairRows;  // Q4_1's and Q5_1's m
  static constexpr int64_t kLines = kM + (kMin ? 2 * kPairRows : 0);
  static constexpr int64_t kHigh = kLines + 16 * kLine;
  static constexpr int64_t kRecordBytes = kHigh + (kFifthBit ? 4 * kLine : 0);
  static constexpr bool kDwordLanes = !kFifthBit;
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const uint8_t* qs;
    const uint8_t* qh = nullptr;
    uint16_t d, m = 0;
    if constexpr (kMin && kFifthBit) {
      const auto* b = reinterpret_cast<const BlockQ5_1*>(block);
      d = b->d, m = b->m, qs = b->qs, qh = b->qh;
    } else if constexpr (kFifthBit) {
      const auto* b = reinterpret_cast<const BlockQ5_0*>(block);
      d = b->d, qs = b->qs, qh = b->qh;
    } else if constexpr (kMin) {
      const auto* b = reinterpret_cast<const BlockQ4_1*>(block);
      d = b->d, m = b->m, qs = b->qs;
    } else {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(block);
      d = b->d, qs = b->qs;
    }
    std::memcpy(rec + kD + 2 * c, &d, 2);
    if constexpr (kMin) std::memcpy(rec + kM + 2 * c, &m, 2);
    auto low = [&](int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; };
    for (int s = 0; s < 16; ++s) {
      rec[kLines + s * kLine + (kDwordLanes ? DwordLanePos(c) : c)] =
          static_cast<uint8_t>(low(2 * s) | (low(2 * s + 1) << 4));
    }
    if constexpr (kFifthBit) {
      for (int s = 0; s < 4; ++s) rec[kHigh + s * kLine + c] = qh[s];
    }
  }
};

// MXFP4: 32-element blocks of FP4 codes (element l < 16 the low nibble of qs[l], else the high
// nibble of qs[l - 16]) in Q4_0's nibble lines, each code stored XOR 15 (so that the most
// negative value, code 15, is the nibble 0: see quant_exact_kernels.h's kMxfp4Lookup), and the
// E8M0 scale byte of each row.
struct LayoutMxfp4 {
  static constexpr int kRecordElems = 32;
  static constexpr int kGroup = 32;
  static constexpr int64_t kE = 0;  // [row] u8
  static constexpr int64_t kLines = kE + kPairRows;
  static constexpr int64_t kRecordBytes = kLines + 16 * kLine;
  static constexpr bool kDwordLanes = true;
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const auto* b = reinterpret_cast<const BlockMXFP4*>(block);
    rec[kE + c] = b->e;
    auto code = [&](int e) { return (e < 16 ? b->qs[e] & 15 : b->qs[e - 16] >> 4) ^ 15; };
    for (int s = 0; s < 16; ++s) {
      rec[kLines + s * kLine + DwordLanePos(c)] =
          static_cast<uint8_t>(code(2 * s) | (code(2 * s + 1) << 4));
    }
  }
};

// Q4_K and Q5_K: eight groups of 32 with a 6-bit scale and min each; Q5_K's fifth bits in lines
// of their own.
template <bool kFifthBit>
struct LayoutKScaleMin {
  static constexpr int kRecordElems = 256;
  static constexpr int kGroup = 32;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kDmin = kD + 2 * kPairRows;
  static constexpr int64_t kScale = kDmin + 2 * kPairRows;  // [group][row] u8
  static constexpr int64_t kMin = kScale + 8 * kPairRows;   // [group][row] u8
  static constexpr int64_t kLines = kMin + 8 * kPairRows;   // 128 nibble lines
  static constexpr int64_t kHigh = kLines + 128 * kLine;    // Q5_K: 32 lines of fifth bits
  static constexpr int64_t kRecordBytes = kHigh + (kFifthBit ? 32 * kLine : 0);
  static constexpr bool kDwordLanes = !kFifthBit;
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const uint8_t* scales;
    const uint8_t* qs;
    const uint8_t* qh = nullptr;
    uint16_t d, dmin;
    if constexpr (kFifthBit) {
      const auto* b = reinterpret_cast<const BlockQ5_K*>(block);
      d = b->d, dmin = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
    } else {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(block);
      d = b->d, dmin = b->dmin, scales = b->scales, qs = b->qs;
    }
    std::memcpy(rec + kD + 2 * c, &d, 2);
    std::memcpy(rec + kDmin + 2 * c, &dmin, 2);
    for (int g = 0; g < 8; ++g) {
      uint8_t scale, min;
      KScaleMin(scales, g, &scale, &min);
      rec[kScale + g * kPairRows + c] = scale;
      rec[kMin + g * kPairRows + c] = min;
      auto code = [&](int l) { return (qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 15; };
      for (int s = 0; s < 16; ++s) {
        rec[kLines + (16 * g + s) * kLine + (kDwordLanes ? DwordLanePos(c) : c)] =
            static_cast<uint8_t>(code(2 * s) | (code(2 * s + 1) << 4));
      }
      if constexpr (kFifthBit) {
        for (int s = 0; s < 4; ++s) {
          int bits = 0;
          for (int e = 0; e < 8; ++e) bits |= ((qh[8 * s + e] >> g) & 1) << e;
          rec[kHigh + (4 * g + s) * kLine + c] = static_cast<uint8_t>(bits);
        }
      }
    }
  }
};

// Q6_K: sixteen groups of 16 with an int8 scale each; codes of 6 bits (q - 32 in the stored
// format).
struct LayoutQ6_K {
  static constexpr int kRecordElems = 256;
  static constexpr int kGroup = 16;
  static constexpr int64_t kD = 0;
  static constexpr int64_t kScale = kD + 2 * kPairRows;       // [group][row] i8
  static constexpr int64_t kLines = kScale + 16 * kPairRows;  // 128 nibble lines
  static constexpr int64_t kHigh = kLines + 128 * kLine;      // 64 lines of two-bit pairs
  static constexpr int64_t kRecordBytes = kHigh + 64 * kLine;
  static constexpr bool kDwordLanes = false;
  static void PackRow(const std::byte* block, int c, uint8_t* rec) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    std::memcpy(rec + kD + 2 * c, &b->d, 2);
    for (int g = 0; g < 16; ++g) {
      rec[kScale + g * kPairRows + c] = static_cast<uint8_t>(b->scales[g]);
    }
    auto code = [&](int e) {
      const int h = e / 128, r = (e % 128) / 32, l = e % 32;
      return ((b->ql[64 * h + 32 * (r % 2) + l] >> (4 * (r / 2))) & 15) |
             (((b->qh[32 * h + l] >> (2 * r)) & 3) << 4);
    };
    for (int s = 0; s < 128; ++s) {
      rec[kLines + s * kLine + c] =
          static_cast<uint8_t>((code(2 * s) & 15) | ((code(2 * s + 1) & 15) << 4));
    }
    for (int s = 0; s < 64; ++s) {
      int bits = 0;
      for (int p = 0; p < 4; ++p) bits |= (code(4 * s + p) >> 4) << (2 * p);
      rec[kHigh + s * kLine + c] = static_cast<uint8_t>(bits);
    }
  }
};

template <typename L>
int64_t PairBytes(int64_t k) {
  return k / L::kRecordElems * L::kRecordBytes;
}

// Writes a's weights in L's layout to out (PackedBytes), pairs split over the pool.
template <typename L>
void PackPairs(const MatMulArgs& a, std::byte* out, ThreadPool* pool) {
  const int64_t records = a.k / L::kRecordElems;
  const int64_t record_row_bytes = DTypeRowBytes(a.w_dtype, L::kRecordElems);
  const int64_t num_pairs = (a.n + kPairRows - 1) / kPairRows;
  ParallelFor(
      pool, num_pairs,
      [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          auto* pair = reinterpret_cast<uint8_t*>(out) + p * PairBytes<L>(a.k);
          std::memset(pair, 0, static_cast<size_t>(PairBytes<L>(a.k)));
          const int rows = static_cast<int>(std::min<int64_t>(kPairRows, a.n - p * kPairRows));
          for (int64_t rr = 0; rr < records; ++rr) {
            uint8_t* rec = pair + rr * L::kRecordBytes;
            for (int c = 0; c < rows; ++c) {
              const std::byte* row = a.w + (p * kPairRows + c) * a.w_row_bytes;
              L::PackRow(row + rr * record_row_bytes, c, rec);
            }
          }
        }
      },
      1);
}

}  // namespace
}  // namespace uc::kernels::quant_exact
