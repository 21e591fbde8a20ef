"""Float64 reference of nGPT (the normalized transformer, Loshchilov et al. 2025) on the copy task, written from
docs/placements.md's nGPT section (blocklab's `norm_placement = ngpt`), with blocklab's parameter names:

  U(v) = v / ||v||_2 over the last dimension (no epsilon)
  x = tok_emb[tokens] (+ pos_emb[t] with learned positions)
  per block:  h_A = U(Attn(x));  x <- U(U(x) + |alpha_A| (h_A - U(x)))
              h_M = U(MLP(x));   x <- U(U(x) + |alpha_M| (h_M - U(x)))
  Attn: q, k, v = x W^T + b (fused [q | k | v] or separate); RoPE (rotate_half) on q, k; then each head's q and
        k is U(.) * s_qk (that head's slice), scores q.k * sqrt(D), causal softmax, heads concatenated, W_o.
  MLP:  pre = s_uv * (x W_fc^T + b_fc); gelu(pre) or, gated, u * silu(v) / u * gelu(v) with [u | v] = pre; W_proj.
  logits = s_z * (x head^T); no norm layers, no final norm, untied head.
  Learned scales stored as p, used as p * factor: alpha factor 0.05 sqrt(C), s_qk sqrt(C), s_uv sqrt(C),
  s_z sqrt(C).
  After every optimizer step (and at init) `renormalise`: rows of tok_emb, head, q/k/v (or qkv) and fc1 over their
  C inputs, columns of attn.proj and fc2 over their C outputs, to unit L2 norm.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def unit(v):
    return v / v.norm(dim=-1, keepdim=True)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope_cos_sin(T, D, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


class Linear(nn.Module):
    def __init__(self, out_features, in_features, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H = cfg["width"], cfg["heads"]
        self.H, self.D, self.C = H, C // H, C
        self.fused, self.rope, self.theta = cfg["qkv"] == "fused", cfg["positions"] == "rope", cfg["rope_theta"]
        if self.fused:
            self.qkv = Linear(3 * C, C, cfg["biases"])
        else:
            self.q = Linear(C, C, cfg["biases"])
            self.k = Linear(C, C, cfg["biases"])
            self.v = Linear(C, C, cfg["biases"])
        self.s_qk = nn.Parameter(torch.zeros(C))
        self.proj = Linear(C, C, cfg["biases"])

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.H, self.D
        if self.fused:
            q, k, v = self.qkv(x).split(C, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))   # (B,H,T,D)
        if self.rope:
            cos, sin = rope_cos_sin(T, D, self.theta)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        s = (self.s_qk * math.sqrt(self.C)).view(1, H, 1, D)
        q, k = s * unit(q), s * unit(k)
        scores = q @ k.transpose(-1, -2) * math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, I = cfg["width"], cfg["mlp_ratio"] * cfg["width"]
        self.kind, self.C = cfg["mlp"], C
        gated = self.kind in ("swiglu", "geglu")
        self.fc1 = Linear(2 * I if gated else I, C, cfg["biases"])
        self.s_uv = nn.Parameter(torch.zeros(2 * I if gated else I))
        self.fc2 = Linear(C, I, cfg["biases"])

    def forward(self, x):
        pre = self.fc1(x) * (self.s_uv * math.sqrt(self.C))
        if self.kind == "gelu":
            act = F.gelu(pre)
        elif self.kind == "gelu_tanh":
            act = F.gelu(pre, approximate="tanh")
        else:
            u, v = pre.chunk(2, dim=-1)
            act = u * (F.silu(v) if self.kind == "swiglu" else F.gelu(v))
        return self.fc2(act)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["width"]
        self.factor = 0.05 * math.sqrt(C)
        self.attn_alpha = nn.Parameter(torch.zeros(C))
        self.attn = Attention(cfg)
        self.mlp_alpha = nn.Parameter(torch.zeros(C))
        self.mlp = MLP(cfg)

    def update(self, x, f, alpha):
        a = unit(x)
        return unit(a + (alpha * self.factor).abs() * (unit(f) - a))

    def forward(self, x):
        x = self.update(x, self.attn(x), self.attn_alpha)
        return self.update(x, self.mlp(x), self.mlp_alpha)


class Head(nn.Module):
    def __init__(self, V, C):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(V, C))
        self.s_z = nn.Parameter(torch.zeros(V))
        self.C = C

    def forward(self, x):
        return F.linear(x, self.weight) * (self.s_z * math.sqrt(self.C))


class NGPT(nn.Module):
    """cfg: layers, width, heads, vocab, copy_len, mlp_ratio, qkv (fused / separate), biases (bool),
    positions (learned / rope), rope_theta, mlp (gelu, gelu_tanh, swiglu, geglu)."""

    def __init__(self, cfg):
        super().__init__()
        C, V, T = cfg["width"], cfg["vocab"], 2 * cfg["copy_len"] - 1
        self.tok_emb = nn.Embedding(V, C)
        self.pos_emb = nn.Embedding(T, C) if cfg["positions"] == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["layers"]))
        self.head = Head(V, C)

    def forward(self, inputs):
        x = self.tok_emb(inputs)
        if self.pos_emb is not None:
            x = x + self.pos_emb.weight[: inputs.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def renormalised(name):
    """'rows', 'columns' or None: how the parameter `name` is renormalised."""
    if name in ("tok_emb.weight", "head.weight"):
        return "rows"
    if name.endswith(("attn.qkv.weight", "attn.q.weight", "attn.k.weight", "attn.v.weight", "mlp.fc1.weight")):
        return "rows"
    if name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
        return "columns"
    return None


@torch.no_grad()
def renormalise(model):
    for name, p in model.named_parameters():
        how = renormalised(name)
        if how == "rows":
            p.copy_(p / p.norm(dim=1, keepdim=True))
        elif how == "columns":
            p.copy_(p / p.norm(dim=0, keepdim=True))


@torch.no_grad()
def init_fixture(model, cfg):
    """nGPT's init (N(0, 1/C); output projections / sqrt(2N)), then renormalised; the fixture draws the scales
    around their stored starts (times U(0.5, 1.5)) and the biases N(0, 0.1^2), so that every term is exercised."""
    C, N = cfg["width"], cfg["layers"]
    std = 1.0 / math.sqrt(C)
    for name, p in model.named_parameters():
        if name.endswith(("attn_alpha", "mlp_alpha", "s_qk", "s_z")):
            p.copy_(std * (0.5 + torch.rand(p.shape)))
        elif name.endswith("s_uv"):
            p.copy_(0.5 + torch.rand(p.shape))
        elif name.endswith(".bias"):
            p.normal_(0.0, 0.1)
        elif name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
            p.normal_(0.0, std / math.sqrt(2 * N))
        else:
            p.normal_(0.0, std)
    renormalise(model)
    return model
