#!/usr/bin/python3
"""PyTorch's side of test_ops_lstm's cross-check (tests/test_ops_lstm.c).

Builds a seeded torch.nn.LSTM (one layer, batch_first=True, fp32), runs it
from zero state on a seeded batch, takes L = sum(y * r), and writes to the
file named by argv[1], as little-endian int32 then float32 arrays:
  B, T, I, H;  x (B, T, I), weight_ih_l0 (4H, I), weight_hh_l0 (4H, H),
  bias_ih_l0, bias_hh_l0 (4H), r (B, T, H);
  y (B, T, H), h_n (B, H), c_n (B, H), dL/dx, and the gradients of the
  four parameters in that order.
Exits 77 (skip) when torch cannot be imported.
"""
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

B, T, I, H = 4, 12, 8, 32


def main(path):
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    lstm = torch.nn.LSTM(I, H, num_layers=1, batch_first=True)
    x = torch.randn(B, T, I, requires_grad=True)
    r = torch.randn(B, T, H)
    y, (h_n, c_n) = lstm(x)
    (y * r).sum().backward()
    p = dict(lstm.named_parameters())
    names = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    arrays = [x.detach()] + [p[n].detach() for n in names] + [r]
    arrays += [y.detach(), h_n.detach()[0], c_n.detach()[0], x.grad]
    arrays += [p[n].grad for n in names]
    with open(path, "wb") as f:
        f.write(np.array([B, T, I, H], dtype="<i4").tobytes())
        for a in arrays:
            f.write(a.numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main(sys.argv[1])
