"""Text recognizers as small torch modules: a CRNN (conv stack, then a bidirectional LSTM over the
columns, then per-column class scores), the shape of the classic OCR models exported to ONNX."""

from __future__ import annotations

import numpy as np

from .build import export
from .registry import register


def _text_line(rng):  # a grayscale text-line crop, 32 x 160, normalized to about [-1, 1]
    return {"image": (rng.random((1, 1, 32, 160)) * 2 - 1).astype(np.float32)}


@register("crnn", "rnn", _text_line)
def crnn(feeds):  # CNN (to height 1, 40 columns) + 2-layer BiLSTM(128) + a 37-class head
    import torch
    import torch.nn as nn

    def block(cin, cout, pool):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool, pool)]

    class CRNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(*block(1, 32, (2, 2)), *block(32, 64, (2, 2)), *block(64, 128, (2, 1)),
                                     *block(128, 128, (2, 1)), *block(128, 128, (2, 1)))
            self.rnn = nn.LSTM(128, 128, num_layers=2, bidirectional=True)
            self.head = nn.Linear(256, 37)

        def forward(self, x):
            f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # [columns, batch, channels]
            y, _ = self.rnn(f)
            return torch.log_softmax(self.head(y), -1)

    return export(CRNN(), feeds, ["log_probs"])
