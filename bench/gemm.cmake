# bench_gemm: emulated GEMM under each accumulator model, against a plain
# binary32 loop and (if found) OpenBLAS sgemm.  Included from
# bench/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/gemm.cmake)
# Run: OPENBLAS_NUM_THREADS=1 ./build/bench/bench_gemm [--quick]
add_executable(bench_gemm ${CMAKE_CURRENT_LIST_DIR}/bench_gemm.c)
target_link_libraries(bench_gemm PRIVATE emu::emu m)
if(EMU_USE_OPENBLAS)
  # libemu's OpenBLAS target is scoped to its directory: look it up here too.
  pkg_check_modules(BENCH_OPENBLAS QUIET IMPORTED_TARGET openblas)
  if(BENCH_OPENBLAS_FOUND)
    target_link_libraries(bench_gemm PRIVATE PkgConfig::BENCH_OPENBLAS)
    target_compile_definitions(bench_gemm PRIVATE BENCH_HAVE_CBLAS=1)
  endif()
endif()
