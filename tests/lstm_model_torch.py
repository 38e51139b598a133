#!/usr/bin/python3
"""PyTorch's side of test_nn_lstm's cross-check of the lstm:L-H model.

  lstm_model_torch.py WEIGHTS INPUT OUTPUT
WEIGHTS: the model's weights file (emu_model_save_weights: safetensors,
PyTorch's state-dict names); INPUT: "tokens" and "targets" (B, T) as
F32.  Builds PyTorch's word language model of the same shape (encoder
nn.Embedding, lstm nn.LSTM(batch_first=True), decoder nn.Linear), loads
the weights strictly (every name and shape must match), and writes to
OUTPUT the mean cross-entropy "loss" and the gradient of every parameter
under its name, in fp32.  Exits 77 (skip) without torch.
"""
import json
import struct
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        assert d["dtype"] == "F32", (name, d["dtype"])
        a, b = d["data_offsets"]
        out[name] = np.frombuffer(raw[base + a:base + b], dtype="<f4").reshape(d["shape"])
    return out


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = np.ascontiguousarray(t, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class LSTMLM(torch.nn.Module):
    def __init__(self, vocab, width, layers):
        super().__init__()
        self.encoder = torch.nn.Embedding(vocab, width)
        self.lstm = torch.nn.LSTM(width, width, layers, batch_first=True)
        self.decoder = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        y, _ = self.lstm(self.encoder(tokens))
        return self.decoder(y)


def main(wpath, ipath, opath):
    torch.set_num_threads(1)
    w = read_st(wpath)
    vocab, width = w["encoder.weight"].shape
    layers = sum(1 for k in w if k.startswith("lstm.weight_ih_l"))
    model = LSTMLM(vocab, width, layers)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in w.items()},
                          strict=True)
    inp = read_st(ipath)
    tokens = torch.from_numpy(inp["tokens"].astype(np.int64))
    targets = torch.from_numpy(inp["targets"].astype(np.int64))
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                             targets.reshape(-1))
    loss.backward()
    out = {"loss": loss.detach().numpy().reshape(1)}
    for name, p in model.named_parameters():
        out[name] = p.grad.numpy()
    write_st(opath, out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
