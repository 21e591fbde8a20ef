"""Float64 PyTorch reference of hyper-connections (`hc`) and manifold-constrained hyper-connections (`mhc`)
around the seed block (docs/placements.md, "Hyper-connections").

Run with a PyTorch that has the `hyper-connections` package (PyPI; needs einops), e.g. a virtual environment
with `pip install torch hyper-connections`. The mixing of the streams is the package's own modules
(hyper_connections.HyperConnections for hc, ManifoldConstrainedHyperConnections for mhc), called with the
parameters under blocklab's names:

  package (per sub-layer)                  blocklab (blocks.{i}.attn_hc.* / blocks.{i}.mlp_hc.*)
  static_alpha (n, 1+n)  [:, 0] | [:, 1:]  alpha_in (n) | alpha_res (n, n)
  static_beta (n)                          beta (n)
  dynamic_alpha_fn (C, 1+n) (mhc: (1, C, 1+n))  w_in (C) | w_res (C, n)
  dynamic_beta_fn (C)                      w_beta (C)
  dynamic_alpha_scale () (hc)              scale_alpha (1)
  pre_branch_scale (1), residual_scale (1) (mhc)   scale_alpha (2)
  dynamic_beta_scale () (hc), h_post_scale () (mhc)  scale_beta (1)
  norm (its RMSNorm)                       norm.* (the config's norm kind: the package's `norm` attribute is
                                           replaced by placement_models.Norm)

The package's mHC computes its mixing in float32 (Tensor.float() casts); here those casts are no-ops
(float64_kept), so the reference stays float64. The static form (hc_dynamic = false) is the package's module with the dynamic weights fixed at zero (no
parameters of blocklab's). The sub-layers are placement_models' Attention and MLP, each behind its Pre-LN
input norm (norm1, norm2); n copies of the embedding go in, the streams' sum goes to the final norm and head.

`own_forward` is a second formulation written from the equations of docs/placements.md (not from the
package), for the self-checks of make_hyper_fixtures.py.
"""
import contextlib

import torch
import torch.nn as nn
from torch.func import functional_call

from hyper_connections.hyper_connections import HyperConnections
from hyper_connections.manifold_constrained_hyper_connections import ManifoldConstrainedHyperConnections

import placement_models as pm

SINKHORN_ITERS = 20


@contextlib.contextmanager
def float64_kept():
    """The package's mHC casts its mixing (norm, weights, Sinkhorn) to float32 with Tensor.float(); for a float64
    reference those casts are made no-ops while its code runs."""
    saved = torch.Tensor.float
    torch.Tensor.float = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        torch.Tensor.float = saved


class HyperMix(nn.Module):
    """The mixing of one sub-layer (the k-th of the stack, 0-based), parameters under blocklab's names."""

    def __init__(self, kind, n, C, k, dynamic, norm, eps):
        super().__init__()
        self.kind, self.n, self.dynamic = kind, n, dynamic
        alpha_in = torch.zeros(n)
        alpha_in[k % n] = 1.0
        self.alpha_in = nn.Parameter(alpha_in)
        self.alpha_res = nn.Parameter(torch.eye(n))
        self.beta = nn.Parameter(torch.ones(n))
        if dynamic:
            self.norm = pm.Norm(norm, C, eps)
            self.w_in = nn.Parameter(torch.zeros(C))
            self.w_res = nn.Parameter(torch.zeros(C, n))
            self.w_beta = nn.Parameter(torch.zeros(C))
            self.scale_alpha = nn.Parameter(torch.full((2 if kind == "mhc" else 1,), 0.01))
            self.scale_beta = nn.Parameter(torch.full((1,), 0.01))
        if kind == "hc":
            pkg = HyperConnections(n, dim=C, layer_index=k, tanh=True)
        else:
            pkg = ManifoldConstrainedHyperConnections(n, dim=C, layer_index=k, sinkhorn_iters=SINKHORN_ITERS)
        if dynamic:
            pkg.norm = pm.Norm(norm, C, eps)
        object.__setattr__(self, "pkg", pkg)   # not a submodule: its parameters come from ours

    def package_params(self, like):
        n = self.n
        C = self.w_in.shape[0] if self.dynamic else self.pkg.dynamic_beta_fn.shape[0]
        zero = torch.zeros((), dtype=like.dtype)
        p = {"static_alpha": torch.cat([self.alpha_in[:, None], self.alpha_res], dim=1), "static_beta": self.beta}
        if self.dynamic:
            fn = torch.cat([self.w_in[:, None], self.w_res], dim=1)
            p["dynamic_beta_fn"] = self.w_beta
            for name, t in self.norm.named_parameters():
                p["norm." + name] = t
        else:
            fn = torch.zeros(C, 1 + n, dtype=like.dtype)
            p["dynamic_beta_fn"] = torch.zeros(C, dtype=like.dtype)
            for name, t in self.pkg.norm.named_parameters():
                p["norm." + name] = t.detach().to(like.dtype)
        if self.kind == "hc":
            p["dynamic_alpha_fn"] = fn
            p["dynamic_alpha_scale"] = self.scale_alpha[0] if self.dynamic else zero
            p["dynamic_beta_scale"] = self.scale_beta[0] if self.dynamic else zero
        else:
            p["dynamic_alpha_fn"] = fn[None]
            p["pre_branch_scale"] = self.scale_alpha[0:1] if self.dynamic else zero.reshape(1)
            p["residual_scale"] = self.scale_alpha[1:2] if self.dynamic else zero.reshape(1)
            p["h_post_scale"] = self.scale_beta[0] if self.dynamic else zero
        return p

    def forward(self, H, branch):
        """H ((b s), t, C) in the package's layout -> the streams after the sub-layer `branch`."""
        with float64_kept():
            branch_input, add_residual = functional_call(self.pkg, self.package_params(H), (H,))
            out = branch(branch_input)
            return add_residual(out)


