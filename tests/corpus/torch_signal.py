"""Signal and sequence models as small torch modules: 1-D conv nets, STFT front-ends, RNNs, bytes."""

from __future__ import annotations

import numpy as np

from .build import export
from .registry import audio, register


def _nn():
    import torch.nn as nn

    return nn


@register("conv1d_ecg", "conv1d", audio((2, 1, 500), name="signal", scale=1.0))
def conv1d_ecg(feeds):  # a 1-D ResNet-ish signal classifier: strided, dilated, residual, max pool
    import torch

    nn = _nn()

    class ECG(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv1d(1, 16, 7, stride=2, padding=3), nn.BatchNorm1d(16), nn.ReLU(),
                                      nn.MaxPool1d(3, 2, 1))
            self.block = nn.Sequential(nn.Conv1d(16, 16, 5, padding=4, dilation=2), nn.BatchNorm1d(16), nn.ReLU(),
                                       nn.Conv1d(16, 16, 3, padding=1))
            self.head = nn.Linear(16, 5)

        def forward(self, x):
            x = self.stem(x)
            x = torch.relu(x + self.block(x))
            return torch.log_softmax(self.head(x.mean(-1)), -1)

    return export(ECG(), feeds, ["log_probs"])


@register("tcn_audio", "conv1d", audio((1, 1, 1024), name="waveform"))
def tcn_audio(feeds):  # causal temporal conv net with gated (tanh * sigmoid) depthwise-separable blocks
    import torch
    import torch.nn.functional as F

    nn = _nn()

    class TCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Conv1d(1, 24, 16, stride=8)
            self.dw = nn.ModuleList([nn.Conv1d(24, 48, 3, dilation=d, groups=24) for d in (1, 2, 4)])
            self.pw = nn.ModuleList([nn.Conv1d(24, 24, 1) for _ in range(3)])
            self.norm = nn.GroupNorm(4, 24)
            self.out = nn.Conv1d(24, 8, 1)

        def forward(self, x):
            x = self.norm(self.inp(x))
            for dw, pw, d in zip(self.dw, self.pw, (1, 2, 4)):
                h = dw(F.pad(x, (2 * d, 0)))  # causal: pad on the left only
                a, b = h.chunk(2, 1)
                x = x + pw(torch.tanh(a) * torch.sigmoid(b))
            return self.out(x)

    return export(TCN(), feeds, ["frames"])


@register("stft_frontend", "speech front-end", audio((1, 2048), name="waveform"))
def stft_frontend(feeds):  # torch.stft (ONNX STFT), power spectrum, mel matrix, log, a conv classifier
    import torch

    nn = _nn()

    class Frontend(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("window", torch.hann_window(256))
            self.register_buffer("mel", torch.rand(129, 20))
            self.conv = nn.Sequential(nn.Conv1d(20, 16, 3, padding=1), nn.ReLU(), nn.Conv1d(16, 4, 1))

        def forward(self, x):
            spec = torch.stft(x, 256, hop_length=128, window=self.window, center=False, return_complex=False)
            power = spec.pow(2).sum(-1)  # (1, 129, frames)
            logmel = torch.log(torch.matmul(power.transpose(1, 2), self.mel) + 1e-6).transpose(1, 2)
            return self.conv(logmel)

    return export(Frontend(), feeds, ["logits"])


@register("conv_frontend", "speech front-end", audio((1, 1, 1600), name="waveform"))
def conv_frontend(feeds):  # a learned filterbank (wav2vec-style conv stack), log-compressed, layer-normed
    import torch

    nn = _nn()

    class Frontend(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.Sequential(nn.Conv1d(1, 16, 10, stride=5), nn.GELU(), nn.Conv1d(16, 16, 3, stride=2),
                                       nn.GELU(), nn.Conv1d(16, 16, 3, stride=2), nn.GELU())
            self.norm = nn.LayerNorm(16)

        def forward(self, x):
            return self.norm(torch.log1p(self.convs(x).abs()).transpose(1, 2))

    return export(Frontend(), feeds, ["features"])


def _sequence(rng):
    return {"x": rng.standard_normal((2, 12, 8)).astype(np.float32)}


@register("lstm_bidir", "rnn", _sequence)
def lstm_bidir(feeds):  # two-layer bidirectional LSTM tagger
    nn = _nn()

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=True)
            self.out = nn.Linear(32, 5)

        def forward(self, x):
            y, (h, c) = self.rnn(x)
            return self.out(y), h

    return export(Tagger(), feeds, ["tags", "h_n"])


@register("gru_state", "rnn", lambda rng: {**_sequence(rng),
                                            "h0": rng.standard_normal((1, 2, 16)).astype(np.float32) * 0.5})
def gru_state(feeds):  # a GRU stepping from a given state (streaming), returning the next state
    nn = _nn()

    class Stream(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(8, 16, batch_first=True)
            self.out = nn.Linear(16, 3)

        def forward(self, x, h0):
            y, h = self.rnn(x, h0)
            return self.out(y[:, -1]), h

    return export(Stream(), feeds, ["logits", "h_n"])


@register("rnn_tanh", "rnn", _sequence)
def rnn_tanh(feeds):  # Elman RNN, relu nonlinearity in layer one's stack via two RNNs
    nn = _nn()

    class Elman(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.RNN(8, 16, batch_first=True, nonlinearity="tanh")
            self.b = nn.RNN(16, 8, batch_first=True, nonlinearity="relu")

        def forward(self, x):
            return self.b(self.a(x)[0])[0]

    return export(Elman(), feeds, ["y"])


@register("byte_cnn", "tokens", lambda rng: {"bytes": rng.integers(0, 256, (2, 64), dtype=np.int64)})
def byte_cnn(feeds):  # byte-level text classifier: embedding of raw bytes, multi-width convs, max over time
    import torch

    nn = _nn()

    class ByteCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(256, 16)
            self.convs = nn.ModuleList([nn.Conv1d(16, 12, k) for k in (3, 5, 7)])
            self.out = nn.Linear(36, 4)

        def forward(self, b):
            e = self.emb(b).transpose(1, 2)
            return self.out(torch.cat([torch.relu(c(e)).amax(-1) for c in self.convs], 1))

    return export(ByteCNN(), feeds, ["logits"])
