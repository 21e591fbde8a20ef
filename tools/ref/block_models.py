"""Independent float64 PyTorch reference for stacks of blocklab's block presets gpt2, qwen3 and sd.

Run with Debian's /usr/bin/python3 (it has PyTorch 1.13). Written from the published architectures,
not from the C++ sources and not by importing transformers / diffusers:

  gpt2  : GPT-2 (Radford et al. 2019; openai/gpt-2 src/model.py; transformers GPT2Model): learned
          positions, Pre-LN LayerNorm, fused qkv, causal MHA, tanh-GELU MLP, final LayerNorm, LM head
          tied to the token embedding.
  qwen3 : transformers models/qwen3/modeling_qwen3.py (Qwen3RMSNorm, Qwen3Attention with q_norm/k_norm
          before apply_rotary_pos_emb, rotate_half RoPE, repeat_kv GQA, Qwen3MLP SwiGLU), no position
          table, final RMSNorm, untied head.
  sd    : Stable Diffusion 1.x, diffusers models/attention.py BasicTransformerBlock (norm1 -> attn1 self,
          norm2 -> attn2 cross, norm3 -> FeedForward with GEGLU; Attention with to_q/to_k/to_v without
          bias, to_out[0] with bias, scale dim_head**-0.5). Self-attention is made causal for the copy
          task; the cross-attention context is the embedded first half of the sequence.

Parameter names follow blocklab (the strings stored in the fixtures), Linear weights are (out, in):

  all    tok_emb.weight (V,C)
  gpt2   pos_emb.weight (T,C)
         blocks.{l}.norm1.weight/.bias (C)    blocks.{l}.attn.qkv.weight (3C,C)/.bias (3C)
         blocks.{l}.attn.proj.weight (C,C)/.bias    blocks.{l}.norm2.weight/.bias
         blocks.{l}.mlp.fc1.weight (I,C)/.bias (I)  blocks.{l}.mlp.fc2.weight (C,I)/.bias (C)
         final_norm.weight/.bias                    (no head.weight: logits use tok_emb.weight)
  qwen3  blocks.{l}.norm1.weight (C)
         blocks.{l}.attn.q.weight (H*D,C)  .k.weight (Hkv*D,C)  .v.weight (Hkv*D,C)
         blocks.{l}.attn.q_norm.weight (D)  .k_norm.weight (D)  blocks.{l}.attn.proj.weight (C,H*D)
         blocks.{l}.norm2.weight (C)
         blocks.{l}.mlp.fc1.weight (2I,C) rows [up | gate]   blocks.{l}.mlp.fc2.weight (C,I)
         final_norm.weight (C)   head.weight (V,C)
  sd     pos_emb.weight (T,C)
         blocks.{l}.norm1.weight/.bias   blocks.{l}.attn.{q,k,v}.weight (C,C)  .attn.proj.weight/.bias
         blocks.{l}.cross_norm.weight/.bias   blocks.{l}.cross.{q,k,v}.weight (C,C)  .cross.proj.weight/.bias
         blocks.{l}.norm2.weight/.bias   blocks.{l}.mlp.fc1.weight (2I,C)/.bias rows [value | gate]
         blocks.{l}.mlp.fc2.weight (C,I)/.bias   final_norm.weight/.bias   head.weight (V,C)

Also here: a second, separately written formulation of each stack (`alt_forward`) used as a
cross-check by make_block_fixtures.py.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = ("gpt2", "qwen3", "sd")


# ----------------------------------------------------------------------------- primitives

def layer_norm(x, w, b, eps):
    """torch.nn.LayerNorm semantics (biased variance), used by GPT-2 (ln_1/ln_2/ln_f) and diffusers."""
    mu = x.mean(dim=-1, keepdim=True)
    var = (x - mu).pow(2).mean(dim=-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    """transformers Qwen3RMSNorm: x * rsqrt(mean(x^2) + eps), times weight (here float64 throughout)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    """GPT-2's gelu (openai/gpt-2 model.py; transformers 'gelu_new'): tanh approximation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gelu_erf(x):
    """Exact GELU (torch F.gelu default), used by diffusers' GEGLU."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def silu(x):
    """SiLU / swish (Qwen3 hidden_act 'silu')."""
    return x * torch.sigmoid(x)


