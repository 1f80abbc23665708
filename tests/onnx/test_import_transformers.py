"""Tiny BERT, RoBERTa and GPT-2 from Hugging Face ``transformers`` (random weights, 2 layers,
hidden 64) and a GPT-2-shaped model written with ``torch.nn``, exported by torch.onnx at
opset 17 with symbolic batch and sequence axes, import and match onnxruntime at two batch
sizes; the imported BERT fine-tunes with a classification head as torch does.

What these exports bring: int64 ``input_ids`` into Gather from the embedding tables,
LayerNormalization, Erf (exact GELU) or the tanh GELU, CumSum (RoBERTa's position ids),
Einsum, Trilu, the boolean/int64 mask plumbing (Cast to bool, Not, And, Equal on int64,
Expand, Where), and constant folding of the embedding path (BERT's token-type buffer goes
through GatherElements). Skipped where ``transformers`` is not installed (``make torch``).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from singa_graph import onnx as sonnx_io
from singa_graph import opt
from tests.helpers import hf_transformers

tf = hf_transformers()
import torch  # noqa: E402  (after the skip: hf_transformers needs torch)

VOCAB, SEQ = 100, 8


def _config(kind):
    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if kind == "bert":
        return tf.BertModel(tf.BertConfig(**common))
    if kind == "roberta":
        return tf.RobertaModel(tf.RobertaConfig(**common))
    return tf.GPT2Model(tf.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2,
                                      n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


class _HiddenStates(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]


def _export(module, args, names, path, opset=17):
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes["out"] = {0: "batch"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, path, opset_version=opset, dynamo=False,
                          input_names=names, output_names=["out"], dynamic_axes=axes)
    return path


def _ids(batch, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, (batch, SEQ)).astype(np.int64)
    mask = np.ones((batch, SEQ), np.int64)
    mask[0, SEQ - 3:] = 0  # one padded sequence
    ids[0, SEQ - 3:] = 1  # RoBERTa's padding id
    return ids, mask


def _matches_onnxruntime(path, feeds_of_batch):
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    m = sonnx_io.load(path)
    for batch in (2, 3):
        feeds = feeds_of_batch(batch)
        want = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], feeds)))[0]
        got = m(*feeds).to_numpy()
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), batch


@pytest.mark.parametrize("kind", ["bert", "roberta", "gpt2"])
def test_hugging_face_models_match_onnxruntime(kind, tmp_path):
    torch.manual_seed(0)
    ids, mask = (torch.from_numpy(a) for a in _ids(2, 0))
    path = _export(_HiddenStates(_config(kind)), (ids, mask), ["input_ids", "attention_mask"],
                   str(tmp_path / f"{kind}.onnx"))
    _matches_onnxruntime(path, lambda b: list(_ids(b, b)))


# ---------------------------------------------------------------------- GPT from torch.nn
class _Block(torch.nn.Module):
    """A pre-norm GPT-2 block; attention scores through einsum, a causal mask from tril."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=2))
        att = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d // h)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)),
                                                     approximate="tanh"))


class _GPT(torch.nn.Module):
    def __init__(self, d=64, heads=4, layers=2):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(VOCAB, d), torch.nn.Embedding(64, d)
        self.blocks = torch.nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()  # the head tied to the token embedding


@pytest.mark.parametrize("opset", [17, 20])  # 20: GELU as the Gelu op (tanh)
def test_gpt_from_torch_nn_matches_onnxruntime(opset, tmp_path):
    import onnx

    torch.manual_seed(0)
    ids = torch.from_numpy(_ids(2, 0)[0])
    path = _export(_GPT(), (ids,), ["input_ids"], str(tmp_path / "gpt.onnx"), opset)
    types = {n.op_type for n in onnx.load(path).graph.node}
    assert {"Einsum", "Trilu"} <= types and ("Gelu" in types) == (opset >= 20)
    _matches_onnxruntime(path, lambda b: [_ids(b, b)[0]])


# ---------------------------------------------------------------------- fine-tuning
class _Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = _config("bert")
        self.head = torch.nn.Linear(64, 3)
        # torch.onnx writes equal initialisers once (all LayerNorm weights are 1, all biases
        # 0), which would tie them in the imported model: make every parameter distinct
        with torch.no_grad():
            for p in self.parameters():
                p.add_(0.02 * torch.randn_like(p))

    def forward(self, input_ids, attention_mask):
        return self.head(self.bert(input_ids=input_ids,
                                   attention_mask=attention_mask).pooler_output)


def test_bert_with_a_classification_head_fine_tunes_as_torch(tmp_path):
    """Five SGD steps of the imported BERT + head in graph mode give torch's losses, and the
    loss goes down."""
    torch.manual_seed(0)
    model = _Classifier()
    ids, mask = _ids(4, 0)
    y = np.array([0, 1, 2, 1], np.int32)
    path = _export(model, (torch.from_numpy(ids), torch.from_numpy(mask)),
                   ["input_ids", "attention_mask"], str(tmp_path / "bert_cls.onnx"))

    m = sonnx_io.load(path)
    m.set_optimizer(opt.SGD(lr=0.05))
    m.compile([ids, mask], is_train=True, use_graph=True)
    ours = [float(m(ids, mask, y)[1].to_numpy().ravel()[0]) for _ in range(5)]

    model.train()
    sgd = torch.optim.SGD(model.parameters(), lr=0.05)
    theirs = []
    for _ in range(5):
        sgd.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(torch.from_numpy(ids), torch.from_numpy(mask)), torch.from_numpy(y).long())
        loss.backward()
        sgd.step()
        theirs.append(float(loss.detach()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert ours[-1] < ours[0]


def test_imported_bert_exports_again(tmp_path):
    """LayerNormalization imported as the fused LayerNorm op is written back as
    LayerNormalization; the re-exported BERT passes the full check and matches."""
    import onnxruntime as ort

    torch.manual_seed(0)
    ids, mask = _ids(2, 0)
    path = _export(_HiddenStates(_config("bert")), (torch.from_numpy(ids),
                                                    torch.from_numpy(mask)),
                   ["input_ids", "attention_mask"], str(tmp_path / "bert.onnx"))
    again = sonnx_io.export(sonnx_io.load(path), inputs=[ids, mask],
                            input_names=["input_ids", "attention_mask"])
    assert sum(n.op_type == "LayerNormalization" for n in again.graph.node) == 5
    run = [ort.InferenceSession(p, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "attention_mask": mask})[0]
        for p in (path, again.SerializeToString())]
    np.testing.assert_allclose(run[1], run[0], rtol=1e-5, atol=1e-5)
