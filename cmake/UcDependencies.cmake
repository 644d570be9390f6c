# Every dependency comes from Debian's packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(yaml-cpp REQUIRED)  # the probe spec format
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# The server's HTTP front end: Boost.Beast on Boost.Asio (header-only), zlib for gzip/deflate
# request bodies.
find_package(Boost 1.74 REQUIRED)
find_package(ZLIB REQUIRED)
# HTTP client (the webhook sink; the tests' client); Debian builds it as a shared library with
# TLS, so the flags come from its pkg-config file.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_package(prometheus-cpp REQUIRED COMPONENTS core)  # metrics, Prometheus text format
if(UC_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(UC_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
