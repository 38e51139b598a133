# bench_train: cost of a training step per precision policy, peak memory per
# model, one Fashion-MNIST epoch of the CNN.  Included from
# bench/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/train.cmake OPTIONAL)
# Run: OPENBLAS_NUM_THREADS=1 ./build/bench/bench_train [--quick]
add_executable(bench_train ${CMAKE_CURRENT_LIST_DIR}/bench_train.c)
target_link_libraries(bench_train PRIVATE emu::emu m)