class HyperBlock(nn.Module):
    def __init__(self, cfg, kind, norm, i):
        super().__init__()
        C, eps, n = cfg["width"], cfg.get("norm_eps", pm.NORM_EPS), cfg["residual_streams"]
        dynamic = cfg.get("hc_dynamic", True)
        self.attn_hc = HyperMix(kind, n, C, 2 * i, dynamic, norm, eps)
        self.norm1 = pm.Norm(norm, C, eps)
        self.attn = pm.Attention(C, cfg["heads"])
        self.mlp_hc = HyperMix(kind, n, C, 2 * i + 1, dynamic, norm, eps)
        self.norm2 = pm.Norm(norm, C, eps)
        self.mlp = pm.MLP(C, cfg.get("mlp_ratio", pm.MLP_RATIO))

    def forward(self, H):
        H = self.attn_hc(H, lambda u: self.attn(self.norm1(u)))
        return self.mlp_hc(H, lambda u: self.mlp(self.norm2(u)))


class HyperModel(nn.Module):
    """tok_emb + pos_emb -> n copies -> N blocks (mixing around each sub-layer) -> sum -> final_norm -> head."""

    def __init__(self, cfg, kind, norm):
        super().__init__()
        assert kind in ("hc", "mhc")
        C, N, V, T = cfg["width"], cfg["layers"], cfg["vocab"], 2 * cfg["copy_len"] - 1
        self.n = cfg["residual_streams"]
        self.tok_emb = nn.Embedding(V, C)
        self.pos_emb = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([HyperBlock(cfg, kind, norm, i) for i in range(N)])
        self.final_norm = pm.Norm(norm, C, cfg.get("norm_eps", pm.NORM_EPS))
        self.head = nn.Linear(C, V, bias=False)

    def forward(self, inputs):
        B, T = inputs.shape
        x = self.tok_emb(inputs) + self.pos_emb.weight[:T]
        H = x.repeat_interleave(self.n, dim=0)              # '(b s) t d', the package's expand
        for blk in self.blocks:
            H = blk(H)
        h = H.view(B, self.n, T, -1).sum(dim=1)             # the package's reduce
        return self.head(self.final_norm(h))


# ----------------------------------------------------------------------------- second formulation

def _sinkhorn(P, iters=SINKHORN_ITERS):
    M = torch.exp(P - P.amax(dim=-2, keepdim=True))
    for _ in range(iters):
        M = M / M.sum(dim=-2, keepdim=True)                # columns
        M = M / M.sum(dim=-1, keepdim=True)                # rows
    return M