def sdpa(q, k, v, causal):
    """softmax(q k^T / sqrt(D)) v. q (B,H,Tq,D), k/v (B,H,Tk,D). causal: query t sees keys 0..t."""
    D = q.shape[-1]
    s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D)
    if causal:
        Tq, Tk = q.shape[-2], k.shape[-2]
        mask = torch.triu(torch.ones(Tq, Tk, dtype=torch.bool), diagonal=1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def split_heads(x, heads):
    """(B,T,heads*D) -> (B,heads,T,D); head h = columns h*D..(h+1)*D-1."""
    B, T, HD = x.shape
    return x.view(B, T, heads, HD // heads).transpose(1, 2)


def merge_heads(y):
    """(B,H,T,D) -> (B,T,H*D), heads concatenated in order."""
    B, H, T, D = y.shape
    return y.transpose(1, 2).reshape(B, T, H * D)


def rotate_half(x):
    """transformers rotate_half: [x1 | x2] -> [-x2 | x1] over the last dim."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope_cos_sin(T, D, theta):
    """transformers default RoPE: inv_freq = theta^(-2i/D), i < D/2; emb = cat(freqs, freqs)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)    # (T, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)                                 # (T, D)
    return emb.cos(), emb.sin()


def apply_rotary_pos_emb(x, cos, sin):
    """transformers apply_rotary_pos_emb for one tensor: x * cos + rotate_half(x) * sin. x (B,H,T,D)."""
    return x * cos + rotate_half(x) * sin


class LayerNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


# ----------------------------------------------------------------------------- gpt2

class GPT2Attention(nn.Module):
    """GPT2Attention: c_attn -> [q | k | v] (split at C), H heads of D = C/H, causal, c_proj."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg["width"]
        self.C, self.H = C, cfg["heads"]
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)

    def forward(self, x):
        q, k, v = self.qkv(x).split(self.C, dim=-1)
        y = sdpa(split_heads(q, self.H), split_heads(k, self.H), split_heads(v, self.H), causal=True)
        return self.proj(merge_heads(y))


class GPT2MLP(nn.Module):
    """GPT2MLP: c_fc (4C) -> gelu_new (tanh) -> c_proj."""

    def __init__(self, cfg):
        super().__init__()
        C, I = cfg["width"], cfg["mlp_ratio"] * cfg["width"]
        self.fc1 = nn.Linear(C, I)
        self.fc2 = nn.Linear(I, C)

    def forward(self, x):
        return self.fc2(gelu_tanh(self.fc1(x)))


class GPT2Block(nn.Module):
    """GPT2Block: h = h + attn(ln_1(h)); h = h + mlp(ln_2(h))."""

    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["width"], cfg["norm_eps"]
        self.norm1 = LayerNorm(C, eps)
        self.attn = GPT2Attention(cfg)
        self.norm2 = LayerNorm(C, eps)
        self.mlp = GPT2MLP(cfg)

    def forward(self, h):
        u = h + self.attn(self.norm1(h))
        return u + self.mlp(self.norm2(u))


class GPT2Stack(nn.Module):
    """GPT2LMHeadModel: wte + wpe, blocks, ln_f, lm_head tied to wte."""

    def __init__(self, cfg):
        super().__init__()
        T = 2 * cfg["copy_len"] - 1
        self.tok_emb = nn.Embedding(cfg["vocab"], cfg["width"])
        self.pos_emb = nn.Embedding(T, cfg["width"])
        self.blocks = nn.ModuleList([GPT2Block(cfg) for _ in range(cfg["layers"])])
        self.final_norm = LayerNorm(cfg["width"], cfg["norm_eps"])

    def forward(self, tokens):
        T = tokens.shape[1]
        h = self.tok_emb.weight[tokens] + self.pos_emb.weight[:T]
        for blk in self.blocks:
            h = blk(h)
        return torch.matmul(self.final_norm(h), self.tok_emb.weight.t())   # tied head


# ----------------------------------------------------------------------------- qwen3

class Qwen3Attention(nn.Module):
    """Qwen3Attention: q/k/v/o projections without bias; q_norm/k_norm (RMSNorm over head_dim) on
    q and k BEFORE apply_rotary_pos_emb; repeat_kv for GQA; scaling head_dim**-0.5; causal."""

    def __init__(self, cfg):
        super().__init__()
        C, H, Hkv, D = cfg["width"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
        self.H, self.Hkv, self.D, self.theta = H, Hkv, D, cfg["rope_theta"]
        self.q = nn.Linear(C, H * D, bias=False)
        self.k = nn.Linear(C, Hkv * D, bias=False)
        self.v = nn.Linear(C, Hkv * D, bias=False)
        self.q_norm = RMSNorm(D, cfg["norm_eps"])
        self.k_norm = RMSNorm(D, cfg["norm_eps"])
        self.proj = nn.Linear(H * D, C, bias=False)

    def forward(self, x):
        T = x.shape[1]
        q = self.q_norm(split_heads(self.q(x), self.H))       # (B,H,T,D), norm over D per head
        k = self.k_norm(split_heads(self.k(x), self.Hkv))     # (B,Hkv,T,D)
        v = split_heads(self.v(x), self.Hkv)
        cos, sin = rope_cos_sin(T, self.D, self.theta)        # positions 0..T-1
        q, k = apply_rotary_pos_emb(q, cos, sin), apply_rotary_pos_emb(k, cos, sin)
        # repeat_kv: kv head j serves query heads j*rep .. j*rep+rep-1, i.e. query head h uses h // rep
        rep = self.H // self.Hkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        return self.proj(merge_heads(sdpa(q, k, v, causal=True)))


class Qwen3MLP(nn.Module):
    """Qwen3MLP: down_proj(silu(gate_proj(x)) * up_proj(x)); blocklab fuses [up; gate] into fc1."""

    def __init__(self, cfg):
        super().__init__()
        C, I = cfg["width"], cfg["mlp_ratio"] * cfg["width"]
        self.fc1 = nn.Linear(C, 2 * I, bias=False)
        self.fc2 = nn.Linear(I, C, bias=False)

    def forward(self, x):
        value, gate = self.fc1(x).chunk(2, dim=-1)     # rows 0..I-1 = up, rows I..2I-1 = gate
        return self.fc2(silu(gate) * value)


class Qwen3Block(nn.Module):
    """Qwen3DecoderLayer: h = h + attn(input_layernorm(h)); h = h + mlp(post_attention_layernorm(h))."""

    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["width"], cfg["norm_eps"]
        self.norm1 = RMSNorm(C, eps)
        self.attn = Qwen3Attention(cfg)
        self.norm2 = RMSNorm(C, eps)
        self.mlp = Qwen3MLP(cfg)

    def forward(self, h):
        u = h + self.attn(self.norm1(h))
        return u + self.mlp(self.norm2(u))


class Qwen3Stack(nn.Module):
    """Qwen3ForCausalLM: embed_tokens (no position table), layers, norm, untied lm_head."""

    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab"], cfg["width"])
        self.blocks = nn.ModuleList([Qwen3Block(cfg) for _ in range(cfg["layers"])])
        self.final_norm = RMSNorm(cfg["width"], cfg["norm_eps"])
        self.head = nn.Linear(cfg["width"], cfg["vocab"], bias=False)

    def forward(self, tokens):
        h = self.tok_emb.weight[tokens]
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.final_norm(h))


# ----------------------------------------------------------------------------- sd

class SDAttention(nn.Module):
    """diffusers Attention (AttnProcessor): to_q/to_k/to_v without bias, to_out[0] with bias,
    heads of dim_head = C/H, scale dim_head**-0.5. context None = self-attention."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg["width"]
        self.H = cfg["heads"]
        self.q = nn.Linear(C, C, bias=False)
        self.k = nn.Linear(C, C, bias=False)
        self.v = nn.Linear(C, C, bias=False)
        self.proj = nn.Linear(C, C)

    def forward(self, x, context=None, causal=False):
        ctx = x if context is None else context
        q = split_heads(self.q(x), self.H)
        k = split_heads(self.k(ctx), self.H)
        v = split_heads(self.v(ctx), self.H)
        return self.proj(merge_heads(sdpa(q, k, v, causal=causal)))


class SDFeedForward(nn.Module):
    """diffusers FeedForward(activation_fn='geglu'): GEGLU proj (C -> 2I, bias), then Linear (I -> C, bias).
    GEGLU: hidden_states, gate = proj(x).chunk(2, dim=-1); return hidden_states * F.gelu(gate)."""

    def __init__(self, cfg):
        super().__init__()
        C, I = cfg["width"], cfg["mlp_ratio"] * cfg["width"]
        self.fc1 = nn.Linear(C, 2 * I)
        self.fc2 = nn.Linear(I, C)

    def forward(self, x):
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(value * gelu_erf(gate))


class SDBlock(nn.Module):
    """diffusers BasicTransformerBlock (norm_type 'layer_norm'): self-attn, cross-attn, GEGLU FF, each
    Pre-LN with a residual. blocklab names: norm1/attn, cross_norm/cross, norm2/mlp (diffusers:
    norm1/attn1, norm2/attn2, norm3/ff)."""

    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["width"], cfg["norm_eps"]
        self.norm1 = LayerNorm(C, eps)
        self.attn = SDAttention(cfg)
        self.cross_norm = LayerNorm(C, eps)
        self.cross = SDAttention(cfg)
        self.norm2 = LayerNorm(C, eps)
        self.mlp = SDFeedForward(cfg)

    def forward(self, h, context):
        h1 = h + self.attn(self.norm1(h), causal=True)
        h2 = h1 + self.cross(self.cross_norm(h1), context=context, causal=False)
        return h2 + self.mlp(self.norm2(h2))


class SDStack(nn.Module):
    """tok_emb + pos_emb, SD blocks cross-attending to the embedded first half, final LayerNorm, head."""

    def __init__(self, cfg):
        super().__init__()
        T = 2 * cfg["copy_len"] - 1
        self.copy_len = cfg["copy_len"]
        self.tok_emb = nn.Embedding(cfg["vocab"], cfg["width"])
        self.pos_emb = nn.Embedding(T, cfg["width"])
        self.blocks = nn.ModuleList([SDBlock(cfg) for _ in range(cfg["layers"])])
        self.final_norm = LayerNorm(cfg["width"], cfg["norm_eps"])
        self.head = nn.Linear(cfg["width"], cfg["vocab"], bias=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        h = self.tok_emb.weight[tokens] + self.pos_emb.weight[:T]
        context = h[:, :self.copy_len, :]      # embedded first half; gradients flow back through it
        for blk in self.blocks:
            h = blk(h, context)
        return self.head(self.final_norm(h))


STACKS = {"gpt2": GPT2Stack, "qwen3": Qwen3Stack, "sd": SDStack}


def build(cfg):
    return STACKS[cfg["block"]](cfg)


# ----------------------------------------------------------------------------- init

@torch.no_grad()
def init_fixture(model, embed_std=1.0):
    """Every term non-trivial, in named_parameters() order (deterministic given the torch seed):
    embeddings (tok_emb, pos_emb) N(0, embed_std^2); Linear weights xavier_uniform; every bias
    N(0, 0.1^2); norm weights (LayerNorm/RMSNorm, incl. q_norm/k_norm) 1 + 0.1 N(0,1).
    With a tied head use embed_std ~ 1/sqrt(C) so the logits stay O(1)."""
    owner = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = mod
    for name, p in model.named_parameters():
        mod = owner[name]
        if isinstance(mod, nn.Embedding):
            p.normal_(0.0, embed_std)
        elif isinstance(mod, (LayerNorm, RMSNorm)) and name.endswith(".weight"):
            p.copy_(1.0 + 0.1 * torch.randn_like(p))
        elif name.endswith(".bias"):
            p.normal_(0.0, 0.1)
        elif isinstance(mod, nn.Linear):
            nn.init.xavier_uniform_(p)
        else:
            raise ValueError(f"no init rule for {name}")
    return model


# ----------------------------------------------------------------------------- second formulation

def _mha(query, key, value, H, w_q, w_k, w_v, b_qkv, w_o, b_o, causal):
    """torch's own nn.MultiheadAttention core (F.multi_head_attention_forward); inputs (B,T,C)."""
    C = query.shape[-1]
    mask = None
    if causal:
        mask = torch.triu(torch.ones(query.shape[1], key.shape[1], dtype=torch.bool), diagonal=1)
    out, _ = F.multi_head_attention_forward(
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), C, H,
        None, b_qkv, None, None, False, 0.0, w_o, b_o, training=False, need_weights=False,
        attn_mask=mask, use_separate_proj_weight=True, q_proj_weight=w_q, k_proj_weight=w_k,
        v_proj_weight=w_v)
    return out.transpose(0, 1)


def _alt_gpt2(P, cfg, tokens):
    """torch built-ins: F.layer_norm, F.multi_head_attention_forward, F.gelu(approximate='tanh')."""
    C, H, eps = cfg["width"], cfg["heads"], cfg["norm_eps"]
    T = tokens.shape[1]
    x = F.embedding(tokens, P["tok_emb.weight"]) + F.embedding(torch.arange(T), P["pos_emb.weight"])
    for l in range(cfg["layers"]):
        b = f"blocks.{l}."
        a = F.layer_norm(x, (C,), P[b + "norm1.weight"], P[b + "norm1.bias"], eps)
        w = P[b + "attn.qkv.weight"]
        x = x + _mha(a, a, a, H, w[:C], w[C:2 * C], w[2 * C:], P[b + "attn.qkv.bias"],
                     P[b + "attn.proj.weight"], P[b + "attn.proj.bias"], causal=True)
        m = F.layer_norm(x, (C,), P[b + "norm2.weight"], P[b + "norm2.bias"], eps)
        f = F.gelu(F.linear(m, P[b + "mlp.fc1.weight"], P[b + "mlp.fc1.bias"]), approximate="tanh")
        x = x + F.linear(f, P[b + "mlp.fc2.weight"], P[b + "mlp.fc2.bias"])
    x = F.layer_norm(x, (C,), P["final_norm.weight"], P["final_norm.bias"], eps)
    return F.linear(x, P["tok_emb.weight"])


def _alt_qwen3(P, cfg, tokens):
    """Per-sequence, per-head loops; RoPE as complex rotation of the pairs (x_i, x_{i+D/2});
    GQA by explicit kv index h // (H/Hkv); RMSNorm via division by sqrt; causal mask by slicing."""
    H, Hkv, D, eps = cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["norm_eps"]
    theta, I = cfg["rope_theta"], cfg["mlp_ratio"] * cfg["width"]
    B, T = tokens.shape

    def rms(x, w):
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps) * w

    half = D // 2
    ang = torch.arange(T, dtype=torch.float64)[:, None] * \
        torch.pow(torch.tensor(theta, dtype=torch.float64), -torch.arange(half, dtype=torch.float64) * 2 / D)
    rot = torch.polar(torch.ones_like(ang), ang)                           # (T, D/2) complex

    def rope(x):                                                          # x (T, D)
        z = torch.complex(x[:, :half], x[:, half:]) * rot
        return torch.cat([z.real, z.imag], dim=-1)

    outs = []
    for bi in range(B):
        x = P["tok_emb.weight"][tokens[bi]]                               # (T, C)
        for l in range(cfg["layers"]):
            b = f"blocks.{l}."
            a = rms(x, P[b + "norm1.weight"])
            q, k, v = a @ P[b + "attn.q.weight"].T, a @ P[b + "attn.k.weight"].T, a @ P[b + "attn.v.weight"].T
            ys = []
            for h in range(H):
                g = h // (H // Hkv)
                qh = rope(rms(q[:, h * D:(h + 1) * D], P[b + "attn.q_norm.weight"]))
                kh = rope(rms(k[:, g * D:(g + 1) * D], P[b + "attn.k_norm.weight"]))
                vh = v[:, g * D:(g + 1) * D]
                rows = []
                for t in range(T):
                    s = (kh[:t + 1] @ qh[t]) * D ** -0.5
                    p = torch.exp(s - s.max())
                    rows.append((p / p.sum()) @ vh[:t + 1])
                ys.append(torch.stack(rows))
            x = x + torch.cat(ys, dim=-1) @ P[b + "attn.proj.weight"].T
            m = rms(x, P[b + "norm2.weight"])
            w1 = P[b + "mlp.fc1.weight"]
            up, gate = m @ w1[:I].T, m @ w1[I:].T
            x = x + (F.silu(gate) * up) @ P[b + "mlp.fc2.weight"].T
        outs.append(rms(x, P["final_norm.weight"]) @ P["head.weight"].T)
    return torch.stack(outs)


