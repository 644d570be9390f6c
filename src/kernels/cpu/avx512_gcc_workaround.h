// File: avx512_gcc_workaround.h
// -----------------------------------------------------------------------------
// Included first by the AVX-512 translation units (kernels/cpu/*_avx512.cc), before
// <immintrin.h>: GCC 12's AVX-512 headers start some intrinsics from `__m512i __Y = __Y;`, which
// -Wuninitialized reports wherever they are inlined (GCC bug 105593). The diagnostics are
// silenced for the rest of the including file.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
