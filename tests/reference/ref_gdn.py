"""Gated DeltaNet layer (between its projections) in float64, token by token.

Written from the published equations (Gated DeltaNet, Yang et al.; Qwen3-Next's model card
and config semantics), not from Tessera's C++: the plain recurrent form, one token at a
time, with no chunking at all.

For token t with projected inputs p_t (q | k | v of all heads), a_t, b_t, z_t:
    c_t  = SiLU(sum_j w[:, j] * p_{t-K+1+j})          causal depthwise conv, p_{<0} = 0
    q̂    = q / sqrt(|q|^2 + 1e-6) / sqrt(dk),  k̂ = k / sqrt(|k|^2 + 1e-6)   per k-head
    g    = -exp(A_log) * softplus(a + dt_bias),  beta = sigmoid(b)        per v-head
    S    = e^g S;  S = S + k̂ (beta (v - S^T k̂))^T;  o = S^T q̂           S: [dk, dv]
    y    = o / sqrt(mean(o^2) + eps) * w_norm * SiLU(z)                  per v-head
v-head h reads k-head h // (Hv / Hk), or h % Hk when `tiled`.
"""
import numpy as np


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def silu(x):
    return x / (1.0 + np.exp(-x))


def gdn_layer(qkv, conv_w, a, b, a_log, dt_bias, z, norm_w, hk, hv, dk, dv, tiled=False, eps=1e-6):
    """All inputs float64 arrays; returns (y [T, hv*dv], o [T, hv*dv], S [hv, dk, dv])."""
    T, C = qkv.shape
    K = conv_w.shape[1]
    padded = np.concatenate([np.zeros((K - 1, C)), qkv], axis=0)
    c = np.empty_like(qkv)
    for t in range(T):
        c[t] = silu(np.sum(conv_w * padded[t:t + K].T, axis=1))
    S = np.zeros((hv, dk, dv))
    o = np.zeros((T, hv, dv))
    for t in range(T):
        q = c[t, :hk * dk].reshape(hk, dk)
        k = c[t, hk * dk:2 * hk * dk].reshape(hk, dk)
        v = c[t, 2 * hk * dk:].reshape(hv, dv)
        q = q / np.sqrt(np.sum(q * q, axis=1, keepdims=True) + 1e-6) / np.sqrt(dk)
        k = k / np.sqrt(np.sum(k * k, axis=1, keepdims=True) + 1e-6)
        g = -np.exp(a_log) * softplus(a[t] + dt_bias)
        beta = 1.0 / (1.0 + np.exp(-b[t]))
        for h in range(hv):
            kh = h % hk if tiled else h // (hv // hk)
            S[h] *= np.exp(g[h])
            u = beta[h] * (v[h] - S[h].T @ k[kh])
            S[h] += np.outer(k[kh], u)
            o[t, h] = S[h].T @ q[kh]
    rms = np.sqrt(np.mean(o * o, axis=2, keepdims=True) + eps)
    y = o / rms * norm_w * silu(z.reshape(T, hv, dv))
    return y.reshape(T, hv * dv), o.reshape(T, hv * dv), S