def _alt_sd(P, cfg, tokens):
    """torch built-ins: F.layer_norm, F.multi_head_attention_forward (self, causal; cross with a
    separate key/value sequence), GEGLU via F.gelu on the second half of fc1's output."""
    C, H, eps, n = cfg["width"], cfg["heads"], cfg["norm_eps"], cfg["copy_len"]
    I = cfg["mlp_ratio"] * C
    T = tokens.shape[1]
    x = F.embedding(tokens, P["tok_emb.weight"]) + F.embedding(torch.arange(T), P["pos_emb.weight"])
    ctx = x[:, :n]
    for l in range(cfg["layers"]):
        b = f"blocks.{l}."
        a = F.layer_norm(x, (C,), P[b + "norm1.weight"], P[b + "norm1.bias"], eps)
        x = x + _mha(a, a, a, H, P[b + "attn.q.weight"], P[b + "attn.k.weight"], P[b + "attn.v.weight"],
                     None, P[b + "attn.proj.weight"], P[b + "attn.proj.bias"], causal=True)
        a = F.layer_norm(x, (C,), P[b + "cross_norm.weight"], P[b + "cross_norm.bias"], eps)
        x = x + _mha(a, ctx, ctx, H, P[b + "cross.q.weight"], P[b + "cross.k.weight"], P[b + "cross.v.weight"],
                     None, P[b + "cross.proj.weight"], P[b + "cross.proj.bias"], causal=False)
        m = F.layer_norm(x, (C,), P[b + "norm2.weight"], P[b + "norm2.bias"], eps)
        w1, b1 = P[b + "mlp.fc1.weight"], P[b + "mlp.fc1.bias"]
        g = F.linear(m, w1[:I], b1[:I]) * F.gelu(F.linear(m, w1[I:], b1[I:]))
        x = x + F.linear(g, P[b + "mlp.fc2.weight"], P[b + "mlp.fc2.bias"])
    x = F.layer_norm(x, (C,), P["final_norm.weight"], P["final_norm.bias"], eps)
    return F.linear(x, P["head.weight"])


def alt_forward(P, cfg, tokens):
    """Second formulation of the stack: P maps blocklab names to tensors; returns logits (B,T,V)."""
    return {"gpt2": _alt_gpt2, "qwen3": _alt_qwen3, "sd": _alt_sd}[cfg["block"]](P, cfg, tokens)
