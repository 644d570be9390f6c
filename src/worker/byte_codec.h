// File: byte_codec.h
// -----------------------------------------------------------------------------
// Little helpers that pack plain values into a byte string and read them back, for the
// messages the driver broadcasts (same binary on every rank, so no endianness games). A reader
// never reads past its input: every Get returns false instead. Internal to worker/.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace uc::worker::internal {

class ByteWriter {
 public:
  template <typename T>
  void Put(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutInts(const std::vector<int32_t>& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    if (!v.empty()) {
      out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
    }
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& in) : in_(in) {}
  template <typename T>
  bool Get(T& v) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetInts(std::vector<int32_t>& v) {
    uint32_t n = 0;
    if (!Get(n) || pos_ + size_t{n} * sizeof(int32_t) > in_.size()) return false;
    v.resize(n);
    if (n > 0) std::memcpy(v.data(), in_.data() + pos_, n * sizeof(int32_t));
    pos_ += n * sizeof(int32_t);
    return true;
  }
  bool GetString(std::string& s) {
    uint32_t n = 0;
    if (!Get(n) || pos_ + n > in_.size()) return false;
    s.assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace uc::worker::internal
