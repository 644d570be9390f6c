# Declarative build helpers (abseil style):
#   uc_library(NAME layers SRCS a.cc b.cc DEPS kernels distributed [AVX2_SRCS cpu/x.cc]
#              [AVX512_SRCS cpu/y_avx512.cc] [AVX512_BF16_SRCS cpu/z_bf16_avx512.cc])
#   uc_test(NAME linear_test SRCS linear_test.cc DEPS layers LABELS unit [TIMEOUT 60])
# (one label per uc_test: gtest_discover_tests cannot pass a list of labels through).
# A library NAME is target `uc_NAME` with alias `uc::NAME`; its include root is src/, so code
# includes "module/file.h".

set(UC_SRC_ROOT ${CMAKE_SOURCE_DIR}/src)

function(uc_apply_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter
                         -Wno-format-zero-length)  # UC_CHECK(cond) without a message
  if(UC_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(UC_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# The asan preset compiles at -O0: ASan and UBSan at -O1 take 2.5 times as long to compile. A
# library whose tests run long loops (the kernels' large products, the template engine's step
# budgets) keeps -O1 under the sanitizers with uc_optimize_under_sanitizers(target).
function(uc_optimize_under_sanitizers target)
  if(UC_SANITIZE)
    target_compile_options(${target} PRIVATE -O1)
  endif()
endfunction()

# UC_BUILD_FUZZ with clang: every library gets libFuzzer's coverage instrumentation and the
# sanitizers, so the fuzz targets (fuzz/CMakeLists.txt) see inside the parsers they call.
if(UC_BUILD_FUZZ)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                        -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=address,undefined)
  else()
    message(WARNING "UC_BUILD_FUZZ needs clang (CXX=clang++); only the replay tests are built")
  endif()
endif()

function(uc_library)
  cmake_parse_arguments(UC "" "NAME" "SRCS;DEPS;AVX2_SRCS;AVX512_SRCS;AVX512_BF16_SRCS;AVX512_VBMI_SRCS" ${ARGN})
  add_library(uc_${UC_NAME} STATIC ${UC_SRCS} ${UC_AVX2_SRCS} ${UC_AVX512_SRCS}
              ${UC_AVX512_BF16_SRCS} ${UC_AVX512_VBMI_SRCS})
  add_library(uc::${UC_NAME} ALIAS uc_${UC_NAME})
  target_include_directories(uc_${UC_NAME} PUBLIC ${UC_SRC_ROOT})
  target_link_libraries(uc_${UC_NAME} PUBLIC ${UC_DEPS})
  # Kernels with explicit x86 SIMD are compiled for AVX2+FMA+F16C (AVX2_SRCS) or for AVX-512
  # F/BW/VL/DQ + VNNI (AVX512_SRCS; AVX512_BF16_SRCS adds AVX512_BF16, AVX512_VBMI_SRCS
  # AVX512_VBMI) and dispatched at run
  # time, so the binary still runs (on the next level down, at worst scalar code) on CPUs
  # without them.
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    if(UC_AVX2_SRCS)
      set_source_files_properties(${UC_AVX2_SRCS} PROPERTIES COMPILE_OPTIONS
                                  "-mavx2;-mfma;-mf16c")
    endif()
    if(UC_AVX512_SRCS)
      set_source_files_properties(${UC_AVX512_SRCS} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx2;-mfma;-mf16c")
    endif()
    if(UC_AVX512_BF16_SRCS)
      set_source_files_properties(${UC_AVX512_BF16_SRCS} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16;-mavx2;-mfma;-mf16c")
    endif()
    if(UC_AVX512_VBMI_SRCS)
      set_source_files_properties(${UC_AVX512_VBMI_SRCS} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512vbmi;-mavx2;-mfma;-mf16c")
    endif()
  endif()
  uc_apply_warnings(uc_${UC_NAME})
endfunction()

# UC_TEST_LABELS: the test labels whose executables the default target builds (empty: all). The
# asan preset builds only the unit and bad-input tests it runs; the others stay defined (other
# targets may depend on them) but are built only when asked for by name.
set(UC_TEST_LABELS "" CACHE STRING "Labels of the tests to build by default (empty: all)")

function(uc_exclude_unwanted_test target labels)
  if(NOT UC_TEST_LABELS)
    return()
  endif()
  foreach(label IN LISTS labels)
    if(label IN_LIST UC_TEST_LABELS)
      return()
    endif()
  endforeach()
  set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL TRUE)
endfunction()

function(uc_test)
  cmake_parse_arguments(UC "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT UC_BUILD_TESTS)
    return()
  endif()
  add_executable(${UC_NAME} ${UC_SRCS})
  target_link_libraries(${UC_NAME} PRIVATE ${UC_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${UC_NAME} PRIVATE
    UC_SOURCE_DIR="${CMAKE_SOURCE_DIR}" UC_BINARY_DIR="${CMAKE_BINARY_DIR}")
  uc_apply_warnings(${UC_NAME})
  if(NOT UC_LABELS)
    set(UC_LABELS unit)
  endif()
  if(NOT UC_TIMEOUT)
    set(UC_TIMEOUT 300)
  endif()
  uc_exclude_unwanted_test(${UC_NAME} "${UC_LABELS}")
  gtest_discover_tests(${UC_NAME}
    PROPERTIES LABELS "${UC_LABELS}" TIMEOUT ${UC_TIMEOUT}
    DISCOVERY_TIMEOUT 60)
endfunction()

# MPI tests (label `mpi`): one executable run as `mpiexec -n NP` with its own main (link
# uc_gtest_mpi_main, which src/distributed defines, unless SRCS bring a main), e.g.
#   uc_mpi_test(NAME mpi_collectives_test SRCS mpi_collectives_test.cc
#     DEPS uc::distributed_mpi NP 2 TIMEOUT 60)
# Open MPI refuses root without --allow-run-as-root and more ranks than cores without
# --oversubscribe, and binds each rank to one core unless --bind-to none; UC_MPIEXEC_PREFLAGS
# carries these (set it empty for another MPI). mpirun's own --timeout ends a deadlocked job
# before CTest's TIMEOUT would kill mpirun and orphan the ranks. Tests run serially: two
# MPI jobs on 2 cores starve each other.
set(UC_MPIEXEC_PREFLAGS "--oversubscribe;--allow-run-as-root;--bind-to;none" CACHE STRING
    "Flags placed before the program in MPI test command lines")

function(uc_mpi_test)
  cmake_parse_arguments(UC "NO_MPI_MAIN" "NAME;NP;TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  if(NOT UC_BUILD_TESTS)
    return()
  endif()
  if(NOT UC_NP)
    set(UC_NP 2)
  endif()
  if(NOT UC_TIMEOUT)
    set(UC_TIMEOUT 120)
  endif()
  if(NOT UC_LABELS)
    set(UC_LABELS mpi)
  endif()
  add_executable(${UC_NAME} ${UC_SRCS})
  target_link_libraries(${UC_NAME} PRIVATE ${UC_DEPS} GTest::gtest MPI::MPI_C)
  if(NOT UC_NO_MPI_MAIN)
    target_link_libraries(${UC_NAME} PRIVATE uc_gtest_mpi_main)
  endif()
  target_compile_definitions(${UC_NAME} PRIVATE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1
    UC_SOURCE_DIR="${CMAKE_SOURCE_DIR}" UC_BINARY_DIR="${CMAKE_BINARY_DIR}")
  uc_apply_warnings(${UC_NAME})
  uc_exclude_unwanted_test(${UC_NAME} "${UC_LABELS}")
  set(timeout_flags)
  if(MPI_C_LIBRARY_VERSION_STRING MATCHES "Open MPI")
    set(timeout_flags --timeout ${UC_TIMEOUT})
  endif()
  math(EXPR ctest_timeout "${UC_TIMEOUT} + 15")
  add_test(NAME ${UC_NAME}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${UC_NP} ${UC_MPIEXEC_PREFLAGS}
            ${timeout_flags} ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${UC_NAME}>
            ${MPIEXEC_POSTFLAGS} ${UC_ARGS})
  set_tests_properties(${UC_NAME} PROPERTIES LABELS "${UC_LABELS}" TIMEOUT ${ctest_timeout}
    RUN_SERIAL TRUE PROCESSORS ${UC_NP})
endfunction()
