"""Independent PyTorch reference for blocklab's transformer block stack on the copy task.

Run with Debian's /usr/bin/python3 (it has PyTorch 1.13); the pyenv python3 first on PATH
has no torch.  Written from the architecture description only (not from the C++ code).

Parameter names (these exact strings are used in the fixtures):
  tok_emb.weight (V,C)   pos_emb.weight (T,C)
  blocks.{i}.norm1.weight (C)   blocks.{i}.norm1.bias (C, layernorm only)
  blocks.{i}.attn.qkv.weight (3C,C)   blocks.{i}.attn.qkv.bias (3C)
  blocks.{i}.attn.proj.weight (C,C)   blocks.{i}.attn.proj.bias (C)
  blocks.{i}.norm2.weight (C)   blocks.{i}.norm2.bias (C, layernorm only)
  blocks.{i}.mlp.fc1.weight (4C,C)    blocks.{i}.mlp.fc1.bias (4C)
  blocks.{i}.mlp.fc2.weight (C,4C)    blocks.{i}.mlp.fc2.bias (C)
  final_norm.weight (C), final_norm.bias (C, layernorm only)   -- pre placement only
  head.weight (V,C)   (no bias, untied from tok_emb)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NORM_EPS = 1e-5
MLP_RATIO = 4


class RMSNorm(nn.Module):
    """y = x * rsqrt(mean(x^2, last dim) + eps) * weight (no bias)."""

    def __init__(self, dim, eps=NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def make_norm(kind, dim, eps=NORM_EPS):
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"unknown norm {kind!r}")


class Attention(nn.Module):
    def __init__(self, width, heads, seq_len):
        super().__init__()
        assert width % heads == 0, "width must be divisible by heads"
        self.width, self.heads, self.hs = width, heads, width // heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        # True above the diagonal = masked (position t attends to 0..t).
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H, hs = self.heads, self.hs
        qkv = self.qkv(x)                                   # (B,T,3C)
        # columns [0:C]=q, [C:2C]=k, [2C:3C]=v; head h = columns h*hs:(h+1)*hs of each
        qkv = qkv.view(B, T, 3, H, hs).permute(2, 0, 3, 1, 4)  # (3,B,H,T,hs)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hs)  # (B,H,T,T)
        att = att.masked_fill(self.mask[:T, :T], float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v)                            # (B,H,T,hs)
        y = y.transpose(1, 2).reshape(B, T, C)              # heads concatenated in order
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, width, ratio=MLP_RATIO):
        super().__init__()
        self.fc1 = nn.Linear(width, ratio * width)
        self.fc2 = nn.Linear(ratio * width, width)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))  # exact erf GELU


class Block(nn.Module):
    def __init__(self, width, heads, seq_len, placement, norm, eps=NORM_EPS):
        super().__init__()
        self.placement = placement
        self.norm1 = make_norm(norm, width, eps)
        self.attn = Attention(width, heads, seq_len)
        self.norm2 = make_norm(norm, width, eps)
        self.mlp = MLP(width)

    def forward(self, h):
        if self.placement == "post":
            h = self.norm1(h + self.attn(h))
            h = self.norm2(h + self.mlp(h))
        else:
            h = h + self.attn(self.norm1(h))
            h = h + self.mlp(self.norm2(h))
        return h


class CopyModel(nn.Module):
    def __init__(self, layers, width, heads, vocab, copy_len,
                 placement="pre", norm="layernorm", eps=NORM_EPS):
        super().__init__()
        if placement not in ("post", "pre"):
            raise ValueError(f"unknown norm placement {placement!r}")
        self.copy_len = copy_len
        self.seq_len = 2 * copy_len - 1
        self.placement, self.norm = placement, norm
        self.tok_emb = nn.Embedding(vocab, width)
        self.pos_emb = nn.Embedding(self.seq_len, width)
        self.blocks = nn.ModuleList(
            [Block(width, heads, self.seq_len, placement, norm, eps) for _ in range(layers)])
        if placement == "pre":
            self.final_norm = make_norm(norm, width, eps)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, inputs):
        B, T = inputs.shape
        h = self.tok_emb(inputs) + self.pos_emb.weight[:T]
        for blk in self.blocks:
            h = blk(h)
        if self.placement == "pre":
            h = self.final_norm(h)
        return self.head(h)                                 # (B,T,V)


# ----------------------------------------------------------------------------- copy task

def copy_batch(batch, copy_len, vocab, generator=None):
    """tokens (B, 2n): first half uniform in [0,V), second half a copy of the first."""
    first = torch.randint(0, vocab, (batch, copy_len), generator=generator, dtype=torch.int64)
    return torch.cat([first, first], dim=1)


def copy_loss(model, tokens, return_logits=False):
    """Mean CE over the n predictions of the copied half (positions n-1 .. 2n-2)."""
    n = tokens.shape[1] // 2
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits = model(inputs)
    V = logits.shape[-1]
    loss = F.cross_entropy(logits[:, n - 1:].reshape(-1, V), targets[:, n - 1:].reshape(-1))
    return (loss, logits) if return_logits else loss


# ----------------------------------------------------------------------------- init

def _kind(name):
    """Classify a parameter name: 'emb', 'linear_w', 'linear_b', 'norm_w', 'norm_b'."""
    if name in ("tok_emb.weight", "pos_emb.weight"):
        return "emb"
    if ".norm" in name or name.startswith("norm") or name.startswith("final_norm"):
        return "norm_w" if name.endswith(".weight") else "norm_b"
    return "linear_w" if name.endswith(".weight") else "linear_b"


@torch.no_grad()
def init_params(model, scheme="xavier", embed_std=1.0):
    """Initialise in named_parameters() order (deterministic given the torch seed).

    xavier : Linear W xavier_uniform, biases 0, norm weight 1, norm bias 0, emb N(0, embed_std)
    gpt2   : Linear W N(0, 0.02),     biases 0, norm weight 1, norm bias 0, emb N(0, embed_std)
    fixture: Linear W xavier_uniform, all biases N(0,0.1), norm weight 1+N(0,0.1),
             norm bias N(0,0.1), emb N(0,1)   (every term non-trivial; used for test fixtures)
    """
    for name, p in model.named_parameters():
        k = _kind(name)
        if k == "emb":
            p.normal_(0.0, 1.0 if scheme == "fixture" else embed_std)
        elif k == "linear_w":
            if scheme == "gpt2":
                p.normal_(0.0, 0.02)
            elif scheme in ("xavier", "fixture"):
                nn.init.xavier_uniform_(p)
            else:
                raise ValueError(f"unknown init {scheme!r}")
        elif k == "norm_w":
            p.fill_(1.0)
            if scheme == "fixture":
                p.add_(torch.randn_like(p) * 0.1)
        else:  # linear_b / norm_b
            if scheme == "fixture":
                p.normal_(0.0, 0.1)
            else:
                p.zero_()
    return model
