#!/usr/bin/python3
"""PyTorch's side of bench_lstm: nn.LSTM forward + backward (fp32, one
thread, batch_first) on the same sizes.
  /usr/bin/python3 bench/lstm_torch.py [B T I H [reps]]"""
import sys
import time

import torch

B, T, I, H = (int(a) for a in sys.argv[1:5]) if len(sys.argv) >= 5 else (32, 64, 256, 256)
reps = int(sys.argv[5]) if len(sys.argv) >= 6 else 5
torch.set_num_threads(1)
torch.manual_seed(0)
lstm = torch.nn.LSTM(I, H, batch_first=True)
x = torch.randn(B, T, I, requires_grad=True)
dy = torch.randn(B, T, H) * 1e-3
best_f = best_b = 1e30
for _ in range(reps):
    lstm.zero_grad()
    x.grad = None
    t0 = time.process_time()
    y, _ = lstm(x)
    t1 = time.process_time()
    y.backward(dy)
    t2 = time.process_time()
    best_f, best_b = min(best_f, t1 - t0), min(best_b, t2 - t1)
print(f"torch {torch.__version__} B={B} T={T} I={I} H={H}: forward {1e3 * best_f:.2f} ms, "
      f"backward {1e3 * best_b:.2f} ms, step {1e3 * (best_f + best_b):.2f} ms (CPU time, best of {reps})")
