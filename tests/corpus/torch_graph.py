"""Graph networks: message passing over an edge list (ScatterElements / ScatterND) and GatherND."""

from __future__ import annotations

import numpy as np

from .build import export
from .registry import register

NODES, EDGES, FEAT = 12, 30, 8


def _graph(rng):
    src = rng.integers(0, NODES, EDGES)
    dst = (src + rng.integers(1, NODES, EDGES)) % NODES  # no self-loops
    return {"x": rng.standard_normal((NODES, FEAT)).astype(np.float32),
            "edge_index": np.stack([src, dst]).astype(np.int64)}


@register("gcn_scatter", "graph", _graph)
def gcn_scatter(feeds):  # GCN-style: messages gathered by source, summed into targets (scatter_add), degree-normed
    import torch

    nn = torch.nn

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.lins = nn.ModuleList([nn.Linear(FEAT, 16), nn.Linear(16, 16)])
            self.out = nn.Linear(16, 3)

        def forward(self, x, edge_index):
            src, dst = edge_index[0], edge_index[1]
            deg = torch.zeros(x.shape[0]).scatter_add(0, dst, torch.ones(dst.shape[0])) + 1.0
            for lin in self.lins:
                h = lin(x)
                msg = h.index_select(0, src)
                agg = torch.zeros_like(h).scatter_add(0, dst.unsqueeze(1).expand(-1, h.shape[1]), msg)
                x = torch.relu((agg + h) / deg.unsqueeze(1))
            return self.out(x)

    return export(GCN(), feeds, ["node_logits"])


@register("gat_gathernd", "graph", _graph)
def gat_gathernd(feeds):  # attention over edges: pair features by GatherND, per-edge softmax by scatter max/sum
    import torch

    nn = torch.nn

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(FEAT, 16)
            self.att = nn.Linear(32, 1)
            self.edge_mlp = nn.Linear(16, 2)

        def forward(self, x, edge_index):
            h = self.lin(x)
            pairs = edge_index.t()  # (E, 2)
            hs, hd = h[pairs[:, 0]], h[pairs[:, 1]]  # advanced indexing
            e = torch.nn.functional.leaky_relu(self.att(torch.cat([hs, hd], 1)).squeeze(1), 0.2)
            emax = torch.full((x.shape[0],), -1e9).scatter_reduce(0, pairs[:, 1], e, reduce="amax")
            w = torch.exp(e - emax[pairs[:, 1]])
            den = torch.zeros(x.shape[0]).scatter_add(0, pairs[:, 1], w)
            alpha = w / den[pairs[:, 1]]
            out = torch.zeros_like(h).index_add(0, pairs[:, 1], alpha.unsqueeze(1) * hs)
            grid = torch.stack([pairs[:, 0], pairs[:, 1] % 16], 1)
            edge_score = h.unsqueeze(0)[0][grid[:, 0], grid[:, 1]]  # GatherND over (node, feature) pairs
            return out, self.edge_mlp(hd) + edge_score.unsqueeze(1)

    return export(GAT(), feeds, ["node_out", "edge_out"])
