# bench_lstm: one LSTM layer's training step against PyTorch's
# (bench/lstm_torch.py).  Included from bench/CMakeLists.txt.
# Run: OPENBLAS_NUM_THREADS=1 ./build/bench/bench_lstm [B T I H [reps [accum [measure]]]]
add_executable(bench_lstm ${CMAKE_CURRENT_LIST_DIR}/bench_lstm.c)
target_link_libraries(bench_lstm PRIVATE emu::emu m)
