#!/usr/bin/env bash
# Installs Undercurrent's build and test dependencies from Debian 12's packages.
# Idempotent; uses sudo when not run as root. The Python packages the tests and examples use
# (tests/requirements.txt: numpy, the OpenAI SDK, pytest, and nanobind and scikit-build-core,
# which build the Python extension module) go into a virtual environment, build/venv: the one
# interpreter the tests run (CMake's UC_TEST_PYTHON) and the one the module is built for,
# whatever `python3` is first on PATH.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang-format
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev nlohmann-json3-dev libcpp-httplib-dev prometheus-cpp-dev libcli11-dev
  libboost-dev zlib1g-dev  # the server's HTTP front end: Boost.Beast/Asio; gzip request bodies
  libpcre2-dev
  libdlpack-dev  # dlpack.h, which xgrammar (third_party/xgrammar) includes
  python3 python3-pip python3-venv python3-dev  # python3-dev: the extension module's headers
  iproute2 util-linux procps
  prometheus  # promtool: the tests check the metrics output with `promtool check metrics`
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cd "$(dirname "$0")/.."
if [ ! -x build/venv/bin/python ]; then python3 -m venv build/venv; fi
build/venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