def own_mix(P, prefix, kind, norm, eps, n, H, branch):
    """H (n, B, T, C). The equations of docs/placements.md, written directly."""
    a_in, a_res, beta = P[prefix + "alpha_in"], P[prefix + "alpha_res"], P[prefix + "beta"]
    if prefix + "w_in" in P:
        Hn = pm._alt_norm(P, prefix + "norm", norm, eps, H)               # per stream
        f = (lambda z: z) if kind == "mhc" else torch.tanh
        s_in = P[prefix + "scale_alpha"][0]
        s_res = P[prefix + "scale_alpha"][-1]
        s_b = P[prefix + "scale_beta"][0]
        A_in = a_in[:, None, None] + s_in * f(Hn @ P[prefix + "w_in"])                      # (n,B,T)
        A_res = a_res[:, None, None, :] + s_res * f(Hn @ P[prefix + "w_res"])               # (i,B,T,j)
        Bw = beta[:, None, None] + s_b * f(Hn @ P[prefix + "w_beta"])                       # (n,B,T)
    else:
        shape = H.shape[1:3]
        A_in = a_in[:, None, None].expand(n, *shape)
        A_res = a_res[:, None, None, :].expand(n, *shape, n)
        Bw = beta[:, None, None].expand(n, *shape)
    if kind == "mhc":
        A_in = torch.sigmoid(A_in)
        Bw = 2 * torch.sigmoid(Bw)
        A_res = _sinkhorn(A_res.permute(1, 2, 0, 3)).permute(2, 0, 1, 3)                    # per token (i, j)
    h = (A_in[..., None] * H).sum(0)
    out = branch(h)
    return torch.einsum("ibtj,ibtc->jbtc", A_res, H) + Bw[..., None] * out[None]


def own_forward(P, cfg, kind, norm, inputs):
    N, H_heads, eps, n = cfg["layers"], cfg["heads"], cfg.get("norm_eps", pm.NORM_EPS), cfg["residual_streams"]
    T = inputs.shape[1]
    x = torch.nn.functional.embedding(inputs, P["tok_emb.weight"]) + P["pos_emb.weight"][:T]
    H = x[None].expand(n, *x.shape)
    for i in range(N):
        b = f"blocks.{i}."
        H = own_mix(P, b + "attn_hc.", kind, norm, eps, n, H,
                    lambda u: pm._alt_attn(P, b, H_heads, pm._alt_norm(P, b + "norm1", norm, eps, u)))
        H = own_mix(P, b + "mlp_hc.", kind, norm, eps, n, H,
                    lambda u: pm._alt_mlp(P, b, pm._alt_norm(P, b + "norm2", norm, eps, u)))
    h = pm._alt_norm(P, "final_norm", norm, eps, H.sum(0))
    return torch.nn.functional.linear(h, P["head.weight"])


@torch.no_grad()
def init_fixture(model):
    """Random, non-trivial values (not the init rules), in named_parameters() order: the seed block's as
    placement_models.init_fixture draws them; alpha_in N(0, 0.5^2) + 0.5, alpha_res I + 0.3 N, beta 1 + 0.3 N,
    w_* 0.3 N, scale_* 0.3 + 0.1 N, the streams' norms as the other norms."""
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if "_hc." in name and leaf in ("alpha_in", "alpha_res", "beta", "w_in", "w_res", "w_beta", "scale_alpha",
                                       "scale_beta"):
            if leaf == "alpha_in":
                p.copy_(0.5 + 0.5 * torch.randn_like(p))
            elif leaf == "alpha_res":
                p.copy_(torch.eye(p.shape[0]) + 0.3 * torch.randn_like(p))
            elif leaf == "beta":
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif leaf.startswith("w_"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(0.3 + 0.1 * torch.randn_like(p))
            continue
        if "_hc.norm." in name:
            owner_norm = {"weight": 1.0, "bias": 0.0, "alpha": 0.5, "shift": 0.2}[leaf]
            p.copy_(owner_norm + 0.1 * torch.randn_like(p))
            continue
        # the seed block's parameters: as placement_models.init_fixture
        owner = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else ""
        if name in ("tok_emb.weight", "pos_emb.weight"):
            p.normal_(0.0, 1.0)
        elif owner in ("qkv", "proj", "fc1", "fc2", "head"):
            if leaf == "weight":
                nn.init.xavier_uniform_(p)
            else:
                p.normal_(0.0, 0.1)
        elif owner in ("norm1", "norm2", "final_norm"):
            p.copy_({"weight": 1.0, "bias": 0.0, "alpha": 0.5, "shift": 0.2}[leaf] + 0.1 * torch.randn_like(p))
        else:
            raise ValueError(f"unclassified parameter {name}")
    return model
