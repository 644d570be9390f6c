// File: weights_test_util.h
// -----------------------------------------------------------------------------
// Hand-written .npy files for the probe tests (numpy's format: magic, version, little-endian
// header length, a Python-dict header padded with spaces to a multiple of 64 bytes, the data).
#pragma once

#include <cstring>
#include <string>
#include <vector>

namespace uc::probe::testing {

inline std::string Npy(const std::string& descr, const std::string& shape, const std::string& data,
                       int major = 1) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < prefix - 8; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

inline std::string NpyF4(const std::vector<float>& values, const std::string& shape,
                         int major = 1) {
  std::string data(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(data.data(), values.data(), data.size());
  return Npy("<f4", shape, data, major);
}

}  // namespace uc::probe::testing
