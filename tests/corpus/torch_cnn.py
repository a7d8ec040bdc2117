"""CNN classifiers, a detector and a segmenter written as small torch modules (no torchvision)."""

from __future__ import annotations

from .build import export
from .registry import image, register


def _nn():
    import torch.nn as nn

    return nn


def conv_bn_act(cin, cout, k=3, stride=1, groups=1, dilation=1, act="relu"):
    nn = _nn()
    acts = {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "hardswish": nn.Hardswish, "none": nn.Identity}
    pad = dilation * (k - 1) // 2
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, dilation=dilation, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), acts[act]())


def squeeze_excite(c, r=4):
    import torch

    nn = _nn()

    class SE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, c // r, 1), nn.ReLU(),
                                    nn.Conv2d(c // r, c, 1), nn.Hardsigmoid())

        def forward(self, x):
            return x * self.fc(x) + torch.zeros(())

    return SE()


def _classifier(body, cout, classes=10):
    nn = _nn()
    return nn.Sequential(body, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cout, classes))


def _residual(block):
    nn = _nn()

    class Res(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x):
            return x + self.block(x)

    return Res()


@register("depthwise_cnn", "cnn", image((1, 3, 32, 32)))
def depthwise_cnn(feeds):  # MobileNetV1/V2-style: depthwise + pointwise, inverted residual, ReLU6
    nn = _nn()
    body = nn.Sequential(conv_bn_act(3, 16, stride=2, act="relu6"),
                         conv_bn_act(16, 16, groups=16, act="relu6"), conv_bn_act(16, 24, k=1, act="none"),
                         _residual(nn.Sequential(conv_bn_act(24, 72, k=1, act="relu6"),
                                                 conv_bn_act(72, 72, groups=72, act="relu6"),
                                                 conv_bn_act(72, 24, k=1, act="none"))),
                         conv_bn_act(24, 32, stride=2, groups=8, act="relu6"))
    return export(_classifier(body, 32), feeds, ["logits"])


@register("grouped_cnn", "cnn", image((1, 3, 32, 32)))
def grouped_cnn(feeds):  # ResNeXt-style grouped bottleneck with a residual
    nn = _nn()
    body = nn.Sequential(conv_bn_act(3, 32, stride=2),
                         _residual(nn.Sequential(conv_bn_act(32, 32, k=1), conv_bn_act(32, 32, groups=4),
                                                 conv_bn_act(32, 32, k=1, act="none"))),
                         nn.MaxPool2d(3, 2, 1), conv_bn_act(32, 48, groups=2))
    return export(_classifier(body, 48), feeds, ["logits"])


@register("se_cnn", "cnn", image((1, 3, 32, 32)))
def se_cnn(feeds):  # MobileNetV3-style: hardswish, squeeze-excitation with hardsigmoid
    nn = _nn()
    body = nn.Sequential(conv_bn_act(3, 16, stride=2, act="hardswish"),
                         conv_bn_act(16, 16, groups=16, act="hardswish"), squeeze_excite(16),
                         conv_bn_act(16, 24, k=1, act="hardswish"), squeeze_excite(24),
                         conv_bn_act(24, 24, stride=2, groups=24, k=5, act="hardswish"))
    return export(_classifier(body, 24), feeds, ["logits"])


@register("dilated_cnn", "cnn", image((1, 3, 32, 32)))
def dilated_cnn(feeds):  # DeepLab-style atrous pyramid: parallel dilations, concatenated
    import torch

    nn = _nn()

    class ASPP(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn_act(3, 16, stride=2)
            self.branches = nn.ModuleList([conv_bn_act(16, 8, dilation=d) for d in (1, 2, 4)])
            self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 8, 1))
            self.proj = conv_bn_act(32, 16, k=1)

        def forward(self, x):
            x = self.stem(x)
            pooled = self.pool(x).expand(-1, -1, x.shape[2], x.shape[3])
            return self.proj(torch.cat([b(x) for b in self.branches] + [pooled], 1))

    return export(_classifier(ASPP(), 16), feeds, ["logits"])


@register("nhwc_cnn", "cnn", image((1, 32, 32, 3), nhwc=True))
def nhwc_cnn(feeds):  # a TF/Keras-converted style graph: NHWC input, transposed in, SiLU, global pool
    nn = _nn()

    class NHWC(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(conv_bn_act(3, 16, stride=2, act="silu"), conv_bn_act(16, 16, groups=16,
                                      act="silu"), conv_bn_act(16, 32, k=1, act="silu"))
            self.head = nn.Linear(32, 10)

        def forward(self, x):
            y = self.body(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)  # back to NHWC, pooled over H and W
            return self.head(y.mean(dim=(1, 2)))

    return export(NHWC(), feeds, ["logits"])


@register("ssd_detector", "detection", image((1, 3, 64, 64)))
def ssd_detector(feeds):  # two-scale anchor head, boxes decoded, top-k scores (no NMS: data-dependent)
    import torch

    nn = _nn()

    class SSD(nn.Module):
        def __init__(self):
            super().__init__()
            self.s1 = nn.Sequential(conv_bn_act(3, 16, stride=2), conv_bn_act(16, 24, stride=2))
            self.s2 = conv_bn_act(24, 32, stride=2)
            self.heads = nn.ModuleList([nn.Conv2d(c, 3 * (4 + 5), 3, padding=1) for c in (24, 32)])

        def forward(self, x):
            f1 = self.s1(x)
            f2 = self.s2(f1)
            preds = [h(f).permute(0, 2, 3, 1).reshape(1, -1, 9) for h, f in zip(self.heads, (f1, f2))]
            p = torch.cat(preds, 1)
            anchors = torch.linspace(0.05, 0.95, p.shape[1]).unsqueeze(-1).expand(-1, 2)
            centers = anchors + 0.1 * torch.tanh(p[..., 0:2])
            sizes = 0.2 * torch.exp(p[..., 2:4].clamp(max=4.0))
            boxes = torch.cat([centers - sizes / 2, centers + sizes / 2], -1)
            scores, labels = torch.softmax(p[..., 4:], -1)[..., 1:].max(-1)
            top, idx = scores.topk(20, dim=1)
            return boxes.gather(1, idx.unsqueeze(-1).expand(-1, -1, 4)), top, labels.gather(1, idx)

    return export(SSD(), feeds, ["boxes", "scores", "labels"])


@register("unet_segmenter", "segmentation", image((1, 3, 32, 32)))
def unet_segmenter(feeds):  # encoder-decoder with skip connections, nearest and bilinear upsampling
    import torch
    import torch.nn.functional as F

    nn = _nn()

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1, self.e2, self.e3 = conv_bn_act(3, 8), conv_bn_act(8, 16, stride=2), conv_bn_act(16, 32, stride=2)
            self.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
            self.d2, self.d1 = conv_bn_act(32, 16), conv_bn_act(24, 8)
            self.out = nn.Conv2d(8, 4, 1)

        def forward(self, x):
            x1 = self.e1(x)
            x2 = self.e2(x1)
            x3 = self.e3(x2)
            y = self.d2(torch.cat([self.up2(x3), x2], 1))
            y = self.d1(torch.cat([F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False), x1], 1))
            return self.out(y).argmax(1), torch.softmax(self.out(y), 1)

    return export(UNet(), feeds, ["mask", "probs"])
